"""The CSV logger's old name, ``ropelab.loggers.RunCSVLogger``: the records made before conf/logger/ named
``ropelab.core.loggers`` carry it in their config.yaml, and ropelab.experiments.reproduce still names it when it
retrains one. Delete this module once reproduce names ``ropelab.core.loggers.RunCSVLogger``."""

from ropelab.core.loggers import RunCSVLogger, RunWandbLogger

__all__ = ["RunCSVLogger", "RunWandbLogger"]
