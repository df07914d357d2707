"""The loggers' names in conf/logger/*.yaml (``_target_: ropelab.loggers.RunCSVLogger``), recorded in every run's
config.yaml; the code is ``ropelab.core.loggers``."""

from ropelab.core.loggers import RunCSVLogger, RunWandbLogger

__all__ = ["RunCSVLogger", "RunWandbLogger"]
