"""Statistics per table cell (task × column): the mean, SD and n of each metric and landmark over completed
runs, the status counts, the papers' values; then the cell texts laid out as task × column tables, and the
relative degradation of γ sweeps.

Metrics are those of ``summary.json``'s ``final`` block, over completed runs only; every other run is counted
by status (failed, diverged, interrupted, running, no summary) in the cell it belongs to, never dropped."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from ropelab.analysis.report.papers import paper_for, same_value
from ropelab.analysis.report.records import parameter_kind
from ropelab.analysis.report.sweep import GAMMA, Sweep, value_label
from ropelab.analysis.stats import sawtooth

METRICS = ["val/loss", "val/acc", "val/exact", "ood/acc", "test/acc", "train/loss"]
PERCENT = {"val/acc", "val/exact", "ood/acc", "ood/exact", "test/acc", "test/exact"}
LOCKIN = "lockin_step"
ONSET = "onset_step"
LANDMARKS = (ONSET, LOCKIN)
STATUS_ORDER = ["completed", "failed", "diverged", "interrupted", "running", "no summary"]


def mean_sd(values: list[float]) -> tuple[float, float, int]:
    """(mean, SD, n) of the values that are numbers; SD is NaN below two values."""
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if not len(arr):
        return math.nan, math.nan, 0
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else math.nan, len(arr)


def number_text(x: float, metric: str) -> str:
    if math.isnan(x):
        return "–"
    if metric in PERCENT:
        return f"{100 * x:.1f}"
    if metric in LANDMARKS:
        return f"{x:.0f}"
    return f"{x:.3g}" if abs(x) < 0.01 else f"{x:.3f}"


def metric_title(metric: str) -> str:
    if metric == LOCKIN:
        return "lock-in step, half-plateau crossing (mean ± SD over runs that locked in; locked/defined)"
    if metric == ONSET:
        return "onset step, the loss leaves its plateau (mean ± SD over runs where it did; left/defined)"
    unit = " (%)" if metric in PERCENT else ""
    return f"final {metric}{unit}"


def status_note(counts: Counter) -> str:
    others = [f"{counts[s]} {s}" for s in STATUS_ORDER[1:] if counts.get(s)]
    return ", ".join(others)


def status_count_column(status: str) -> str:
    return f"n_{status.replace(' ', '_')}"


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
                                   "n_runs": len(runs), **{status_count_column(s): counts.get(s, 0)
                                                           for s in STATUS_ORDER},
                                   "seeds": " ".join(sorted({value_label(r.config.get('seed')) for r in runs})),
                                   "steps": config.get("trainer.max_steps"), "batch": config.get("data.batch_size")}
            done = [r for r in runs if r.status == "completed"]
            for m in METRICS:
                row[f"{m}_mean"], row[f"{m}_std"], row[f"{m}_n"] = mean_sd([r.final.get(m, math.nan) for r in done])
            for landmark, attr in ((LOCKIN, "lockin"), (ONSET, "onset")):
                steps = [getattr(r, attr) for r in done if getattr(r, attr) is not None]
                row[f"{landmark}_mean"], row[f"{landmark}_std"], row[f"{landmark}_n"] = mean_sd(steps)
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
    counts = Counter({s: int(row[status_count_column(s)]) for s in STATUS_ORDER})
    mean, std, k = row[f"{metric}_mean"], row[f"{metric}_std"], int(row[f"{metric}_n"])
    spread = "" if math.isnan(std) else f" ± {number_text(std, metric)}"
    if metric in LANDMARKS:
        defined = int(row[f"{metric}_defined"])
        if not n_done:
            text = "—"
        elif not defined:
            text = "n/a"
        elif not k:
            text = f"none (0/{defined})"
        else:
            text = f"{number_text(mean, metric)}{spread} ({k}/{defined})"
    else:
        text = f"{number_text(mean, metric)}{spread} (n={k})" if k else "—"
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
        parts = [f"{int(row[status_count_column(s)])} {s}" for s in STATUS_ORDER if int(row[status_count_column(s)])]
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
    zero = agg[agg[GAMMA].map(lambda v: same_value(v, 0))]
    if zero.empty:
        return None
    rows: dict[str, dict[str, float]] = {}
    columns = []
    for _, row in agg.iterrows():
        if same_value(row[GAMMA], 0):
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


def trace_summary(traces: list[dict[str, np.ndarray]]) -> dict[str, tuple[float, float]]:
    """Final-step summaries over the runs of a group: Ω relative drift (median over channels), mean A,
    mean Φ offset from init and mean |Φ| — each as (mean, std) over runs."""
    values: dict[str, list[float]] = {}
    for tr in traces:
        for name, arr in tr.items():
            if name == "steps" or arr.ndim < 1 or len(arr) < 1:
                continue
            kind, first, last = parameter_kind(name), arr[0].astype(float), arr[-1].astype(float)
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
    return {k: mean_sd(v)[:2] for k, v in values.items()}
