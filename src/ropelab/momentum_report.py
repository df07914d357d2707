"""Momentum attention (arXiv 2602.04902, issue 10): degradation γ = 0 → 2, γ-response verdicts and the
attention-sharpening number, for the ``momentum_gamma`` and ``momentum_freqs`` sweeps.

``python -m ropelab.report SWEEP`` adds this module's section to a γ sweep's report (``section``);
``python -m ropelab.momentum_report SWEEP [--out DIR]`` writes it alone (``momentum.md`` and its figures).

Definitions (every interval is a 95 % Student t interval over seeds, ``ropelab.stats``):

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

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ropelab.report import budget_lines, file_part, load_paper_values, markdown_table, open_report, pyplot
from ropelab.guess import baselines
from ropelab.locality import local_mass, run_maps as model_maps, sharpening
from ropelab.report.sweep import GAMMA
from ropelab.runs import atomic_write_text
from ropelab.stats import Estimate, Landmarks, estimate, paired_difference

NABLA_TASKS = ("assoc_recall", "variable_tracking")
INTEGRAL_TASKS = ("global_counting", "mean_pooling")
MOMENTUM_TASKS = NABLA_TASKS + INTEGRAL_TASKS
TASK_SETS = {"∫ tasks": INTEGRAL_TASKS, "all four": MOMENTUM_TASKS}
CLAIMS = {"assoc_recall": ("monotone gain", "associative recall improves monotonically with γ"),
          "variable_tracking": ("inverted U", "variable tracking is an inverted U in γ"),
          "global_counting": ("flat", "global counting barely changes with γ"),
          "mean_pooling": ("flat", "mean pooling barely changes with γ")}
ATTENTION_GAMMAS = (0.0, 0.5, 2.0)
REPO = Path(__file__).resolve().parents[2]

PAPER_DEFINITION = (
    "The paper (§3.1) gives one number per profile — 9.8 % geometric, 15.8 % single, 16.5 % band-pass, "
    "\"性能下降\", performance drop at γ = 2 — with no task, metric, spread or formula. Most plausibly it is the "
    "relative drop of one mean accuracy over its task suite, from seed-averaged (or single) runs: our **drop of "
    "the mean, all four tasks** column. Why: the numbers sit in §3, before the tasks are split into ∇ and ∫ (§4), "
    "and name no task; a single value without spread is what a ratio of two averaged accuracies gives; and on "
    "the ∫ tasks alone a 10–17 % drop would contradict §4's own claim that ∫ tasks barely change. The % sign "
    "could also mean accuracy points, so the absolute drop is shown too. Our headline is the mean of per-task "
    "relative drops (the issue's definition), which weighs each task equally whatever its accuracy.")


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
    x, y = np.asarray(xs, float), np.asarray(ys, float)
    if len(x) < 2 or np.ptp(x) == 0:
        return math.nan
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def gamma_verdict(by_gamma: Mapping[float, Mapping[Any, float]], margin: float = 0.05,
                  floor: float | None = None) -> Verdict:
    """``by_gamma``: γ → {seed: accuracy}. The test in the module docstring; ``margin`` in accuracy units;
    ``floor``: the task's guess accuracy (ropelab.guess) — a task no γ lifts above it says nothing about γ."""
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


def _groups(table: pd.DataFrame) -> list[str]:
    order = ["geometric", "single@1", "single@0.1", "single@0.01", "single", "bandpass@high", "bandpass@mid",
             "bandpass@low", "bandpass"]
    def key(g):
        prof = g.rsplit("freqs=", 1)[-1]
        return (order.index(prof) if prof in order else len(order), g)
    return sorted(table["group"].unique(), key=key)


def _tasks(table: pd.DataFrame) -> list[str]:
    present = list(table["task"].unique())
    return [t for t in MOMENTUM_TASKS if t in present] + sorted(t for t in present if t not in MOMENTUM_TASKS)


def _est(e: Estimate | None, fmt: str = "{:.1f}") -> str:
    return "–" if e is None else e.text(fmt)


def _paper_degradation(group: str, g1: float) -> float | None:
    family = group.rsplit("freqs=", 1)[-1].split("@")[0]
    for e in load_paper_values():
        match = e.get("match") or {}
        if e.get("derived") == "rel_degradation_gamma" and str(match.get("pos.freqs")) == family \
                and math.isclose(float(match.get(GAMMA, math.nan)), g1):
            return float(e["mean"])
    return None


def degradation_section(table: pd.DataFrame, g0: float = 0.0, g1: float = 2.0) -> tuple[list[str], dict]:
    if table.empty or not ((table["gamma"] - g0).abs() < 1e-9).any() or not ((table["gamma"] - g1).abs() < 1e-9).any():
        return [], {}
    tasks, results, rows = _tasks(table), {}, []
    for group in _groups(table):
        deg = degradation(table[table["group"] == group], g0, g1)
        results[group] = deg
        row = {t: _est(deg.per_task.get(t)) for t in tasks}
        for name in TASK_SETS:
            row[f"mean of drops, {name}"] = _est(deg.mean_of_drops.get(name))
        row["drop of the mean, all four"] = _est(deg.drop_of_mean.get("all four"))
        row["absolute, all four (pts)"] = _est(deg.absolute.get("all four"))
        paper = _paper_degradation(group, g1)
        row["paper"] = "–" if paper is None else f"{paper:g}"
        rows.append({"profile": group.replace("freqs=", ""), **row})
    md = [f"### Degradation γ = {g0:g} → {g1:g} (val/acc, %)", "",
          "Per task: the mean over seeds of each seed's relative drop (a(γ=0) − a(γ=2)) / a(γ=0) × 100, paired by "
          "seed, [95 % t interval over seeds] (n seeds); positive = worse with momentum. `mean of drops`: per seed "
          "the mean of its per-task drops, then the interval over seeds (∫ tasks = global_counting, mean_pooling). "
          "`drop of the mean`: per seed the relative drop of the accuracy averaged over the four tasks. "
          "`absolute`: the same averaged accuracy's drop in points.", "",
          markdown_table(pd.DataFrame(rows).set_index("profile"), "profile"), "",
          PAPER_DEFINITION, ""]
    return md, results


def _by_gamma(rows: pd.DataFrame) -> dict[float, dict]:
    return {g: dict(zip(r["seed"], r["value"])) for g, r in rows.groupby("gamma")}


def verdict_section(table: pd.DataFrame, out: Path, dpi: int, margin: float,
                    floors: Mapping[str, float] | None = None) -> tuple[list[str], dict]:
    floors = floors or {}
    md, verdicts, figures = [], {}, []
    for group in _groups(table):
        here = table[table["group"] == group]
        if here["gamma"].nunique() < 3:
            continue
        rows = []
        for task in _tasks(here):
            v = gamma_verdict(_by_gamma(here[here["task"] == task]), margin, floors.get(task))
            verdicts[(group, task)] = v
            claim = CLAIMS.get(task, ("–", ""))[0]
            floor = f"{100 * floors[task]:.1f}" if task in floors else "–"
            rows.append({"task": task, "paper": claim, "ours": v.label, "guess floor": floor, **{
                f"γ={g:g}": _est(Estimate(100 * e.mean, 100 * e.sd, e.n)) for g, e in v.means.items()},
                "test": v.reason})
        md += [f"#### {group.replace('freqs=', 'profile ')}", "",
               markdown_table(pd.DataFrame(rows).set_index("task")), ""]
        figures.append(plot_gamma_response(here, verdicts, group, out, dpi, floors))
    if not md:
        return [], {}
    head = ["### Accuracy against γ: verdicts", "",
            "val/acc in %, mean [95 % t interval] (n seeds). The verdict is a test against the seed spread "
            f"(ropelab.momentum_report.gamma_verdict): Δ(γ) = a(γ) − a(γ=0) paired by seed; slope = per seed the "
            "least-squares slope of accuracy against γ's rank, t interval over seeds. `guess floor`: the better of "
            "answering with the group's most frequent answer and guessing among the answer tokens in the input "
            "(ropelab.guess, 20k examples of the runs' task config). In order: **not learned** = every γ's mean "
            f"within {100 * margin:g} pts of the floor (the task then says nothing about γ); **flat** = every "
            f"Δ(γ) interval within ±{100 * margin:g} pts (an equivalence test); **inverted U** = the best interior γ "
            "significantly above both ends; **U** = the mirror; **monotone gain / drop** = the slope's interval "
            "above / below 0; **no clear change** = no Δ excludes 0 but some interval is wider than the margin; "
            "**other** = a significant Δ without those shapes.", ""]
    return head + md + [f"![accuracy against γ]({f.name})" for f in figures] + [""], verdicts


# ----------------------------------------------------------------------------------------------- attention

def _checkpoint(run, ckpt_roots: list[Path]) -> Path | None:
    for root in [run.path, *(r / run.rel for r in ckpt_roots)]:
        path = Path(root) / "checkpoints" / "last.ckpt"
        if path.is_file():
            return path
    return None


def run_maps(run, ckpt: Path, n_examples: int) -> list[np.ndarray]:
    """Attention weights (layers, heads, T, T) of ``n_examples`` validation examples of a run."""
    from ropelab import attention_maps

    model, task, cfg = attention_maps.load_run_model(run.path, checkpoint=str(ckpt.resolve()))
    return model_maps(model, task, cfg, n_examples)


def recorded_mass(run, k: int, n_examples: int) -> tuple[float, float] | None:
    """(local mass, uniform reference) that the run's summary.json kept at the end of training, when it was
    measured the same way (k, number of examples)."""
    kept = (run.summary or {}).get("attention") or {}
    if kept.get("k") == k and kept.get("examples") == n_examples and kept.get("local_mass") is not None:
        return float(kept["local_mass"]), float(kept["uniform"])
    return None


def attention_section(table: pd.DataFrame, out: Path, dpi: int, k: int, layer: int, n_examples: int,
                      ckpt_roots: list[Path]) -> tuple[list[str], dict]:
    """Sharpening number per task × γ (mean over seeds whose checkpoint is found) and the attention figure."""
    geometric = table[table["group"] == "freqs=geometric"]
    here = geometric if not geometric.empty else table[table["group"] == (_groups(table) or [""])[0]]
    masses: dict[tuple[str, float], dict] = {}
    uniform: dict[str, list[float]] = {}
    panels: dict[tuple[str, float], tuple[np.ndarray, float, Any]] = {}
    problems = []
    for _, row in here.sort_values(["task", "gamma", "seed"], key=lambda c: c.astype(str)).iterrows():
        run = row["run"]
        ckpt = _checkpoint(run, ckpt_roots)
        if ckpt is None:
            kept = recorded_mass(run, k, n_examples)
            if kept is None:
                problems.append(run.rel)
            else:  # the record's number; no map to draw
                masses.setdefault((row["task"], row["gamma"]), {})[row["seed"]] = kept[0]
                uniform.setdefault(row["task"], []).append(kept[1])
            continue
        try:
            maps = run_maps(run, ckpt, n_examples)
        except Exception as err:  # a stale checkpoint: say so, keep the report
            problems.append(f"{run.rel} ({type(err).__name__}: {err})")
            continue
        mass, ref = sharpening(maps, k)
        masses.setdefault((row["task"], row["gamma"]), {})[row["seed"]] = mass
        uniform.setdefault(row["task"], []).append(ref)
        key = (row["task"], row["gamma"])
        if key not in panels:  # seeds are visited lowest first: one example per (task, γ), the same seed if any
            panels[key] = (maps[0][layer].mean(axis=0), local_mass(maps[0][layer], k), row["seed"])
    if not masses:
        return ([f"Attention sharpening: no checkpoint and no recorded number for {len(problems)} runs (records "
                 "keep no checkpoint; records of older code keep no number either: pass --checkpoints "
                 "runs/<sweep>)."] if problems else []), {}
    gammas = sorted({g for _, g in masses})
    rows = []
    for task in _tasks(here):
        row = {f"γ={g:g}": _est(estimate(masses.get((task, g), {}).values()), "{:.3f}") for g in gammas}
        row["uniform"] = f"{np.mean(uniform[task]):.3f}" if task in uniform else "–"
        top, zero = masses.get((task, gammas[-1]), {}), masses.get((task, gammas[0]), {})
        row[f"γ={gammas[-1]:g} − γ={gammas[0]:g}"] = _est(paired_difference(top, zero), "{:+.3f}")
        rows.append({"task": task, **row})
    md = ["### Attention sharpening", "",
          f"Attention mass on the {k} most recent tokens (the query's own included), averaged over queries "
          f"i ≥ {k}, heads, layers and the first {n_examples} validation examples of each run; mean "
          "[95 % t interval] (n seeds with a checkpoint or the number their record kept); `uniform` = what uniform causal attention gives on the "
          "same examples; the last column is paired by seed.", "",
          markdown_table(pd.DataFrame(rows).set_index("task")), ""]
    fig = plot_attention_grid(panels, out, dpi, k, layer)
    if fig:
        md += [f"![attention by task and γ]({fig.name})", ""]
    if problems:
        md += [f"- no checkpoint (or unreadable) for {len(problems)} runs, e.g. `{problems[0]}`", ""]
    return md, masses


# ----------------------------------------------------------------------------------------------- figures

def plot_gamma_response(table: pd.DataFrame, verdicts: dict, group: str, out: Path, dpi: int,
                        floors: Mapping[str, float] | None = None) -> Path:
    plt = pyplot()
    tasks = _tasks(table)
    cols = min(len(tasks), 2)
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        sub = table[table["task"] == task]
        gammas = sorted(sub["gamma"].unique())
        x = {g: i for i, g in enumerate(gammas)}
        for seed, srows in sub.groupby("seed"):
            srows = srows.sort_values("gamma")
            ax.plot([x[g] for g in srows["gamma"]], 100 * srows["value"], "o-", color="grey", alpha=0.35, ms=3,
                    lw=0.8)
        ests = [estimate(sub[sub["gamma"] == g]["value"]) for g in gammas]
        means = np.array([100 * e.mean for e in ests])
        err = np.array([100 * (e.half_width if e.n > 1 else 0) for e in ests])
        ax.errorbar(range(len(gammas)), means, yerr=err, fmt="o-", color="C0", capsize=4, lw=1.6,
                    label="mean, 95 % t interval")
        if floors and task in floors:
            ax.axhline(100 * floors[task], color="C3", ls="--", lw=1, label="guess floor (ropelab.guess)")
        ax.set_xticks(range(len(gammas)), [f"{g:g}" for g in gammas])
        v = verdicts.get((group, task))
        claim = CLAIMS.get(task, ("–", ""))[0]
        ax.set_title(f"{task}: ours {v.label if v else '–'} · paper {claim}", fontsize=9)
        ax.set_xlabel("γ (evenly spaced by rank)")
        ax.set_ylabel("val/acc (%)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle(f"accuracy against γ ({group.replace('freqs=', 'profile ')}); grey: one line per seed; bars: 95 % t "
                 "interval of each γ's mean (the verdict tests seed-paired differences, narrower)", fontsize=9)
    fig.tight_layout()
    path = out / f"gamma_response_{file_part(group.replace('freqs=', ''))}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_attention_grid(panels: dict, out: Path, dpi: int, k: int, layer: int,
                        gammas: Iterable[float] = ATTENTION_GAMMAS) -> Path | None:
    """Rows: tasks; columns: γ ∈ {0, 0.5, 2} (those present); one validation example, one layer, mean over heads;
    one colour bar (square-root scale) for every panel."""
    from matplotlib.colors import PowerNorm

    present = sorted({g for _, g in panels})
    cols = [g for g in present if any(math.isclose(g, w) for w in gammas)] or present
    tasks = [t for t in MOMENTUM_TASKS if any(tt == t for tt, _ in panels)] + sorted(
        {t for t, _ in panels if t not in MOMENTUM_TASKS})
    if not tasks or not cols:
        return None
    plt = pyplot()
    vmax = max(float(panels[key][0].max()) for key in panels if key[1] in cols)
    norm = PowerNorm(0.5, vmin=0.0, vmax=vmax)
    fig, axes = plt.subplots(len(tasks), len(cols), figsize=(3.8 * len(cols) + 0.9, 3.8 * len(tasks)), squeeze=False)
    image = None
    for i, task in enumerate(tasks):
        for j, g in enumerate(cols):
            ax = axes[i][j]
            if (task, g) in panels:
                weights, mass, seed = panels[(task, g)]
                image = ax.imshow(weights, cmap="magma", norm=norm, interpolation="nearest")
                ax.set_title(f"{task} · γ={g:g} · seed {seed}\nmass on last {k} tokens {mass:.2f}", fontsize=8)
            else:
                ax.text(0.5, 0.5, "no checkpoint", ha="center", va="center", transform=ax.transAxes, fontsize=8)
                ax.set_title(f"{task} · γ={g:g}", fontsize=8)
            ax.set_xlabel("key position", fontsize=7)
            ax.set_ylabel("query position", fontsize=7)
            ax.tick_params(labelsize=6)
    layer_name = "last layer" if layer == -1 else f"layer {layer}"
    fig.suptitle(f"attention weights, {layer_name}, mean over heads, first validation example", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.9, 0.97))
    if image is not None:
        cax = fig.add_axes((0.92, 0.1, 0.02, 0.8))
        fig.colorbar(image, cax=cax, label="attention weight (square-root scale)")
    path = out / "attention_momentum.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------- claims

def claims_section(sweep, degradation_results: dict, verdicts: dict, masses: dict, margin: float) -> list[str]:
    """claim | ours | verdict | conditions: the README's momentum table, filled from this sweep."""
    cfg = sweep.runs[0].config if sweep.runs else {}
    conditions = "; ".join(budget_lines(sweep)) + (
        f"; {cfg.get('pos.name', 'rope')} base {cfg.get('pos.base', '?')}, {cfg.get('model.n_layers', '?')} layers, "
        f"hidden {cfg.get('model.d_model', '?')}, {cfg.get('model.n_heads', '?')} heads; final val/acc; "
        f"seeds {', '.join(sorted({str(r.config.get('seed')) for r in sweep.runs}))}")
    rows = []
    for (group, task), v in verdicts.items():
        if group != "freqs=geometric" or task not in CLAIMS:
            continue
        expected, text = CLAIMS[task]
        last = max(v.diffs) if v.diffs else None
        ours = f"{v.label}; γ={last:g} − γ=0: {_est(_scaled(v.diffs[last]))} pts" if last is not None else v.label
        if v.label == expected:
            verdict = "reproduced"
        elif v.label == "not learned":
            verdict = "says nothing: not learned at any γ (at the guess floor)"
        elif v.label in ("no clear change", "too few seeds"):
            verdict = "inconclusive" if expected != "flat" else f"not shown: Δ intervals wider than ±{100 * margin:g} pts"
        else:
            verdict = "not reproduced"
        rows.append({"claim": text, "ours": ours, "verdict": verdict, "conditions": conditions})
    geo = degradation_results.get("freqs=geometric")
    if geo is not None and "all four" in geo.mean_of_drops:
        others = {g: d for g, d in degradation_results.items() if g != "freqs=geometric" and "all four" in d.mean_of_drops}
        parts = [f"{g.replace('freqs=', '')} {_est(d.mean_of_drops['all four'])}" for g, d in
                 [("freqs=geometric", geo), *others.items()]]
        lowest = all(geo.mean_of_drops["all four"].mean < d.mean_of_drops["all four"].mean for d in others.values())
        verdict = ("ordering holds (geometric lowest)" if lowest else "ordering does not hold") + \
            " for mean-of-drops; intervals over seeds shown" if others else "only the geometric profile ran"
        rows.append({"claim": "at γ = 2 multi-frequency RoPE degrades least: 9.8 % vs single 15.8 %, band-pass 16.5 %",
                     "ours": "; ".join(parts), "verdict": verdict, "conditions": conditions})
    for task in NABLA_TASKS:
        gs = sorted(g for t, g in masses if t == task)
        if len(gs) >= 2:
            diff = paired_difference(masses[(task, gs[-1])], masses[(task, gs[0])])
            verdict = "reproduced" if diff.n > 1 and diff.low > 0 else "not reproduced" if diff.n > 1 and diff.high < 0 \
                else "inconclusive"
            rows.append({"claim": f"attention sharpens along the diagonal as γ grows ({task})",
                         "ours": f"local mass γ={gs[-1]:g} − γ={gs[0]:g}: {_est(diff, '{:+.3f}')}",
                         "verdict": verdict, "conditions": conditions})
    if not rows:
        return []
    return ["### Momentum claims", "", "For the README's Results section (claim | ours | verdict | conditions).", "",
            markdown_table(pd.DataFrame(rows).set_index("claim"), "claim"), ""]


def _scaled(e: Estimate) -> Estimate:
    return Estimate(100 * e.mean, 100 * e.sd, e.n)


# ----------------------------------------------------------------------------------------------- entry points

def section(sweep, out: Path, dpi: int = 100, attention: bool = True, layer: int = 0, k: int = 3,
            n_examples: int = 16, margin: float = 0.05, ckpt_roots: Iterable[Path] = ()) -> list[str]:
    """The momentum section of a γ sweep's report (markdown lines; figures written into ``out``)."""
    table = seed_table(sweep)
    if table.empty or table["gamma"].nunique() < 2:
        return []
    floors = baselines(run.path / "config.yaml" for run in sweep.runs if (run.path / "config.yaml").is_file())
    md = ["## Momentum attention (ropelab.momentum_report)", ""]
    deg_md, deg = degradation_section(table)
    ver_md, verdicts = verdict_section(table, out, dpi, margin, floors)
    att_md, masses = attention_section(table, out, dpi, k, layer, n_examples,
                                       [Path(p) for p in ckpt_roots]) if attention else ([], {})
    md += deg_md + ver_md + att_md + claims_section(sweep, deg, verdicts, masses, margin)
    return md


def default_ckpt_roots(sweep_dir: Path) -> list[Path]:
    """Records (results/<name>) keep no checkpoints: look for them under runs/<name> as well."""
    return [REPO / "runs" / Path(sweep_dir).name]


def write(sweep_dir: Path, out: Path | None = None, **kwargs) -> Path:
    kwargs.setdefault("ckpt_roots", default_ckpt_roots(sweep_dir))
    sweep, out, md = open_report(sweep_dir, out, Landmarks(), "Momentum report", "python -m ropelab.momentum_report")
    md += section(sweep, out, **kwargs) or ["No γ axis with completed runs in this sweep."]
    md += [""]
    atomic_write_text(out / "momentum.md", "\n".join(md))
    return out / "momentum.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ropelab.momentum_report", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", type=Path, help="runs/momentum_gamma, results/momentum_freqs, …")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: SWEEP_DIR/report)")
    p.add_argument("--checkpoints", type=Path, action="append", default=None,
                   help="where job folders with checkpoints/ live when SWEEP_DIR holds records (default: runs/<name>)")
    p.add_argument("--no-attention", action="store_true", help="skip the attention maps and the sharpening number")
    p.add_argument("--attn-layer", type=int, default=0, help="layer of the attention figure (-1: last)")
    p.add_argument("--k", type=int, default=3, help="sharpening: mass on the k most recent tokens")
    p.add_argument("--examples", type=int, default=16, help="sharpening: validation examples per run")
    p.add_argument("--margin", type=float, default=0.05, help="flat: every Δ(γ) interval within ±margin (accuracy)")
    p.add_argument("--dpi", type=int, default=100)
    args = p.parse_args(argv)
    path = write(args.sweep_dir, args.out, dpi=args.dpi, attention=not args.no_attention, layer=args.attn_layer,
                 k=args.k, n_examples=args.examples, margin=args.margin,
                 ckpt_roots=args.checkpoints if args.checkpoints is not None else default_ckpt_roots(args.sweep_dir))
    print(f"momentum report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
