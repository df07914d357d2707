"""The one record reader: a run folder (``results/<table>/<job>/`` or ``runs/…/<job>/``) as a ``Record`` with its
summary (summary.json), its config (config.yaml, nested as saved and flattened to dotted keys), its metrics
(metrics.csv, read on first use), its identity (``ropelab.core.identity``), CPU kind, commit and seed; and the
folders under a table that are runs (``run_dirs``), nested tables included (``results/calibration/<task>/``).

A file that is missing or does not parse reads as absent (None), never as an error: a job killed at start-up still
has a folder, and a report over a sweep in progress must read every other folder."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ropelab.core import identity
from ropelab.core.config import flatten
from ropelab.core.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

SUMMARY, CONFIG, METRICS = "summary.json", "config.yaml", "metrics.csv"
# never runs, and may be large (checkpoints, W&B's files): a walk does not enter them
SKIP_DIRS = {"report", "wandb", "checkpoints", ".submitit", ".hydra", "__pycache__"}

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader: 10× faster on ~100 configs


def read_yaml(path: Path) -> Any:
    """The parsed file, or None when it is missing or not YAML."""
    try:
        return yaml.load(Path(path).read_text(), Loader=_Loader)
    except (OSError, yaml.YAMLError):
        return None


def read_json(path: Path) -> Any:
    """The parsed file, or None when it is missing or not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True, eq=False)
class Record:
    path: Path
    summary: dict | None      # None: no summary.json (or unreadable)
    saved_config: dict | None  # config.yaml as saved (nested); None: none (or unreadable)
    # where a reader reads the record as more than its files: the table it was read in (``results/<table>/<job>``),
    # and the flat config it is selected by (the card's: config.yaml over today's defaults; an analysis row's keys)
    table: str = ""
    read_as: dict[str, Any] | None = field(default=None, repr=False)

    @cached_property
    def config(self) -> dict[str, Any]:
        """config.yaml flattened to dotted keys (``pos.momentum.gamma``), or ``read_as``; empty when there is none."""
        if self.read_as is not None:
            return self.read_as
        return flatten(self.saved_config) if self.saved_config else {}

    @cached_property
    def metrics(self) -> pd.DataFrame | None:
        """metrics.csv (one row per logged step), or None when it is missing or unreadable."""
        import pandas as pd

        if not (self.path / METRICS).is_file():
            return None
        try:
            return pd.read_csv(self.path / METRICS)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
            return None

    def metrics_rows(self) -> list[list[str]]:
        """metrics.csv's rows as written (header first; the digits as strings: what a bit-identity check compares),
        or [] when there is none."""
        import csv

        try:
            with open(self.path / METRICS, newline="") as f:
                return list(csv.reader(f))
        except OSError:
            return []

    @property
    def status(self) -> str:
        return (self.summary or {}).get("status") or "no summary"

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def final(self) -> dict[str, Any]:
        return (self.summary or {}).get("final") or {}

    @property
    def seed(self) -> int | None:
        seed = self.config.get("seed", (self.summary or {}).get("seed"))
        return None if seed is None else int(seed)

    @property
    def machine(self) -> dict[str, Any]:
        return (self.summary or {}).get("machine") or {}

    @property
    def commit(self) -> str:
        """The code's commit, short (seven hex digits), or "unknown"."""
        return str(self.machine.get("commit") or "unknown")[:7]

    @property
    def hardware(self) -> str:
        """What the record trained on: its GPU, else its CPU's model name (the accelerator where neither was
        recorded)."""
        return str(self.machine.get("gpu") or (self.machine.get("cpu") or {}).get("model")
                   or (self.summary or {}).get("accelerator") or "unknown")

    @property
    def identity(self) -> dict[str, Any] | None:
        """What the run computed with (``ropelab.core.identity.of_record``); None without a summary."""
        return identity.of_record(self.summary, self.saved_config) if self.summary is not None else None


def read(path: str | Path) -> Record:
    """The record in folder ``path``; its parts that are missing or unreadable read as None."""
    path = Path(path)
    summary, saved = read_json(path / SUMMARY), read_yaml(path / CONFIG)
    return Record(path=path, summary=summary if isinstance(summary, dict) else None,
                  saved_config=saved if isinstance(saved, dict) else None)


def run_dirs(folder: str | Path) -> list[Path]:
    """Folders under ``folder`` (itself included) that are runs: they hold summary.json, config.yaml or a Hydra
    job's .hydra/; a run's own subfolders are not searched. Linked folders are followed (compare_runs and tables
    that share a record link them)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        d = Path(dirpath)
        if SUMMARY in filenames or CONFIG in filenames or (d / ".hydra" / "overrides.yaml").is_file():
            found.append(d)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(n for n in dirnames if n not in SKIP_DIRS and not n.startswith("."))
    return sorted(found)


def under(folder: str | Path, completed: bool = False) -> list[Record]:
    """The records under ``folder`` (a table, a folder of tables, a sweep or one run), in path order; with
    ``completed`` only those whose summary says so."""
    found = [read(d) for d in run_dirs(folder)] if Path(folder).is_dir() else []
    return [r for r in found if r.completed] if completed else found


class UnsafeCheckpoint(ConfigError):
    """A checkpoint that pickles more than tensors and plain containers: refused, never unpickled."""


def checkpoint_weights(file: str | Path) -> dict[str, Any]:
    """The model's weights in a run's Lightning checkpoint (``state_dict``'s ``model.`` entries, prefix removed),
    loaded with ``weights_only=True``: a run folder someone downloaded must not run code when an analysis reads it,
    so a checkpoint holding a callable or a class is refused before any of it runs."""
    import pickle

    import torch

    try:
        saved = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        why = next((line.strip() for line in str(err).splitlines() if "Unsupported" in line), "not weights only")
        raise UnsafeCheckpoint(f"{file}: refused, it holds more than weights ({why}); loading it could run code") \
            from None
    state = saved.get("state_dict", saved)
    return {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
