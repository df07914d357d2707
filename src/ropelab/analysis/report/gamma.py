"""Momentum attention's numbers (arXiv 2602.04902, issue 10): degradation γ = 0 → 2 and the γ-response verdicts,
from a γ sweep's completed runs. The report's section is ``ropelab.analysis.report.momentum``, the command
``ropelab momentum-report``.

Definitions (every interval is a 95 % Student t interval over seeds, ``ropelab.analysis.stats``):

* **Relative degradation** of a task, γ₀ = 0 → γ₁ = 2, in %: per seed s, d_s = (a_s(γ₀) − a_s(γ₁)) / a_s(γ₀) with
  a = final val/acc — the two runs of a seed share the data and the backbone initialisation, so the drop is
  paired — then the mean of d_s over seeds with its t interval. Averaged over a task set (the ∫ tasks, all
  four): per seed, the mean of that seed's per-task drops, then the t interval over seeds (only seeds that have
  both γ for every task of the set count). Beside it, the **drop of the mean** — per seed (Ā(γ₀) − Ā(γ₁)) / Ā(γ₀)
  with Ā the mean accuracy over the task set — and the **absolute** drop Ā(γ₀) − Ā(γ₁) in points.
* **γ verdicts** (``gamma_verdict``), per task, against the seed spread: Δ(γ) = a(γ) − a(γ_first) paired by seed;
  slope = per seed, the least-squares slope of accuracy against the *rank* of γ (0, 1, …, so the wide 1 → 2 step
  does not dominate), t interval over seeds. In this order: **flat** if every Δ(γ) interval lies within
  ±``margin`` (5 points by default) — an equivalence test: any change is smaller than the margin with 95 %
  confidence, even if a tiny one is significant; **inverted U** if the interior γ with the highest mean is
  significantly above both ends (both paired intervals > 0); **U** for the mirror case; **monotone gain** if
  the slope's interval is > 0; **monotone drop** if it is < 0; **no clear change** if no Δ(γ) interval excludes 0
  (but some is wider than ±margin: flatness not shown either); **other** if some Δ excludes 0 without any of
  these shapes.
* **Sharpening** (``local_mass``): the attention mass a query puts on its k most recent tokens, itself included
  (keys i−k < j ≤ i), averaged over queries i ≥ k, heads, layers and validation examples; uniform causal
  attention gives ``uniform_local_mass``. The paper's "the diagonal sharpens as γ grows" = this number rises
  with γ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
from scipy.stats import linregress

from ropelab.analysis.report.sweep import GAMMA
from ropelab.analysis.stats import Estimate, estimate, paired_difference

NABLA_TASKS = ("assoc_recall", "variable_tracking")
INTEGRAL_TASKS = ("global_counting", "mean_pooling")
MOMENTUM_TASKS = NABLA_TASKS + INTEGRAL_TASKS
TASK_SETS = {"∫ tasks": INTEGRAL_TASKS, "all four": MOMENTUM_TASKS}
CLAIMS = {"assoc_recall": ("monotone gain", "associative recall improves monotonically with γ"),
          "variable_tracking": ("inverted U", "variable tracking is an inverted U in γ"),
          "global_counting": ("flat", "global counting barely changes with γ"),
          "mean_pooling": ("flat", "mean pooling barely changes with γ")}


# ----------------------------------------------------------------------------------------------- pure functions

def _pct(x: float) -> float:
    return 100.0 * x


@dataclass
class Degradation:
    """Relative drop from γ₀ to γ₁ in % (absolute drops in accuracy points), Estimates over seeds."""

    per_task: dict[str, Estimate] = field(default_factory=dict)          # mean over seeds of per-seed drops
    per_task_of_means: dict[str, float] = field(default_factory=dict)    # (mean a0 − mean a1) / mean a0, no spread
    mean_of_drops: dict[str, Estimate] = field(default_factory=dict)     # task set → per-seed mean of task drops
    drop_of_mean: dict[str, Estimate] = field(default_factory=dict)      # task set → per-seed drop of the task mean
    absolute: dict[str, Estimate] = field(default_factory=dict)          # task set → per-seed Ā(γ₀) − Ā(γ₁), points
    seeds: dict[str, list] = field(default_factory=dict)                 # task set → the seeds that counted


def degradation(values: pd.DataFrame, g0: float = 0.0, g1: float = 2.0,
                task_sets: Mapping[str, Iterable[str]] = TASK_SETS) -> Degradation:
    """``values``: one row per run, columns task, gamma, seed, value (an accuracy in [0, 1]); one profile."""
    out = Degradation()
    acc: dict[str, dict[Any, tuple[float, float]]] = {}
    for task, rows in values.groupby("task"):
        at = {g: dict(zip(r["seed"], r["value"])) for g, r in rows.groupby("gamma")}
        a0 = next((v for g, v in at.items() if math.isclose(float(g), g0)), {})
        a1 = next((v for g, v in at.items() if math.isclose(float(g), g1)), {})
        pairs = {s: (a0[s], a1[s]) for s in a0 if s in a1 and _finite(a0[s]) and _finite(a1[s])}
        acc[task] = pairs
        if not pairs:
            continue
        out.per_task[task] = estimate(_pct((x0 - x1) / x0) if x0 else math.nan for x0, x1 in pairs.values())
        m0, m1 = np.mean([p[0] for p in pairs.values()]), np.mean([p[1] for p in pairs.values()])
        out.per_task_of_means[task] = _pct((m0 - m1) / m0) if m0 else math.nan
    for name, tasks in task_sets.items():
        tasks = list(tasks)
        if not all(t in acc for t in tasks):
            continue
        seeds = sorted(set.intersection(*(set(acc[t]) for t in tasks)), key=str)
        seeds = [s for s in seeds if all(acc[t][s][0] for t in tasks)]  # a 0 accuracy has no relative drop
        out.seeds[name] = seeds
        out.mean_of_drops[name] = estimate(
            np.mean([_pct((acc[t][s][0] - acc[t][s][1]) / acc[t][s][0]) for t in tasks]) for s in seeds)
        means = [(np.mean([acc[t][s][0] for t in tasks]), np.mean([acc[t][s][1] for t in tasks])) for s in seeds]
        out.drop_of_mean[name] = estimate(_pct((m0 - m1) / m0) for m0, m1 in means)
        out.absolute[name] = estimate(_pct(m0 - m1) for m0, m1 in means)
    return out


@dataclass(frozen=True)
class Verdict:
    label: str                         # not learned | monotone gain | inverted U | U | monotone drop | flat | no clear change | other | too few seeds
    reason: str                        # the numbers the label rests on
    slope: Estimate                    # per-seed slope of accuracy against γ's rank, over seeds
    diffs: dict                        # γ → Estimate of a(γ) − a(γ_first), paired by seed
    means: dict                        # γ → Estimate of a(γ) over seeds
    peak: float | None = None          # interior γ with the highest mean (inverted U) or lowest (U)


def _finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ys against xs; NaN for fewer than two distinct xs."""
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    if len(x) < 2 or np.ptp(x) == 0:
        return math.nan
    return float(linregress(x, y).slope)


def gamma_verdict(by_gamma: Mapping[float, Mapping[Any, float]], margin: float = 0.05,
                  floor: float | None = None) -> Verdict:
    """``by_gamma``: γ → {seed: accuracy}. The test in the module docstring; ``margin`` in accuracy units;
    ``floor``: the task's guess accuracy (ropelab.analysis.guess) — a task no γ lifts above it says nothing about γ."""
    gammas = sorted(float(g) for g in by_gamma)
    data = {float(g): {s: v for s, v in seeds.items() if _finite(v)} for g, seeds in by_gamma.items()}
    means = {g: estimate(data[g].values()) for g in gammas}
    first, last = gammas[0], gammas[-1]
    diffs = {g: paired_difference(data[g], data[first]) for g in gammas[1:]}
    seeds = sorted({s for g in gammas for s in data[g]}, key=str)
    rank = {g: i for i, g in enumerate(gammas)}
    slope = estimate(_slope([rank[g] for g in gammas if s in data[g]], [data[g][s] for g in gammas if s in data[g]])
                     for s in seeds)
    if len(gammas) < 2 or slope.n < 2 or not diffs or all(d.n < 2 for d in diffs.values()):
        return Verdict("too few seeds", "fewer than 2 seeds with two γ values", slope, diffs, means)

    def ci(e: Estimate, unit: float = 100.0) -> str:
        return f"{unit * e.mean:+.1f} [{unit * e.low:+.1f}, {unit * e.high:+.1f}]"

    slope_text = f"slope per γ step {ci(slope)} pts"
    if floor is not None and all(e.n and e.mean <= floor + margin for e in means.values()):
        return Verdict("not learned", f"every γ's mean within {100 * margin:g} pts of the guess floor "
                       f"{100 * floor:.1f} %: the task says nothing about γ; {slope_text}", slope, diffs, means)
    defined = {g: d for g, d in diffs.items() if d.n > 1}
    widest = max(max(abs(d.low), abs(d.high)) for d in defined.values())
    if widest <= margin:
        return Verdict("flat", f"every Δ(γ) interval within ±{100 * margin:g} pts (widest reach "
                       f"{100 * widest:.1f}); {slope_text}", slope, diffs, means)
    interior = gammas[1:-1]
    if interior:
        top = max(interior, key=lambda g: means[g].mean if means[g].n else -math.inf)
        bottom = min(interior, key=lambda g: means[g].mean if means[g].n else math.inf)
        up_first, up_last = paired_difference(data[top], data[first]), paired_difference(data[top], data[last])
        if up_first.n > 1 and up_last.n > 1 and up_first.low > 0 and up_last.low > 0:
            return Verdict("inverted U", f"γ={top:g} above γ={first:g} by {ci(up_first)} and above γ={last:g} by "
                           f"{ci(up_last)} pts", slope, diffs, means, top)
        down_first, down_last = paired_difference(data[bottom], data[first]), paired_difference(data[bottom], data[last])
        if down_first.n > 1 and down_last.n > 1 and down_first.high < 0 and down_last.high < 0:
            return Verdict("U", f"γ={bottom:g} below γ={first:g} by {ci(down_first)} and below γ={last:g} by "
                           f"{ci(down_last)} pts", slope, diffs, means, bottom)
    if slope.n > 1 and slope.low > 0:
        return Verdict("monotone gain", f"{slope_text} > 0; γ={last:g} − γ={first:g}: {ci(diffs[last])} pts",
                       slope, diffs, means)
    if slope.n > 1 and slope.high < 0:
        return Verdict("monotone drop", f"{slope_text} < 0; γ={last:g} − γ={first:g}: {ci(diffs[last])} pts",
                       slope, diffs, means)
    significant = [g for g, d in defined.items() if d.excludes_zero()]
    if significant:
        return Verdict("other", "significant Δ at γ=" + ", ".join(f"{g:g} ({ci(diffs[g])} pts)" for g in significant)
                       + f", no trend or single peak; {slope_text}", slope, diffs, means)
    return Verdict("no clear change", f"no Δ(γ) interval excludes 0, but they reach ±{100 * widest:.1f} pts "
                   f"(> ±{100 * margin:g}): flatness not shown; {slope_text}", slope, diffs, means)


# ----------------------------------------------------------------------------------------------- from a sweep

def _profile(run) -> str:
    freqs = run.config.get("pos.freqs")
    return "geometric" if freqs in (None, "∅") else str(freqs)


def _group(sweep, run) -> str:
    """The run's column without γ: the frequency profile and any other axis the sweep varies."""
    others = [k for k in sweep.col_keys if k not in (GAMMA, "pos.freqs")]
    label = sweep.column_label({k: sweep.value(run, k) for k in others}, others) if others else ""
    return f"{label} freqs={_profile(run)}".strip()


def seed_table(sweep, metric: str = "val/acc") -> pd.DataFrame:
    """Completed runs: group (profile), task, gamma, seed, value."""
    rows = [{"group": _group(sweep, r), "task": sweep.value(r, "task.name"), "gamma": float(r.config.get(GAMMA) or 0),
             "seed": r.config.get("seed"), "value": r.final.get(metric, math.nan), "run": r}
            for r in sweep.runs if r.status == "completed"]
    return pd.DataFrame(rows, columns=["group", "task", "gamma", "seed", "value", "run"])


def profile_groups(table: pd.DataFrame) -> list[str]:
    order = ["geometric", "single@1", "single@0.1", "single@0.01", "single", "bandpass@high", "bandpass@mid",
             "bandpass@low", "bandpass"]
    def key(g):
        prof = g.rsplit("freqs=", 1)[-1]
        return (order.index(prof) if prof in order else len(order), g)
    return sorted(table["group"].unique(), key=key)


def ordered_tasks(table: pd.DataFrame) -> list[str]:
    present = list(table["task"].unique())
    return [t for t in MOMENTUM_TASKS if t in present] + sorted(t for t in present if t not in MOMENTUM_TASKS)
