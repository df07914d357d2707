"""Loggers: ``metrics.csv`` in the run folder (default) and W&B (offline unless a key and network exist).

Lightning's own CSVLogger deletes an existing ``metrics.csv`` when a run restarts; ours keeps it and, on
resume, drops the rows logged after the checkpoint, so a resumed run's file equals an uninterrupted one's.
"""

from __future__ import annotations

import csv
from pathlib import Path

from lightning.fabric.loggers.csv_logs import _ExperimentWriter
from lightning.pytorch.loggers import CSVLogger


class _KeepingWriter(_ExperimentWriter):
    def _check_log_dir_exists(self) -> None:  # keep what is there
        path = Path(self.metrics_file_path)
        if path.is_file():
            with path.open(newline="") as f:
                self.metrics_keys = sorted(csv.DictReader(f).fieldnames or [])


class RunCSVLogger(CSVLogger):
    """CSV metrics written straight into ``save_dir/metrics.csv`` (no name/version subfolders)."""

    def __init__(self, save_dir: str, flush_logs_every_n_steps: int = 50):
        super().__init__(save_dir=save_dir, name="", version="", flush_logs_every_n_steps=flush_logs_every_n_steps)

    @property
    def experiment(self):
        if self._experiment is None:
            Path(self.log_dir).mkdir(parents=True, exist_ok=True)
            self._experiment = _KeepingWriter(log_dir=self.log_dir)
        return self._experiment

    def log_hyperparams(self, params=None, *args, **kwargs) -> None:  # the run folder has config.yaml already
        pass


def truncate_metrics(metrics_csv: Path, from_step: int) -> None:
    """Drop rows logged at ``step >= from_step`` (they will be logged again by the resumed run)."""
    metrics_csv = Path(metrics_csv)
    if not metrics_csv.is_file():
        return
    with metrics_csv.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames or [], [r for r in reader if int(float(r["step"])) < from_step]
    with metrics_csv.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
