"""A sweep as a table: its runs, which config keys it varies (the table's rows and columns, detected from the
configs), and which runs fall in each cell (task × column)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ropelab.analysis.report.records import Run, load_run, smoothed_train_loss
from ropelab.core.record import run_dirs
from ropelab.analysis.stats import Landmarks, lockin_step, onset_step, train_loss
from ropelab.core import identity

# config keys that never define a table column: the seed, bookkeeping and the settings that change what a job
# computes without naming it (ropelab.core.identity, the one list: they are compared between a table's records, not
# tabulated; precision and machine are listed in "Machines and code"), the evaluation batch size and how the
# per-group accuracy is keyed (task.group_by: it changes no example)
IGNORED_KEYS = {"seed", *identity.BOOKKEEPING, *identity.COMPUTE, "data.eval_batch_size", "task.group_by"}
IGNORED_PREFIXES = ("logger.", "hydra.")
TASK_ORDER = ["dyck3", "bio_rotation", "mod_arith", "indirect_indexing", "assoc_recall", "variable_tracking",
              "global_counting", "mean_pooling", "code_lm"]
SCHEME_ORDER = ["rope", "spectral", "bifocal", "pope", "rope_half", "alibi", "learned_abs", "sinusoidal", "nope"]
SHORT = {"pos.momentum.gamma": "γ", "pos.base": "base", "pos.freqs": "freqs"}
GAMMA = "pos.momentum.gamma"
RUNG_LABELS = ("task.rung",)  # indirect_indexing's size ladder (issue 22): the rung's sizes follow it


def value_label(v: Any) -> str:
    """A config value as the table shows it: 2.0 → "2", None or NaN → "∅"."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "∅" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def ordered(values: Iterable[Any], preferred: list[str] | None = None) -> list[Any]:
    """Distinct values: those in ``preferred`` first in its order, then numbers ascending, then the rest."""
    def sort_key(v):
        if preferred and str(v) in preferred:
            return (0, preferred.index(str(v)), 0.0, "")
        try:
            return (1, 0, float(v), "")
        except (TypeError, ValueError):
            return (2, 0, 0.0, str(v))
    return sorted(set(values), key=sort_key)


class Sweep:
    def __init__(self, root: Path, rule: Landmarks):
        self.root, self.rule = Path(root), rule
        found = [load_run(p, self.root) for p in run_dirs(self.root)]
        # a folder that never reached training (a rejected config, a job killed at start-up) has no table cell
        self.never_started = [r for r in found if not r.full_config and r.status in ("no summary", "failed")]
        self.runs = [r for r in found if r not in self.never_started]
        for run in self.runs:
            run.smoothed = smoothed_train_loss(run.metrics, rule.smooth)
            run.lockin = lockin_step(run.smoothed, rule)
            run.onset = onset_step(train_loss(run.metrics), rule)
        self._fill_partial_configs()
        self.factors = self.detect_factors()
        self.row_key = "task.name"
        self.col_keys = [k for k in self.factors if k != self.row_key]
        self.cells = self._cells()

    # which config keys the sweep varies
    def _table(self, full_only: bool) -> pd.DataFrame:
        runs = [r for r in self.runs if r.full_config or not full_only] or self.runs
        return pd.DataFrame([{k: value_label(v) for k, v in r.config.items()} for r in runs])

    def _fill_partial_configs(self) -> None:
        full = self._table(full_only=True)
        for run in self.runs:
            if run.full_config or full.empty:
                continue
            same = full
            for k in ("task.name", "pos.name"):
                if k in run.config and k in same:
                    narrowed = same[same[k] == value_label(run.config[k])]
                    same = narrowed if not narrowed.empty else same
            for k in full.columns:
                if k not in run.config and not same[k].dropna().empty:
                    run.config[k] = same[k].dropna().mode().iloc[0]

    def detect_factors(self) -> list[str]:
        """task.name, pos.name when they vary, and every other key that varies within a (task, scheme) pair."""
        table = self._table(full_only=True).fillna("∅")
        if table.empty:
            return ["task.name"]
        keep = [c for c in table.columns if c not in IGNORED_KEYS and not c.startswith(IGNORED_PREFIXES)]
        varying = [c for c in keep if table[c].nunique() > 1]
        base = [k for k in ("task.name", "pos.name") if k in table]
        factors = ["task.name"] + (["pos.name"] if "pos.name" in varying else [])
        present = table.replace("∅", np.nan)
        for c in varying:
            if c in base:
                continue
            # an option of a task or scheme (pos.phase_std, task.gap_min, …) is constant within a task × scheme
            # pair; a key that some runs lack (written by an older version of the code) is not an axis either
            if base and present.groupby(base)[c].nunique(dropna=True).max() <= 1:
                continue
            factors.append(c)
        for label in RUNG_LABELS:  # a rung names its sizes: the task keys it fixes are no columns of their own
            if label in factors:
                by = [*base, label]
                factors = [c for c in factors if c in by or not c.startswith("task.")
                           or present.groupby(by)[c].nunique(dropna=True).max() > 1]
        if len(factors) == 1 and "pos.name" in table:  # nothing varies but the seed: label columns by scheme
            factors.append("pos.name")
        return factors

    def value(self, run: Run, key: str) -> str:
        return value_label(run.config.get(key))

    def column_label(self, values: dict[str, str], keys: list[str] | None = None) -> str:
        parts = []
        for k in self.col_keys if keys is None else keys:
            v = values[k]
            if v == "∅":  # an option this column's scheme does not have (heads_fraction of alibi for rope)
                continue
            parts.append(v if k == "pos.name" else f"{SHORT.get(k, k.split('.', 1)[-1])}={v}")
        return " ".join(parts) or "all"

    def _cells(self) -> pd.DataFrame:
        rows = []
        for run in self.runs:
            row = {k: self.value(run, k) for k in self.factors}
            row["run"], row["status"], row["seed"] = run.rel, run.status, run.config.get("seed")
            rows.append(row)
        df = pd.DataFrame(rows)
        if df.empty:
            return df
        df["column"] = [self.column_label(r) for r in df[self.col_keys].to_dict("records")] if self.col_keys \
            else "all"
        return df

    def tasks(self) -> list[str]:
        return ordered(self.cells[self.row_key], TASK_ORDER) if not self.cells.empty else []

    def columns(self) -> list[str]:
        return list(self.column_values())

    def column_values(self) -> dict[str, dict[str, str]]:
        """Each column's label → its values of the column keys, in column order (schemes in SCHEME_ORDER)."""
        if self.cells.empty:
            return {}
        combos = self.cells[self.col_keys].drop_duplicates().to_dict("records")
        for k in reversed(self.col_keys):
            order = ordered((c[k] for c in combos), SCHEME_ORDER if k == "pos.name" else None)
            combos.sort(key=lambda c, k=k, order=order: order.index(c[k]))
        return {self.column_label(c): c for c in combos}

    def scheme_pairs(self, reference: str | None = None) -> list[tuple[str, str]]:
        """(column, reference column): the pairs of columns that differ in the scheme or one of its options
        (``pos.…``) while their other settings (the column keys outside ``pos.``, such as ``task.rung``) agree, in
        column order — every such pair, or those against the columns of the scheme ``reference`` (and between
        that scheme's own variants: ``pope delta_init=uniform − pope delta_init=zero``)."""
        if "pos.name" not in self.col_keys:
            return []
        values = self.column_values()
        setting = {c: tuple(v[k] for k in self.col_keys if not k.startswith("pos.")) for c, v in values.items()}
        columns = list(values)
        pairs = []
        for i, ref in enumerate(columns):
            for j, other in enumerate(columns):
                if other == ref or setting[other] != setting[ref]:
                    continue
                if reference is None:
                    keep = j > i
                else:
                    same_scheme = values[other]["pos.name"] == reference
                    keep = values[ref]["pos.name"] == reference and (not same_scheme or j > i)
                if keep:
                    pairs.append((other, ref))
        return pairs

    def runs_in(self, task: str, column: str) -> list[Run]:
        sel = self.cells[(self.cells[self.row_key] == task) & (self.cells["column"] == column)]
        by_rel = {r.rel: r for r in self.runs}
        return [by_rel[rel] for rel in sel["run"]]

    def cell_config(self, runs: list[Run]) -> dict[str, str]:
        """Config values shared by the runs of a cell (the mode, for keys the runs disagree on)."""
        counts: dict[str, Counter] = {}
        for run in runs:
            for k, v in run.config.items():
                counts.setdefault(k, Counter())[value_label(v)] += 1
        return {k: c.most_common(1)[0][0] for k, c in counts.items()}
