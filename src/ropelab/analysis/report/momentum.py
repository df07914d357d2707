"""The momentum section of a γ sweep's report (``section``): degradation, γ verdicts with their figures, attention
sharpening from checkpoints (or the number each run recorded) and the claims table. Its numbers are
``ropelab.analysis.report.gamma``; ``ropelab report`` adds it to a γ sweep's report, ``python -m
ropelab.momentum_report`` writes it alone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ropelab.analysis.guess import baselines
from ropelab.analysis.report.gamma import (CLAIMS, MOMENTUM_TASKS, NABLA_TASKS, TASK_SETS, degradation, gamma_verdict,
                                           ordered_tasks, profile_groups, seed_table)
from ropelab.analysis.report.figures import file_part, pyplot
from ropelab.analysis.report.papers import load_paper_values
from ropelab.analysis.report.status import budget_lines
from ropelab.analysis.report.sweep import GAMMA, ordered, value_label
from ropelab.analysis.report.tables import markdown_table
from ropelab.analysis.stats import Estimate, estimate, paired_difference
from ropelab.core.cli import REPO
from ropelab.core.locality import local_mass, run_maps as model_maps, sharpening
from ropelab.core.runs import last_checkpoint

ATTENTION_GAMMAS = (0.0, 0.5, 2.0)


PAPER_DEFINITION = (
    "The paper (§3.1) gives one number per profile — 9.8 % geometric, 15.8 % single, 16.5 % band-pass, "
    "\"性能下降\", performance drop at γ = 2 — with no task, metric, spread or formula. Most plausibly it is the "
    "relative drop of one mean accuracy over its task suite, from seed-averaged (or single) runs: our **drop of "
    "the mean, all four tasks** column. Why: the numbers sit in §3, before the tasks are split into ∇ and ∫ (§4), "
    "and name no task; a single value without spread is what a ratio of two averaged accuracies gives; and on "
    "the ∫ tasks alone a 10–17 % drop would contradict §4's own claim that ∫ tasks barely change. The % sign "
    "could also mean accuracy points, so the absolute drop is shown too. Our headline is the mean of per-task "
    "relative drops (the issue's definition), which weighs each task equally whatever its accuracy.")



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
    tasks, results, rows = ordered_tasks(table), {}, []
    for group in profile_groups(table):
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
    for group in profile_groups(table):
        here = table[table["group"] == group]
        if here["gamma"].nunique() < 3:
            continue
        rows = []
        for task in ordered_tasks(here):
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
        path = last_checkpoint(root)
        if path.is_file():
            return path
    return None


def run_maps(run, ckpt: Path, n_examples: int) -> list[np.ndarray]:
    """Attention weights (layers, heads, T, T) of ``n_examples`` validation examples of a run."""
    from ropelab.analysis import attention_maps

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
    # every group of the geometric profile (one per value of another axis, pos.base say: each its own rows, none
    # silently kept over another), else the first profile's
    groups = [g for g in profile_groups(table) if g.endswith("freqs=geometric")] or profile_groups(table)[:1]
    here = table[table["group"].isin(groups)]
    label = {g: (lambda task, g=g: task if len(groups) == 1 else f"{task} ({g.rsplit('freqs=', 1)[0].strip()})")
             for g in groups}
    masses: dict[tuple[str, float], dict] = {}
    uniform: dict[str, list[float]] = {}
    panels: dict[tuple[str, float], tuple[np.ndarray, float, Any]] = {}
    problems = []
    for _, row in here.sort_values(["task", "gamma", "seed"], key=lambda c: c.astype(str)).iterrows():
        run, cell = row["run"], label[row["group"]](row["task"])
        ckpt = _checkpoint(run, ckpt_roots)
        if ckpt is None:
            kept = recorded_mass(run, k, n_examples)
            if kept is None:
                problems.append(run.rel)
            else:  # the record's number; no map to draw
                masses.setdefault((cell, row["gamma"]), {})[row["seed"]] = kept[0]
                uniform.setdefault(cell, []).append(kept[1])
            continue
        try:
            maps = run_maps(run, ckpt, n_examples)
        except Exception as err:  # a stale checkpoint: say so, keep the report
            problems.append(f"{run.rel} ({type(err).__name__}: {err})")
            continue
        mass, ref = sharpening(maps, k)
        masses.setdefault((cell, row["gamma"]), {})[row["seed"]] = mass
        uniform.setdefault(cell, []).append(ref)
        key = (cell, row["gamma"])
        if key not in panels:  # seeds are visited lowest first: one example per (task, γ), the same seed if any
            panels[key] = (maps[0][layer].mean(axis=0), local_mass(maps[0][layer], k), row["seed"])
    if not masses:
        return ([f"Attention sharpening: no checkpoint and no recorded number for {len(problems)} runs (records "
                 "keep no checkpoint; records of older code keep no number either: pass --checkpoints "
                 "runs/<sweep>)."] if problems else []), {}
    gammas = sorted({g for _, g in masses})
    rows = []
    cells = [label[g](task) for task in ordered_tasks(here) for g in groups]
    for task in [c for c in cells if any(t == c for t, _ in masses)]:
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
    tasks = ordered_tasks(table)
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
    bases = ", ".join(ordered(value_label(r.config.get("pos.base")) for r in sweep.runs)) or "?"  # each, not the first
    conditions = "; ".join(budget_lines(sweep)) + (
        f"; {cfg.get('pos.name', 'rope')} base {bases}, {cfg.get('model.n_layers', '?')} layers, "
        f"hidden {cfg.get('model.d_model', '?')}, {cfg.get('model.n_heads', '?')} heads; final val/acc; "
        f"seeds {', '.join(sorted({str(r.config.get('seed')) for r in sweep.runs}))}")
    rows = []
    for (group, task), v in verdicts.items():
        if not group.endswith("freqs=geometric") or task not in CLAIMS:
            continue
        expected, text = CLAIMS[task]
        if group != "freqs=geometric":  # one row per value of the sweep's other axis (pos.base, …)
            text = f"{text} ({group.rsplit('freqs=', 1)[0].strip()})"
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
    for task in [c for c in dict.fromkeys(t for t, _ in masses) if c.split(" (")[0] in NABLA_TASKS]:
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


def section(sweep, out: Path, dpi: int = 100, attention: bool = True, layer: int = 0, k: int = 3,
            n_examples: int = 16, margin: float = 0.05, ckpt_roots: Iterable[Path] = ()) -> list[str]:
    """The momentum section of a γ sweep's report (markdown lines; figures written into ``out``)."""
    table = seed_table(sweep)
    if table.empty or table["gamma"].nunique() < 2:
        return []
    floors = baselines(run.record.saved_config for run in sweep.runs if run.record.saved_config)
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
