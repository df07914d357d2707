"""The sweep callback's name in conf/config.yaml (``_target_: ropelab.sweep_summary.SweepSummary``); the code is
``ropelab.core.sweep_summary``."""

from ropelab.core.sweep_summary import SweepSummary

__all__ = ["SweepSummary"]
