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

from ropelab.analysis.stats import train_loss
from ropelab.core import runs

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


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: str(node) if isinstance(node, list) else node}


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
