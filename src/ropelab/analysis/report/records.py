"""Reading run folders: which folders under a sweep are runs, and each run's config, summary, metrics and
positional trace, as one ``Run``. Folders that never got far (a rejected config, a job killed at start-up) still
read: their config comes from Hydra's ``.hydra/`` or the folder name, their status from whatever was written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

import tasks

from ropelab.analysis.stats import train_loss
from ropelab.core import record, runs
from ropelab.core.config import flatten
from ropelab.core.record import read_yaml


@dataclass
class Run:
    """A run folder as a report reads it: its record, its config (config.yaml's; before the run wrote one, Hydra's
    or the folder name's: ``full_config`` False) and what the report derives from its curves."""
    record: record.Record
    rel: str
    config: dict[str, Any]
    full_config: bool
    smoothed: pd.Series | None = None  # smoothed train/loss by step
    lockin: float | None = None  # step; NaN = none; None = undefined
    onset: float | None = None  # step the loss leaves its plateau; NaN = never; None = undefined
    final: dict[str, float] = field(default_factory=dict)
    group_name: str = ""  # the task's group key (gap, depth, length, shift) that ``exact_by_group`` is per
    exact_by_group: dict[str, dict[str, float]] = field(default_factory=dict)  # split → group → exact match

    @property
    def path(self) -> Path:
        return self.record.path

    @property
    def summary(self) -> dict | None:
        return self.record.summary

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def metrics(self) -> pd.DataFrame | None:
        return self.record.metrics


def exact_by_group(summary: dict | None, task: str | None) -> tuple[str, dict[str, dict[str, float]]]:
    """(group key, split → group → exact match) from a summary's ``per_group``. Records of older code name no key
    (the task's default one) and store bare fractions instead of ``{"exact": …, "n": …}``."""
    per_group = (summary or {}).get("per_group") or {}
    splits = {split: {group: counts["exact"] if isinstance(counts, dict) else counts for group, counts in by.items()}
              for split, by in per_group.items() if split not in ("group", "metric") and isinstance(by, dict)}
    if not splits:
        return "", {}
    return per_group.get("group") or getattr(tasks.registry().get(task), "group_name", "group"), splits


def _parse_override(item: str) -> tuple[str, Any] | None:
    key, sep, value = item.lstrip("+~").partition("=")
    if not sep:
        return None
    key = {"task": "task.name", "pos": "pos.name"}.get(key, key)
    try:
        value = yaml.safe_load(value)
    except yaml.YAMLError:
        pass
    return key, value


def load_run(path: Path, sweep: Path) -> Run:
    rec = record.read(path)
    summary, raw, full = rec.summary, rec.saved_config, True
    if raw is None:
        raw = read_yaml(path / ".hydra" / "config.yaml")  # composed by Hydra when the job started
        if isinstance(raw, dict):
            raw.pop("hydra", None)
    config = flatten(raw) if isinstance(raw, dict) else {}
    if not config:
        full = False
        overrides = read_yaml(path / ".hydra" / "overrides.yaml")
        items = overrides if isinstance(overrides, list) else (path.name.split(",") if "=" in path.name else [])
        config = dict(filter(None, (_parse_override(str(i)) for i in items)))
        for key, skey in (("task.name", "task"), ("pos.name", "pos"), ("seed", "seed")):
            if summary and skey in summary:
                config.setdefault(key, summary[skey])
    run = Run(record=rec, rel=str(path.relative_to(sweep)) if path != sweep else path.name, config=config,
              full_config=full)
    run.final = {k: float(v) for k, v in rec.final.items() if isinstance(v, (int, float))}
    run.group_name, run.exact_by_group = exact_by_group(summary, config.get("task.name"))
    return run


def smoothed_train_loss(metrics: pd.DataFrame | None, window: int) -> pd.Series:
    return train_loss(metrics).rolling(window, min_periods=1).mean()


def steps_trained(run: Run) -> int | None:
    """Steps trained: from the summary, else (running, interrupted) the last step in metrics.csv."""
    steps = (run.summary or {}).get("steps")
    if steps is None and run.metrics is not None and "step" in run.metrics and len(run.metrics):
        steps = int(run.metrics["step"].max()) + 1
    return steps


def load_trace(run: Run) -> dict[str, np.ndarray] | None:
    """positional_trace.npz: each learned positional parameter at step 0 and every validation, plus ``steps``."""
    path = run.path / runs.TRACE
    if not path.is_file():
        return None
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError):
        return None


def parameter_kind(name: str) -> str:
    """What a traced parameter is, from its name: omega (frequencies), amplitude, phase or other."""
    n = name.lower()
    if "omega" in n or "freq" in n:
        return "omega"
    if "amp" in n:
        return "amplitude"
    if "phase" in n or "delta" in n or n in ("phi",):
        return "phase"
    return "other"
