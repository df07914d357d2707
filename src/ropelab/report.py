"""Sweep reports: ``python -m ropelab.report SWEEP_DIR [--out DIR]`` (or ``make report SWEEP=runs/<name>``).

Reads every run folder under SWEEP_DIR (``config.yaml``, ``summary.json``, ``metrics.csv``,
``positional_trace.npz``; ``.hydra/`` for jobs that never got further) and writes into ``SWEEP_DIR/report/``:

* ``report.md``  — budget, run status, one table per metric (rows: task; columns: what the sweep varies —
  scheme, γ, base, frequency profile — detected from the configs), mean ± SD over seeds, the papers' values
  beside ours (``conf/paper_values.yaml``), lock-in steps, learned-parameter summaries, relative degradation
  for γ sweeps, and links to the figures;
* ``table.csv``  — the same cells in long form (one row per task × column), ``runs.csv`` — one row per run;
* ``table.tex``  — the headline tables as LaTeX tabulars;
* ``curves_<task>.png`` (loss curves), ``params_<task>_<column>.png`` (Ω, A, Φ over training),
  ``attention_<task>.png`` (γ sweeps: one attention map per γ on a validation example).

Metrics are those of ``summary.json``'s ``final`` block, over completed runs only; every other run is counted
by status (failed, diverged, interrupted, running, no summary) in the table cell it belongs to, never dropped.

Landmarks of a run's train-loss curve (Bifocal paper, Fig. 4): the *onset*, where the loss leaves its early
plateau, and the *lock-in*, where it crosses half the plateau for good (defined in ``ropelab.stats``; set by
``--smooth``, ``--plateau``, ``--onset-drop``, ``--lockin-frac``). Sweeps whose columns are schemes also get
scheme-against-scheme differences paired by seed with 95 % t intervals. The report lists the machines,
precisions and code versions its runs ran on, and warns when one table mixes them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
import yaml

from ropelab import machine
from ropelab.runs import RUNS_ROOT, atomic_write_text
from ropelab.stats import Landmarks, sawtooth, lockin_step, onset_step, paired_difference, train_loss

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PAPER_VALUES = CONF_DIR / "paper_values.yaml"

METRICS = ["val/loss", "val/acc", "val/exact", "ood/acc", "test/acc", "train/loss"]
PERCENT = {"val/acc", "val/exact", "ood/acc", "ood/exact", "test/acc", "test/exact"}
LOCKIN = "lockin_step"
ONSET = "onset_step"
LANDMARKS = (ONSET, LOCKIN)
STATUS_ORDER = ["completed", "failed", "diverged", "interrupted", "running", "no summary"]
SKIP_DIRS = {"report", "wandb", "checkpoints", ".submitit", ".hydra", "__pycache__"}
# config keys that never define a table column: bookkeeping, threads, loggers, evaluation batch size
IGNORED_KEYS = {"seed", "name", "resume", "record", "rerun", "retry_failed", "trainer.threads", "trainer.progress",
                "trainer.compile", "trainer.accelerator", "trainer.devices", "trainer.precision",
                "data.eval_batch_size"}  # precision and machine: listed in "Machines and code" instead
IGNORED_PREFIXES = ("logger.", "hydra.")
TASK_ORDER = ["dyck3", "bio_rotation", "mod_arith", "indirect_indexing", "assoc_recall", "variable_tracking",
              "global_counting", "mean_pooling", "code_lm"]
SCHEME_ORDER = ["rope", "spectral", "bifocal", "pope", "rope_half", "alibi", "learned_abs", "sinusoidal", "nope"]
SHORT = {"pos.momentum.gamma": "γ", "pos.base": "base", "pos.freqs": "freqs"}
GAMMA = "pos.momentum.gamma"


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


# ----------------------------------------------------------------------------------------------- reading runs

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


def _yaml(path: Path) -> Any:
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
    raw, full = _yaml(path / "config.yaml"), True
    if not isinstance(raw, dict):
        raw = _yaml(path / ".hydra" / "config.yaml")  # composed by Hydra when the job started
        if isinstance(raw, dict):
            raw.pop("hydra", None)
    config = flatten(raw) if isinstance(raw, dict) else {}
    if not config:
        full = False
        overrides = _yaml(path / ".hydra" / "overrides.yaml")
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


# ----------------------------------------------------------------------------------------------- the sweep

def _key(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "∅" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _order(values: Iterable[Any], preferred: list[str] | None = None) -> list[Any]:
    def sort_key(v):
        if preferred and str(v) in preferred:
            return (0, preferred.index(str(v)), 0.0, "")
        try:
            return (1, 0, float(v), "")
        except (TypeError, ValueError):
            return (2, 0, 0.0, str(v))
    return sorted(set(values), key=sort_key)


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


class Sweep:
    def __init__(self, root: Path, rule: Landmarks):
        self.root, self.rule = Path(root), rule
        found = [load_run(p, self.root) for p in find_run_dirs(self.root)]
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
        return pd.DataFrame([{k: _key(v) for k, v in r.config.items()} for r in runs])

    def _fill_partial_configs(self) -> None:
        full = self._table(full_only=True)
        for run in self.runs:
            if run.full_config or full.empty:
                continue
            same = full
            for k in ("task.name", "pos.name"):
                if k in run.config and k in same:
                    narrowed = same[same[k] == _key(run.config[k])]
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
        if len(factors) == 1 and "pos.name" in table:  # nothing varies but the seed: label columns by scheme
            factors.append("pos.name")
        return factors

    def value(self, run: Run, key: str) -> str:
        return _key(run.config.get(key))

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
        return _order(self.cells[self.row_key], TASK_ORDER) if not self.cells.empty else []

    def columns(self) -> list[str]:
        if self.cells.empty:
            return []
        combos = self.cells[self.col_keys].drop_duplicates().to_dict("records")
        for k in reversed(self.col_keys):
            order = _order((c[k] for c in combos), SCHEME_ORDER if k == "pos.name" else None)
            combos.sort(key=lambda c, k=k, order=order: order.index(c[k]))
        return list(dict.fromkeys(self.column_label(c) for c in combos))

    def runs_in(self, task: str, column: str) -> list[Run]:
        sel = self.cells[(self.cells[self.row_key] == task) & (self.cells["column"] == column)]
        by_rel = {r.rel: r for r in self.runs}
        return [by_rel[rel] for rel in sel["run"]]

    def cell_config(self, runs: list[Run]) -> dict[str, str]:
        """Config values shared by the runs of a cell (the mode, for keys the runs disagree on)."""
        counts: dict[str, Counter] = {}
        for run in runs:
            for k, v in run.config.items():
                counts.setdefault(k, Counter())[_key(v)] += 1
        return {k: c.most_common(1)[0][0] for k, c in counts.items()}


# ----------------------------------------------------------------------------------------------- paper values

def load_paper_values(path: Path = PAPER_VALUES) -> list[dict]:
    data = _yaml(path) or {}
    entries = []
    for paper, block in data.items():
        for e in (block or {}).get("entries", []) or []:
            entries.append({**e, "paper": paper, "source": block.get("source", paper)})
    return entries


def _same(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def paper_for(entries: list[dict], config: dict[str, str], metric: str, derived: str | None = None) -> dict | None:
    for e in entries:
        if e.get("metric") != metric or e.get("derived") != derived:
            continue
        if all(k in config and _same(config[k], v) for k, v in (e.get("match") or {}).items()):
            return e
    return None


# ----------------------------------------------------------------------------------------------- aggregation

def _mean_std(values: list[float]) -> tuple[float, float, int]:
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if not len(arr):
        return math.nan, math.nan, 0
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else math.nan, len(arr)


def _num(x: float, metric: str) -> str:
    if math.isnan(x):
        return "–"
    if metric in PERCENT:
        return f"{100 * x:.1f}"
    if metric in LANDMARKS:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) < 0.01 else f"{x:.3f}"


def status_note(counts: Counter) -> str:
    others = [f"{counts[s]} {s}" for s in STATUS_ORDER[1:] if counts.get(s)]
    return ", ".join(others)


def aggregate(sweep: Sweep, entries: list[dict]) -> pd.DataFrame:
    """One row per (task, column): status counts, mean/std/n of each metric over completed runs, paper values."""
    rows = []
    for task in sweep.tasks():
        for column in sweep.columns():
            runs = sweep.runs_in(task, column)
            if not runs:
                continue
            config = sweep.cell_config(runs)
            counts = Counter(r.status for r in runs)
            row: dict[str, Any] = {"task": task, "column": column,
                                   **{k: config.get(k) for k in sweep.col_keys},
                                   "n_runs": len(runs), **{f"n_{s.replace(' ', '_')}": counts.get(s, 0)
                                                           for s in STATUS_ORDER},
                                   "seeds": " ".join(sorted({_key(r.config.get('seed')) for r in runs})),
                                   "steps": config.get("trainer.max_steps"), "batch": config.get("data.batch_size")}
            done = [r for r in runs if r.status == "completed"]
            for m in METRICS:
                row[f"{m}_mean"], row[f"{m}_std"], row[f"{m}_n"] = _mean_std([r.final.get(m, math.nan) for r in done])
            for landmark, attr in ((LOCKIN, "lockin"), (ONSET, "onset")):
                steps = [getattr(r, attr) for r in done if getattr(r, attr) is not None]
                row[f"{landmark}_mean"], row[f"{landmark}_std"], row[f"{landmark}_n"] = _mean_std(steps)
                row[f"{landmark}_defined"] = len(steps)
            used = []
            for m in METRICS + list(LANDMARKS):
                e = paper_for(entries, config, m)
                if e:
                    used.append(e["paper"])
                    row[f"paper_{m}_mean"], row[f"paper_{m}_std"] = e.get("mean"), e.get("std")
                    row[f"paper_{m}_note"] = e.get("note", "") + (" (approx.)" if e.get("approx") else "")
            row["papers"] = " ".join(sorted(set(used)))
            rows.append(row)
    return pd.DataFrame(rows)


def cell_text(row: pd.Series, metric: str, with_paper: bool = True) -> str:
    """"mean ± SD (n=k)", then "⚠ 1 failed, 1 running" for runs that did not complete, then the paper's value."""
    n_done = int(row["n_completed"])
    counts = Counter({s: int(row[f"n_{s.replace(' ', '_')}"]) for s in STATUS_ORDER})
    mean, std, k = row[f"{metric}_mean"], row[f"{metric}_std"], int(row[f"{metric}_n"])
    spread = "" if math.isnan(std) else f" ± {_num(std, metric)}"
    if metric in LANDMARKS:
        defined = int(row[f"{metric}_defined"])
        if not n_done:
            text = "—"
        elif not defined:
            text = "n/a"
        elif not k:
            text = f"none (0/{defined})"
        else:
            text = f"{_num(mean, metric)}{spread} ({k}/{defined})"
    else:
        text = f"{_num(mean, metric)}{spread} (n={k})" if k else "—"
    note = status_note(counts)
    if note:
        text += f" ⚠ {note}"
    paper_mean = row.get(f"paper_{metric}_mean")
    if with_paper and paper_mean is not None and not (isinstance(paper_mean, float) and math.isnan(paper_mean)):
        paper_std = row.get(f"paper_{metric}_std")
        ptxt = f"{paper_mean:g}" + ("" if paper_std is None or (isinstance(paper_std, float) and math.isnan(paper_std))
                                    else f" ± {paper_std:g}")
        text += f" · paper {ptxt}"
    return text


def status_pivot(agg: pd.DataFrame, sweep: Sweep) -> pd.DataFrame:
    table = pd.DataFrame(index=sweep.tasks(), columns=sweep.columns(), dtype=object)
    for _, row in agg.iterrows():
        parts = [f"{int(row[f'n_{s.replace(chr(32), chr(95))}'])} {s}" for s in STATUS_ORDER
                 if int(row[f"n_{s.replace(' ', '_')}"])]
        table.loc[row["task"], row["column"]] = ", ".join(parts)
    return table.fillna("no runs")


def pivot(agg: pd.DataFrame, sweep: Sweep, metric: str, with_paper: bool = True) -> pd.DataFrame:
    table = pd.DataFrame(index=sweep.tasks(), columns=sweep.columns(), dtype=object)
    for _, row in agg.iterrows():
        table.loc[row["task"], row["column"]] = cell_text(row, metric, with_paper)
    return table.fillna("")


def rel_degradation(agg: pd.DataFrame, sweep: Sweep, entries: list[dict], metric: str = "val/acc") -> pd.DataFrame | None:
    """For γ sweeps: (m(γ=0) − m(γ)) / m(γ=0) in %, per task and mean over tasks, other axes held fixed."""
    if GAMMA not in sweep.col_keys:
        return None
    others = [k for k in sweep.col_keys if k != GAMMA]
    zero = agg[agg[GAMMA].map(lambda v: _same(v, 0))]
    if zero.empty:
        return None
    rows: dict[str, dict[str, float]] = {}
    columns = []
    for _, row in agg.iterrows():
        if _same(row[GAMMA], 0):
            continue
        base = zero[(zero["task"] == row["task"]) & np.logical_and.reduce(
            [zero[k] == row[k] for k in others] or [np.ones(len(zero), bool)])]
        if base.empty:
            continue
        m0, m = float(base.iloc[0][f"{metric}_mean"]), float(row[f"{metric}_mean"])
        value = 100 * (m0 - m) / m0 if m0 and not math.isnan(m0) and not math.isnan(m) else math.nan
        rows.setdefault(row["task"], {})[row["column"]] = value
        if row["column"] not in columns:
            columns.append(row["column"])
    if not rows:
        return None
    order = [c for c in sweep.columns() if c in columns]
    table = pd.DataFrame(rows).T.reindex(index=[t for t in sweep.tasks() if t in rows], columns=order)
    table.loc["mean over tasks"] = table.mean(axis=0, skipna=True)
    paper = {}
    for column in order:
        cfg = sweep.cell_config([r for t in sweep.tasks() for r in sweep.runs_in(t, column)])
        e = paper_for(entries, cfg, metric, derived="rel_degradation_gamma")
        paper[column] = e["mean"] if e else math.nan
    table.loc["paper"] = pd.Series(paper)
    return table


# ----------------------------------------------------------------------------------------------- figures

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _safe(name: str) -> str:
    """A plain-ASCII file-name part: γ=0.5 → gamma=0.5, anything else odd → _."""
    name = name.replace("γ", "gamma")
    return "".join(c if (c.isascii() and c.isalnum()) or c in "-_.=" else "_" for c in name).strip("_")


def plot_curves(sweep: Sweep, task: str, out: Path, dpi: int) -> Path | None:
    series = []
    for column in sweep.columns():
        runs = [r for r in sweep.runs_in(task, column) if r.metrics is not None and "step" in r.metrics]
        if not runs:
            continue
        train = pd.concat({r.rel: r.smoothed for r in runs}, axis=1)
        val = pd.concat({r.rel: r.metrics[["step", "val/loss"]].dropna().groupby("step")["val/loss"].last()
                         for r in runs if "val/loss" in r.metrics}, axis=1) if any(
            "val/loss" in r.metrics for r in runs) else pd.DataFrame()
        locks = [r.lockin for r in runs if r.lockin is not None and not math.isnan(r.lockin)]
        series.append((column, len(runs), train, val, float(np.median(locks)) if locks else None))
    if not series:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (column, n, train, val, lock) in enumerate(series):
        color = colors[i % len(colors)]
        for ax, data in ((axes[0], train), (axes[1], val)):
            if data.empty:
                continue
            mean = data.mean(axis=1)
            ax.plot(mean.index, mean.to_numpy(), color=color, lw=1.4, label=f"{column} ({n})")
            if data.shape[1] > 1:
                ax.fill_between(data.index, data.min(axis=1).to_numpy(), data.max(axis=1).to_numpy(),
                                color=color, alpha=0.18, lw=0)
        if lock is not None:
            axes[0].axvline(lock, color=color, ls=":", lw=1)
    a, b = sweep.rule.plateau
    axes[0].axvspan(a, b, color="grey", alpha=0.08, lw=0)
    axes[0].set_title(f"{task}: train loss (mean over {sweep.rule.smooth} steps)", fontsize=9)
    axes[1].set_title(f"{task}: validation loss", fontsize=9)
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("loss (answer tokens)")
    axes[1].legend(fontsize=7, loc="upper right")
    fig.text(0.01, 0.01, "line: mean over seeds; band: min–max; dotted: median lock-in step; grey: plateau window",
             fontsize=6, color="grey")
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.16, top=0.92, wspace=0.06)
    path = out / f"curves_{_safe(task)}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def load_trace(run: Run) -> dict[str, np.ndarray] | None:
    path = run.path / "positional_trace.npz"
    if not path.is_file():
        return None
    try:
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError):
        return None


def _kind(name: str) -> str:
    n = name.lower()
    if "omega" in n or "freq" in n:
        return "omega"
    if "amp" in n:
        return "amplitude"
    if "phase" in n or "delta" in n or n in ("phi",):
        return "phase"
    return "other"


def trace_summary(traces: list[dict[str, np.ndarray]]) -> dict[str, tuple[float, float]]:
    """Final-step summaries over the runs of a group: Ω relative drift (median over channels), mean A,
    mean Φ offset from init and mean |Φ| — each as (mean, std) over runs."""
    values: dict[str, list[float]] = {}
    for tr in traces:
        for name, arr in tr.items():
            if name == "steps" or arr.ndim < 1 or len(arr) < 1:
                continue
            kind, first, last = _kind(name), arr[0].astype(float), arr[-1].astype(float)
            if kind == "omega":
                drift = np.abs(last - first) / np.maximum(np.abs(first), 1e-12)
                values.setdefault(f"{name} rel. drift, median", []).append(float(np.median(drift)))
                values.setdefault(f"{name} rel. drift, max", []).append(float(drift.max()))
            elif kind == "amplitude":
                values.setdefault(f"{name} mean", []).append(float(last.mean()))
                values.setdefault(f"{name} max − min", []).append(float(last.max() - last.min()))
            elif kind == "phase":
                values.setdefault(f"{name} mean offset, rad", []).append(float((last - first).mean()))
                values.setdefault(f"{name} mean abs, rad", []).append(float(np.abs(last).mean()))
                if last.ndim == 2 and last.shape[1] > 1:  # (heads, pairs): the paper's saw-tooth over pairs
                    values.setdefault(f"{name} sign alternation (chance 0.5)", []).append(
                        sawtooth(last, permutations=0)["alternation"])
            else:
                values.setdefault(f"{name} mean", []).append(float(last.mean()))
    return {k: _mean_std(v)[:2] for k, v in values.items()}


def plot_params(sweep: Sweep, task: str, column: str, traced: list[tuple[Run, dict]], out: Path, dpi: int,
                phase_ref: float | None) -> Path:
    names = [n for n in traced[0][1] if n != "steps"]
    plt = _plt()
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.2), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes[0], names):
        kind = _kind(name)
        for i, (run, tr) in enumerate(traced):
            if name not in tr:
                continue
            steps, arr, color = tr["steps"], tr[name].astype(float), colors[i % len(colors)]
            seed = _key(run.config.get("seed"))
            flat = arr.reshape(len(arr), -1)
            if kind == "omega":
                drift = np.abs(flat - flat[:1]) / np.maximum(np.abs(flat[:1]), 1e-12)
                ax.plot(steps, np.median(drift, axis=1), color=color, label=f"seed {seed}")
                ax.plot(steps, drift.max(axis=1), color=color, ls="--", lw=0.8)
                ax.set_title(f"{name}: |Ω−Ω₀|/Ω₀, median (—) and max (--)", fontsize=8)
                ax.set_xlabel("step")
            elif kind == "phase":
                final = arr[-1].reshape(-1, arr.shape[-1]) if arr.ndim > 2 else arr[-1].reshape(1, -1)
                ax.plot(np.arange(final.shape[-1]), final.mean(axis=0), "o-", ms=2.5, lw=0.9, color=color,
                        label=f"seed {seed}")
                ax.set_title(f"{name} per pair at step {int(steps[-1])} (mean over heads)", fontsize=8)
                ax.set_xlabel("pair index")
            else:
                ax.plot(steps, flat.mean(axis=1), color=color, label=f"seed {seed}")
                ax.fill_between(steps, flat.min(axis=1), flat.max(axis=1), color=color, alpha=0.15, lw=0)
                ax.set_title(f"{name} over training (band: min–max)", fontsize=8)
                ax.set_xlabel("step")
        if kind == "phase":
            offsets = [float((tr[name][-1] - tr[name][0]).mean()) for _, tr in traced if name in tr]
            text = f"mean offset {np.mean(offsets):.2e} rad"
            if phase_ref is not None:
                text += f"\npaper ≈ {phase_ref:.1e} rad"
            ax.text(0.02, 0.97, text, transform=ax.transAxes, va="top", fontsize=7)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6, loc="upper left")
    fig.suptitle(f"{task} · {column}: learned positional parameters (one colour per seed)", fontsize=9)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.15, top=0.84, wspace=0.3)
    path = out / f"params_{_safe(task)}_{_safe(column)}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_attention(sweep: Sweep, task: str, out: Path, dpi: int, layer: int) -> tuple[Path | None, list[str]]:
    """γ sweeps: attention (head mean, one layer) on the first validation example, one panel per γ."""
    problems: list[str] = []
    others = [k for k in sweep.col_keys if k != GAMMA]
    gammas = _order(sweep.cells.loc[sweep.cells[sweep.row_key] == task, GAMMA])
    here = sweep.cells[sweep.cells[sweep.row_key] == task]
    rows = list(dict.fromkeys(sweep.column_label(v, others) for v in here[others].to_dict("records"))) \
        if others else [""]
    candidates: dict[tuple[str, str], list[Run]] = {}
    for run in sorted(sweep.runs, key=lambda r: _key(r.config.get("seed"))):
        if sweep.value(run, sweep.row_key) == task and run.status == "completed":
            key = (sweep.column_label({k: sweep.value(run, k) for k in others}, others) if others else "",
                   sweep.value(run, GAMMA))
            candidates.setdefault(key, []).append(run)
    maps: dict[tuple[str, str], np.ndarray] = {}
    for key, runs in candidates.items():
        runs = [r for r in runs if (r.path / "checkpoints" / "last.ckpt").exists()]
        if not runs:
            problems.append(f"{task} {key[0]} γ={key[1]}: no completed run with checkpoints/last.ckpt".replace("  ", " "))
            continue
        from ropelab import attention_maps  # torch: only when there is a checkpoint to read

        try:
            weights, _tokens = attention_maps.run_attention(runs[0].path)
        except Exception as err:  # an unbuildable scheme or a stale checkpoint: say so, keep the report
            problems.append(f"{runs[0].rel}: {type(err).__name__}: {err}")
            continue
        maps[key] = weights[min(layer, len(weights) - 1) if layer >= 0 else layer].mean(axis=0)
    if not maps:
        return None, problems
    plt = _plt()
    fig, axes = plt.subplots(len(rows), len(gammas), figsize=(2.3 * len(gammas), 2.4 * len(rows)), squeeze=False)
    for i, r in enumerate(rows):
        for j, g in enumerate(gammas):
            ax = axes[i][j]
            ax.set_xticks([])
            ax.set_yticks([])
            if (r, g) in maps:
                ax.imshow(maps[(r, g)] ** 0.5, cmap="magma", interpolation="nearest")
            else:
                ax.text(0.5, 0.5, "no run", ha="center", va="center", fontsize=7, transform=ax.transAxes)
            ax.set_title(f"{r} γ={g}".strip(), fontsize=7)
    layer_name = "last layer" if layer == -1 else f"layer {layer}"
    fig.suptitle(f"{task}: attention, {layer_name}, mean over heads, √weight (query ↓, key →)", fontsize=8)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.86, wspace=0.08, hspace=0.25)
    path = out / f"attention_{_safe(task)}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path, problems


# ----------------------------------------------------------------------------------------------- writing

def md_table(df: pd.DataFrame, index_name: str = "task") -> str:
    header = [index_name, *(str(c).replace("|", "\\|") for c in df.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for idx, row in df.iterrows():
        lines.append("| " + " | ".join([str(idx), *(str(v).replace("|", "\\|") for v in row)]) + " |")
    return "\n".join(lines)


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#"),
                 ("±", r"$\pm$"), ("γ", r"$\gamma$"), ("⚠", r"(!)"), ("—", "--"), ("–", "--"), ("·", r"$\cdot$")):
        s = s.replace(a, b)
    return s


def tex_table(df: pd.DataFrame, caption: str, label: str) -> str:
    cols = "l" + "c" * len(df.columns)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\caption{{{_tex_escape(caption)}}}",
             rf"\label{{{label}}}", rf"\begin{{tabular}}{{{cols}}}", r"\toprule",
             " & ".join(["task", *(_tex_escape(str(c)) for c in df.columns)]) + r" \\", r"\midrule"]
    for idx, row in df.iterrows():
        lines.append(" & ".join([_tex_escape(str(idx)), *(_tex_escape(str(v)) for v in row)]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def _metric_title(metric: str) -> str:
    if metric == LOCKIN:
        return "lock-in step, half-plateau crossing (mean ± SD over runs that locked in; locked/defined)"
    if metric == ONSET:
        return "onset step, the loss leaves its plateau (mean ± SD over runs where it did; left/defined)"
    unit = " (%)" if metric in PERCENT else ""
    return f"final {metric}{unit}"


def _landmark_text(step: float | None) -> str | int:
    return "n/a" if step is None else "none" if math.isnan(step) else int(step)


PAIRED = {"val/loss": "final val/loss", ONSET: "onset step", LOCKIN: "lock-in step"}


def comparison_section(sweep: Sweep) -> list[str]:
    """Per task and pair of columns: the difference (column − reference) in final val loss and in the two
    landmarks, paired by seed, with a 95 % t interval; only for sweeps whose columns differ by scheme alone."""
    columns = sweep.columns()
    if sweep.col_keys != ["pos.name"] or len(columns) < 2:
        return []
    rows = []
    for task in sweep.tasks():
        by_column = {c: {r.config.get("seed"): r for r in sweep.runs_in(task, c) if r.status == "completed"}
                     for c in columns}
        for i, ref in enumerate(columns):
            for other in columns[i + 1:]:
                row = {"task": task, "pair": f"{other} − {ref}"}
                for key, title in PAIRED.items():
                    def values(c):
                        return {seed: _run_value(r, key) for seed, r in by_column[c].items()}
                    diff = paired_difference(values(other), values(ref))
                    row[title] = diff.text("{:.0f}" if key in LANDMARKS else "{:.3f}") + (
                        " *" if diff.excludes_zero() else "")
                rows.append(row)
    if not rows:
        return []
    return ["### Scheme against scheme, paired by seed", "",
            "Mean difference over seeds that both schemes completed (same seed = same data and same backbone "
            "initialisation), [95 % t interval], n pairs; `*` = the interval excludes 0. A landmark that a run "
            "never reached (none) leaves its pair out.", "",
            md_table(pd.DataFrame(rows).set_index("task"), "task"), ""]


def _run_value(run: Run, key: str) -> float | None:
    if key == ONSET:
        return run.onset
    if key == LOCKIN:
        return run.lockin
    return run.final.get(key)


def machines_section(sweep: Sweep) -> list[str]:
    """Which machines, precisions, torch versions and code versions the completed runs ran on; a warning when
    one table mixes them."""
    groups: Counter = Counter()
    for run in sweep.runs:
        s = run.summary or {}
        info = s.get("machine")
        if not info:
            groups[("not recorded (older code)", "?", "?", "?")] += 1
            continue
        commit = (info.get("commit") or "?")[:7] + ("+edits" if info.get("dirty") else "")
        groups[(machine.label(info), s.get("precision", "?"), info.get("torch", "?"), commit)] += 1
    table = pd.DataFrame([{"machine": m, "precision": p, "torch": t, "commit": c, "runs": n}
                          for (m, p, t, c), n in sorted(groups.items(), key=lambda kv: -kv[1])])
    md = ["### Machines and code", "", md_table(table.set_index("machine"), "machine"), ""]
    mixed = [name for name, col in (("machines", "machine"), ("precisions", "precision"), ("torch versions", "torch"),
                                    ("code versions", "commit")) if table[col].nunique() > 1]
    if mixed:
        md += [f"⚠ This table mixes {', '.join(mixed)}: compare cells with that in mind.", ""]
    return md


def _steps(run: Run) -> int | None:
    """Steps trained: from the summary, else (running, interrupted) the last step in metrics.csv."""
    steps = (run.summary or {}).get("steps")
    if steps is None and run.metrics is not None and "step" in run.metrics and len(run.metrics):
        steps = int(run.metrics["step"].max()) + 1
    return steps


def budget_lines(sweep: Sweep) -> list[str]:
    combos = Counter()
    for run in sweep.runs:
        combos[(_key(run.config.get("trainer.max_steps")), _key(run.config.get("data.batch_size")))] += 1
    lines = []
    for (steps, batch), n in sorted(combos.items(), key=lambda kv: -kv[1]):
        try:
            examples = f"{int(steps) * int(batch):,}"
        except (TypeError, ValueError):
            examples = "?"
        lines.append(f"{steps} steps × batch {batch} = {examples} training examples per run "
                     f"({n} run{'s' if n != 1 else ''})")
    return lines


def report_dirs(sweep_dir: Path, out: Path | None) -> tuple[Path, Path]:
    """(sweep folder, output folder — made, default SWEEP/report); exits in one line if the sweep is no folder."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise SystemExit(f"error: {sweep_dir} is not a folder")
    out = Path(out) if out else sweep_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    return sweep_dir, out


def write_report(sweep_dir: Path, out: Path | None = None, rule: Landmarks | None = None, dpi: int = 100,
                 attention: bool = True, attn_layer: int = 0, paper_values: Path = PAPER_VALUES) -> Path:
    started = time.time()
    sweep_dir, out = report_dirs(sweep_dir, out)
    rule = rule or Landmarks()
    sweep = Sweep(sweep_dir, rule)
    entries = load_paper_values(paper_values)
    papers = _yaml(paper_values) or {}
    md: list[str] = [f"# Report: {sweep_dir.name}", "",
                     f"`{sweep_dir}` · {len(sweep.runs)} runs · generated {time.strftime('%Y-%m-%d %H:%M')} by "
                     f"`python -m ropelab.report`", ""]
    if not sweep.runs:
        md += ["No run folders found (folders holding summary.json, config.yaml or .hydra/overrides.yaml)."]
        atomic_write_text(out / "report.md", "\n".join(md) + "\n")
        atomic_write_text(out / "table.csv", pd.DataFrame().to_csv(index=False))
        atomic_write_text(out / "table.tex", "% no runs\n")
        return out

    agg = aggregate(sweep, entries)
    status = Counter(r.status for r in sweep.runs)
    md += ["## Budget and status", ""]
    md += [f"- {line}" for line in budget_lines(sweep)]
    md += [f"- rows: `{sweep.row_key}`; columns: " + ", ".join(f"`{k}`" for k in sweep.col_keys)
           + " (detected: the config keys that vary within a task × scheme pair); mean ± SD over seeds"]
    md += ["- status: " + ", ".join(f"{status[s]} {s}" for s in STATUS_ORDER if status.get(s))
           + "".join(f", {n} {s}" for s, n in status.items() if s not in STATUS_ORDER)]
    md += ["- metrics are over completed runs only; a cell with other runs says how many and why (⚠). "
           "`running` = summary.json says running: in progress, or killed without a chance to record it; "
           "`no summary` = the job never reached training.", ""]
    md += ["### Runs per cell", "", md_table(status_pivot(agg, sweep)), ""]
    md += machines_section(sweep)
    if sweep.never_started:
        md += ["### Folders that never started training", "",
               "Not table cells: no config.yaml was written (a rejected config, or a job killed before training).",
               "", *[f"- `{r.rel}`: {(r.summary or {}).get('error', r.status)}" for r in sweep.never_started], ""]

    runs_table = pd.DataFrame([{"run": r.rel, "status": r.status, **{k: sweep.value(r, k) for k in sweep.factors},
                                "seed": r.config.get("seed"), "steps": _steps(r),
                                "wall_seconds": (r.summary or {}).get("wall_seconds"),
                                **{m: r.final.get(m) for m in METRICS},
                                **{name: _landmark_text(getattr(r, attr)) for name, attr in
                                   ((ONSET, "onset"), (LOCKIN, "lockin"))},
                                "error": (r.summary or {}).get("error", "")} for r in sweep.runs])
    runs_table["steps"] = runs_table["steps"].map(lambda v: "" if pd.isna(v) else int(v)).astype(object)
    atomic_write_text(out / "runs.csv", runs_table.to_csv(index=False))
    bad = runs_table[runs_table["status"] != "completed"]
    if not bad.empty:
        md += ["### Runs that did not complete", "",
               md_table(bad.set_index("run")[["status", "steps", "error"]].fillna(""), "run"), ""]

    md += ["## Results", "", "Accuracies in %, losses in nats per answer token. "
           "`paper` = the value in conf/paper_values.yaml for this task and column, where one exists.", ""]
    tex = [f"% ropelab report for {sweep_dir.name}; needs \\usepackage{{booktabs}}", ""]
    for metric in METRICS + [ONSET, LOCKIN]:
        if metric not in LANDMARKS and agg[f"{metric}_n"].sum() == 0 and agg["n_completed"].sum() > 0:
            continue  # the task never logs this metric
        table = pivot(agg, sweep, metric)
        md += [f"### {_metric_title(metric)}", "", md_table(table), ""]
        notes = {row.get(f"paper_{metric}_note") for _, row in agg.iterrows()
                 if isinstance(row.get(f"paper_{metric}_note"), str) and row.get(f"paper_{metric}_note")}
        md += [f"- paper: {n}" for n in sorted(notes)] + ([""] if notes else [])
        if metric in ("val/loss", "val/acc", "ood/acc", "test/acc", ONSET, LOCKIN):
            tex.append(tex_table(table, f"{sweep_dir.name}: {_metric_title(metric)}",
                                 f"tab:{_safe(sweep_dir.name)}-{_safe(metric)}"))
    md += ["Landmarks: " + rule.describe(), ""]
    md += comparison_section(sweep)

    deg = rel_degradation(agg, sweep, entries)
    if deg is not None:
        md += ["### Relative degradation vs γ = 0 (val/acc, %)", "",
               "(acc(γ=0) − acc(γ)) / acc(γ=0) × 100, from the seed means, with every other axis held fixed; "
               "positive = worse than without momentum. `paper` row: conf/paper_values.yaml "
               "(the paper does not say which tasks or metric it averages).", "",
               md_table(deg.map(lambda v: "–" if pd.isna(v) else f"{v:.1f}"), ""), ""]
        tex.append(tex_table(deg.map(lambda v: "--" if pd.isna(v) else f"{v:.1f}"),
                             f"{sweep_dir.name}: relative degradation vs gamma=0 (val/acc, %)",
                             f"tab:{_safe(sweep_dir.name)}-degradation"))
    if GAMMA in sweep.col_keys:  # momentum study (issue 10): degradation by seed, γ verdicts, sharpening
        from ropelab import momentum_report
        md += momentum_report.section(sweep, out, dpi, attention, attn_layer,
                                      ckpt_roots=momentum_report.default_ckpt_roots(sweep_dir))

    figures: list[str] = []
    for task in sweep.tasks():
        p = plot_curves(sweep, task, out, dpi)
        if p:
            figures.append(f"![{task} loss curves]({p.name})")
    if figures:
        md += ["## Loss curves", "", "Train loss (smoothed) and validation loss against step; one line per column, "
               "mean over seeds, band = min–max over seeds, dotted = median lock-in step.", "", *figures, ""]

    phase_ref = (papers.get("bifocal") or {}).get("phase_mean_offset_rad")
    param_rows, param_figs = [], []
    for task in sweep.tasks():
        for column in sweep.columns():
            traced = [(r, t) for r in sweep.runs_in(task, column) if (t := load_trace(r)) is not None and len(t) > 1]
            if not traced:
                continue
            param_figs.append(f"![{task} {column} parameters]("
                              f"{plot_params(sweep, task, column, traced, out, dpi, phase_ref).name})")
            row = {"task": task, "column": column, "runs": len(traced)}
            for name, (mean, std) in trace_summary([t for _, t in traced]).items():
                row[name] = f"{mean:.3g}" + ("" if math.isnan(std) else f" ± {std:.2g}")
            param_rows.append(row)
    if param_rows:
        md += ["## Learned positional parameters", "",
               "From positional_trace.npz (step 0 and every validation). Ω drift is relative to its initial "
               "value; Φ offset is final − init, averaged over heads and pairs; values at the last snapshot, "
               "mean ± SD over runs"
               + (f" (paper: saw-tooth over pairs, mean offset ≈ {phase_ref:g} rad)." if phase_ref else "."), "",
               md_table(pd.DataFrame(param_rows).set_index("task").fillna(""), "task"), "", *param_figs, ""]

    if attention and GAMMA in sweep.col_keys:
        attn_figs, problems = [], []
        for task in sweep.tasks():
            p, errs = plot_attention(sweep, task, out, dpi, attn_layer)
            problems += errs
            if p:
                attn_figs.append(f"![{task} attention]({p.name})")
        md += ["## Attention maps by γ", "",
               "Lowest-seed completed run of each column, checkpoints/last.ckpt, first validation example; "
               "weights recomputed by ropelab.attention_maps.", "", *attn_figs, ""]
        md += [f"- could not draw {p}" for p in problems] + ([""] if problems else [])

    used = {p for names in agg["papers"] for p in str(names).split()}
    if deg is not None and deg.loc["paper"].notna().any():
        used |= {e["paper"] for e in entries if e.get("derived") == "rel_degradation_gamma"}
    used = sorted(used)
    if used:
        md += ["## Papers", ""]
        for paper in used:
            block = papers.get(paper) or {}
            md += [f"- **{paper}**: {block.get('source', '')}. Protocol: {block.get('protocol', 'n/a')}."]
            md += [f"  - {n}" for n in block.get("notes", []) or []]
        md += [""]
    md += [f"_Built in {time.time() - started:.1f} s._", ""]

    atomic_write_text(out / "report.md", "\n".join(md))
    atomic_write_text(out / "table.csv", agg.to_csv(index=False))
    atomic_write_text(out / "table.tex", "\n".join(tex))
    return out


def compare_runs(run_dirs: list[Path], out: Path | None) -> Path:
    """A folder of links to single runs, so that they report as one sweep: one table, overlaid curves."""
    folder = Path(out) if out else RUNS_ROOT / "compare" / time.strftime("%Y-%m-%d_%H-%M-%S")
    folder.mkdir(parents=True, exist_ok=True)
    for run_dir in run_dirs:
        if not (Path(run_dir) / "summary.json").is_file():
            raise SystemExit(f"error: {run_dir} is not a run folder (no summary.json)")
        link = folder / Path(run_dir).resolve().name
        if not link.exists():
            link.symlink_to(Path(run_dir).resolve(), target_is_directory=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ropelab.report", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", type=Path, nargs="+",
                   help="a sweep folder (e.g. runs/bifocal_table1), or several run folders to compare side by side")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: SWEEP_DIR/report)")
    p.add_argument("--smooth", type=int, default=10, help="lock-in: trailing-mean window in steps")
    p.add_argument("--plateau", type=int, nargs=2, default=(20, 60), metavar=("FROM", "TO"),
                   help="lock-in: plateau window in steps")
    p.add_argument("--lockin-frac", type=float, default=0.5, help="lock-in: fraction of the plateau loss")
    p.add_argument("--onset-drop", type=float, default=0.1,
                   help="onset: the loss has left its plateau when below (1 - this) × plateau")
    p.add_argument("--dpi", type=int, default=100)
    p.add_argument("--no-attention", action="store_true", help="skip the attention maps of γ sweeps")
    p.add_argument("--attn-layer", type=int, default=0, help="layer of the attention maps (-1: last)")
    args = p.parse_args(argv)
    rule = Landmarks(smooth=args.smooth, plateau=tuple(args.plateau), lockin_frac=args.lockin_frac,
                     onset_drop=args.onset_drop)
    sweep_dir, out = args.sweep_dir[0], args.out
    if len(args.sweep_dir) > 1:  # single runs side by side: their links in one folder, the report beside them
        sweep_dir = compare_runs(args.sweep_dir, args.out)
        out = sweep_dir / "report"
    out = write_report(sweep_dir, out, rule, args.dpi, not args.no_attention, args.attn_layer)
    print(f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
