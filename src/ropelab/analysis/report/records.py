"""Reading run folders: which folders under a sweep are runs, and each run's config, summary, metrics and
positional trace, as one ``Run``. Folders that never got far (a rejected config, a job killed at start-up) still
read: their config comes from Hydra's ``.hydra/`` or the folder name, their status from whatever was written."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

import tasks

from ropelab.analysis.stats import train_loss
from ropelab.core import runs
from ropelab.core.config import flatten

SKIP_DIRS = {"report", "wandb", "checkpoints", ".submitit", ".hydra", "__pycache__"}


@dataclass
class Run:
    path: Path
    rel: str
    config: dict[str, Any]
    full_config: bool
    summary: dict | None
    status: str
    metrics: pd.DataFrame | None = None
    smoothed: pd.Series | None = None  # smoothed train/loss by step
    lockin: float | None = None  # step; NaN = none; None = undefined
    onset: float | None = None  # step the loss leaves its plateau; NaN = never; None = undefined
    final: dict[str, float] = field(default_factory=dict)
    group_name: str = ""  # the task's group key (gap, depth, length, shift) that ``exact_by_group`` is per
    exact_by_group: dict[str, dict[str, float]] = field(default_factory=dict)  # split → group → exact match


def exact_by_group(summary: dict | None, task: str | None) -> tuple[str, dict[str, dict[str, float]]]:
    """(group key, split → group → exact match) from a summary's ``per_group``. Records of older code name no key
    (the task's default one) and store bare fractions instead of ``{"exact": …, "n": …}``."""
    per_group = (summary or {}).get("per_group") or {}
    splits = {split: {group: counts["exact"] if isinstance(counts, dict) else counts for group, counts in by.items()}
              for split, by in per_group.items() if split not in ("group", "metric") and isinstance(by, dict)}
    if not splits:
        return "", {}
    return per_group.get("group") or getattr(tasks.registry().get(task), "group_name", "group"), splits


def find_run_dirs(sweep: Path) -> list[Path]:
    """Folders under ``sweep`` that are runs: they hold summary.json, config.yaml or a Hydra job's .hydra/."""
    found = []
    for dirpath, dirnames, filenames in os.walk(sweep, followlinks=True):  # compare_runs links its runs
        d = Path(dirpath)
        if "summary.json" in filenames or "config.yaml" in filenames or (d / ".hydra" / "overrides.yaml").is_file():
            found.append(d)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(n for n in dirnames if n not in SKIP_DIRS and not n.startswith("."))
    return sorted(found)


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader: 10× faster on ~100 configs


def read_yaml(path: Path) -> Any:
    """The parsed file, or None when it is missing or not YAML."""
    try:
        return yaml.load(path.read_text(), Loader=_Loader)
    except (OSError, yaml.YAMLError):
        return None


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
    summary = None
    if (path / "summary.json").is_file():
        try:
            summary = json.loads((path / "summary.json").read_text())
        except (OSError, json.JSONDecodeError):
            summary = None
    raw, full = read_yaml(path / "config.yaml"), True
    if not isinstance(raw, dict):
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
    status = (summary or {}).get("status") or "no summary"
    run = Run(path=path, rel=str(path.relative_to(sweep)) if path != sweep else path.name, config=config,
              full_config=full, summary=summary, status=status)
    final = (summary or {}).get("final") or {}
    run.final = {k: float(v) for k, v in final.items() if isinstance(v, (int, float))}
    run.group_name, run.exact_by_group = exact_by_group(summary, config.get("task.name"))
    if (path / "metrics.csv").is_file():
        try:
            run.metrics = pd.read_csv(path / "metrics.csv")
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
            run.metrics = None
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
