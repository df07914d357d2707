"""Calibration: where a task's baseline learns, found before schemes are compared on it.

A column where every scheme sits at its guess floor, or every setting at the ceiling, tests nothing. A
calibration sweep (``conf/experiment/calibrate_<task>.yaml``) trains the baseline (rope) over a grid of budgets
(``trainer.max_steps``, each its own run: the learning-rate schedule ends at the budget) and the task's own size
knobs, a few seeds per point. This reads the sweep's records and, per grid point, puts the final accuracy of every
seed between the task's guess floor (``ropelab.analysis.guess``, computed for the point's own task settings) and its
ceiling:

- ``floor``   — some seed is within ``margin`` of the floor: the point cannot show a difference;
- ``partial`` — every seed is at least ``margin`` above the floor and at least ``margin`` below the ceiling: a
  change of scheme or setting can move the accuracy either way;
- ``ceiling`` — every seed is clear of the floor, but some seed is within ``margin`` of the ceiling.

It also reads when each run got there from its validation curve — the first validation step at or above
floor + margin ("leaves the floor") and at or above ``level`` ("reaches the level") — and picks, for each size,
the smallest budget that is ``partial`` (the budget for comparisons that need room on both sides, e.g. a γ
sweep) and the smallest budget at which the seeds' mean accuracy reaches ``level`` (the budget at which the task
is learned in distribution, so schemes are compared on speed and extrapolation; a seed that stays below it shows
in the steps-to-level count). Overall picks are the smallest budget,
then the first size in grid order.

    python train.py -m experiment=calibrate_mod_arith hydra/launcher=joblib trainer.threads=1
    ropelab calibrate results/calibration/mod_arith          # → results/calibration/mod_arith/report/
    ropelab calibrate results/calibration/assoc_recall --baseline pos.momentum.gamma=0
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ropelab.analysis import guess
from ropelab.analysis.report.figures import pyplot
from ropelab.analysis.report.status import budget_lines, machines_section
from ropelab.analysis.report.sweep import IGNORED_KEYS, IGNORED_PREFIXES, Sweep, ordered, value_label
from ropelab.analysis.report.tables import markdown_table
from ropelab.analysis.stats import Landmarks, first_step_at, metric_curve
from ropelab.analysis.verdict import calibration_state
from ropelab.core.errors import ConfigError
import tasks

BUDGET = "trainer.max_steps"
METRIC = "val/acc"


@dataclass(frozen=True)
class Rule:
    """What "clearly above the floor", "below the ceiling" and "learned" mean, in accuracy (0–1)."""

    margin: float = 0.05
    level: float = 0.9
    ceiling: float = 1.0

    def describe(self) -> str:
        return (f"partial = every seed ≥ floor + {self.margin:g} and ≤ ceiling − {self.margin:g} (ceiling "
                f"{self.ceiling:g}); floor = some seed below floor + {self.margin:g}; ceiling = clear of the floor "
                f"but some seed above ceiling − {self.margin:g}; learned = the seeds' mean ≥ {self.level:g}")


def state(accuracies: list[float], floor: float, rule: Rule) -> str:
    """floor | partial | ceiling for the final accuracies of one grid point's seeds."""
    return calibration_state(accuracies, floor, rule.margin, rule.ceiling)


def points(runs: pd.DataFrame, sizes: list[str], rule: Rule) -> pd.DataFrame:
    """One row per grid point (budget × sizes) from one row per run (``budget``, the size keys, ``seed``, ``acc``,
    ``floor``, ``leaves_floor``, ``reaches_level``): seeds, mean / min / max accuracy, floor, state, learned, and
    the mean step of leaving the floor and of reaching the level over the seeds that did (with how many did)."""
    rows = []
    for key, group in runs.groupby([*sizes, "budget"], sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        acc = group["acc"].tolist()
        floor = float(group["floor"].iloc[0])
        row = dict(zip([*sizes, "budget"], key))
        row.update(seeds=len(acc), acc_mean=float(np.mean(acc)), acc_min=min(acc), acc_max=max(acc), floor=floor,
                   state=state(acc, floor, rule), learned=float(np.mean(acc)) >= rule.level)
        for landmark in ("leaves_floor", "reaches_level"):
            steps = group[landmark].dropna()
            row[landmark] = float(steps.mean()) if len(steps) else math.nan
            row[f"{landmark}_n"] = f"{len(steps)}/{len(group)}"
        rows.append(row)
    table = pd.DataFrame(rows)
    order = {k: ordered(table[k]) for k in sizes}
    table["_order"] = [tuple(order[k].index(v) for k, v in zip(sizes, row))
                       for row in table[sizes].itertuples(index=False, name=None)] if sizes else [()] * len(table)
    return table.sort_values(["_order", "budget"], kind="stable").drop(columns="_order").reset_index(drop=True)


def picks(table: pd.DataFrame, sizes: list[str]) -> dict[str, Any]:
    """Per size, the smallest ``partial`` budget and the smallest ``learned`` budget; overall,
    the smallest such budget (ties: the first size in grid order). None where no grid point qualifies."""
    def first(rows: pd.DataFrame) -> dict | None:
        return None if rows.empty else rows.sort_values("budget", kind="stable").iloc[0].to_dict()

    per_size = []
    for key, group in table.groupby(sizes, sort=False) if sizes else [((), table)]:
        key = key if isinstance(key, tuple) else (key,)
        partial, learned = first(group[group["state"] == "partial"]), first(group[group["learned"]])
        per_size.append({"size": dict(zip(sizes, key)), "partial": partial and int(partial["budget"]),
                         "learned": learned and int(learned["budget"])})

    def overall(kind: str) -> dict | None:
        found = [(p[kind], i, p["size"]) for i, p in enumerate(per_size) if p[kind] is not None]
        return None if not found else {"budget": min(found)[0], "size": min(found)[2]}

    return {"per_size": per_size, "partial": overall("partial"), "learned": overall("learned")}


def _task_floor(task_cfg: dict, cache: dict) -> float:
    key = json.dumps(task_cfg, sort_keys=True, default=str)
    if key not in cache:
        cache[key] = guess.guess_accuracy(tasks.from_config(task_cfg))
    return cache[key]


def parse_baseline(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--baseline {item!r} is invalid: write key=value, e.g. pos.momentum.gamma=0")
        out[key] = value
    return out


def load(root: Path, rule: Rule, metric: str = METRIC) -> tuple[Sweep, pd.DataFrame, list[str]]:
    """The sweep's completed runs as one row each (budget, sizes, seed, final accuracy, floor, landmarks), and the
    size keys: every config key the runs vary except the budget, the seed and bookkeeping."""
    sweep = Sweep(root, Landmarks())
    done = [r for r in sweep.runs if r.status == "completed" and metric in r.final and r.full_config]
    if not done:
        raise ConfigError(f"{root}: no completed run with {metric} in its summary.json (a calibration sweep's "
                          f"records, e.g. results/calibration/mod_arith)")
    varying = pd.DataFrame([{k: value_label(v) for k, v in r.config.items()} for r in done]).fillna("∅")
    sizes = [k for k in varying.columns if varying[k].nunique() > 1 and k not in (BUDGET, *IGNORED_KEYS)
             and not k.startswith(IGNORED_PREFIXES)]
    kept: list[str] = []
    for k in sizes:  # a key that follows an earlier one (n_values: ${task.n_keys}) is not an axis of its own
        if not kept or varying.groupby(kept)[k].nunique().max() > 1:
            kept.append(k)
    sizes = kept
    cache: dict = {}
    rows = []
    for run in done:
        floor = _task_floor(run.record.saved_config["task"], cache)  # the record's own task section
        curve = metric_curve(run.metrics, metric)
        rows.append({"run": run.rel, "budget": int(run.config[BUDGET]), "seed": run.config.get("seed"),
                     **{k: value_label(run.config.get(k)) for k in sizes}, "acc": run.final[metric], "floor": floor,
                     "leaves_floor": first_step_at(curve, floor + rule.margin),
                     "reaches_level": first_step_at(curve, rule.level)})
    return sweep, pd.DataFrame(rows), sizes


def select(runs: pd.DataFrame, baseline: dict[str, str]) -> pd.DataFrame:
    for key, value in baseline.items():
        if key not in runs:
            raise ConfigError(f"--baseline {key}={value}: {key} is not an axis of this calibration "
                              f"(axes: {', '.join(c for c in runs.columns if '.' in c) or 'none'})")
        runs = runs[runs[key] == value_label(_number(value))]
    if runs.empty:
        raise ConfigError(f"--baseline {baseline}: no run matches")
    return runs


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def size_label(row: dict, sizes: list[str]) -> str:
    return " ".join(f"{k.split('.', 1)[-1]}={row[k]}" for k in sizes) or "the preset's task settings"


def plot(table: pd.DataFrame, runs: pd.DataFrame, sizes: list[str], baseline: dict, rule: Rule, task: str,
         out: Path, dpi: int = 110) -> Path:
    """Final accuracy against the budget: a line per size (mean, seeds as dots), its guess floor dashed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colors = plt.get_cmap("tab10")
    groups = list(table.groupby(sizes, sort=False)) if sizes else [((), table)]
    for i, (key, group) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        size = dict(zip(sizes, key))
        is_baseline = all(size.get(k, value_label(_number(v))) == value_label(_number(v)) for k, v in baseline.items())
        color = colors(i % 10)
        label = size_label(size, sizes) + ("" if is_baseline or not baseline else " (not baseline)")
        ax.plot(group["budget"], 100 * group["acc_mean"], marker="o", color=color, lw=1.6 if is_baseline else 1.0,
                ls="-" if is_baseline else ":", label=label)
        mine = runs
        for k, v in size.items():
            mine = mine[mine[k] == v]
        ax.scatter(mine["budget"], 100 * mine["acc"], color=color, s=12, alpha=0.6)
        ax.axhline(100 * group["floor"].iloc[0], color=color, ls="--", lw=0.8, alpha=0.7)
    ax.axhline(100 * rule.ceiling, color="0.5", lw=0.8)
    ax.set_xscale("log")
    budgets = sorted(table["budget"].unique())
    ax.set_xticks(budgets, [f"{b:,}" for b in budgets])
    ax.minorticks_off()
    ax.set_xlabel("budget (training steps, each its own run)")
    ax.set_ylabel("final validation accuracy (%)")
    ax.set_title(f"calibration: {task} (dashed: guess floor of each size)")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = out / "calibration.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _step_text(mean: float, n: str) -> str:
    return f"none ({n})" if math.isnan(mean) else f"{mean:.0f} ({n})"


def report(root: Path, out: Path, rule: Rule, baseline: dict[str, str], metric: str = METRIC) -> dict[str, Any]:
    sweep, runs, sizes = load(root, rule, metric)
    task = sweep.runs[0].config.get("task.name", "?")
    table = points(runs, sizes, rule)
    chosen = picks(points(select(runs, baseline), sizes, rule), sizes)
    out.mkdir(parents=True, exist_ok=True)
    figure = plot(table, runs, sizes, baseline, rule, task, out)
    shown = table.assign(**{
        "acc (%)": [f"{100 * m:.1f} [{100 * lo:.1f}–{100 * hi:.1f}]" for m, lo, hi in
                    zip(table["acc_mean"], table["acc_min"], table["acc_max"])],
        "floor (%)": (100 * table["floor"]).round(1),
        "leaves floor (step)": [_step_text(m, n) for m, n in zip(table["leaves_floor"], table["leaves_floor_n"])],
        f"reaches {rule.level:g} (step)": [_step_text(m, n) for m, n in
                                          zip(table["reaches_level"], table["reaches_level_n"])],
    })[[*sizes, "budget", "seeds", "acc (%)", "floor (%)", "state", "learned", "leaves floor (step)",
        f"reaches {rule.level:g} (step)"]]
    shown.columns = [c.split(".", 1)[-1] if c in sizes else c for c in shown.columns]

    def pick_text(kind: str) -> str:
        p = chosen[kind]
        return "none in this grid" if p is None else f"{p['budget']:,} steps at {size_label(p['size'], sizes)}"

    md = [f"# Calibration: {task}", "",
          f"Records: `{root}` ({len(runs)} completed runs; {metric}, final). Baseline: rope"
          + (f", {', '.join(f'{k}={v}' for k, v in baseline.items())}" if baseline else "") + ".", "",
          *[f"- {line}" for line in budget_lines(sweep)], "",
          f"Rule: {rule.describe()}. Floor = `ropelab.guess` for each point's task settings. Steps: the first "
          "validation at or above the threshold, mean over the seeds that got there (how many did).", "",
          "## Picks", "",
          f"- **partial** (clearly above the floor, below the ceiling): {pick_text('partial')}",
          f"- **learned** (the seeds' mean ≥ {rule.level:g}): {pick_text('learned')}", ""]
    if sizes:
        md += ["Per size:", ""]
        for p in chosen["per_size"]:
            md.append(f"- {size_label(p['size'], sizes)}: partial {p['partial'] or 'none'}, learned "
                      f"{p['learned'] or 'none'}")
        md.append("")
    md += ["## Grid", "", markdown_table(shown.set_index("budget"), "budget"), "",
           f"![accuracy over the grid]({figure.name})", "", *machines_section(sweep)]
    (out / "calibration.md").write_text("\n".join(md) + "\n")
    table.to_csv(out / "calibration.csv", index=False, float_format="%.6g")
    result = {"task": task, "metric": metric, "rule": rule.__dict__, "baseline": baseline, "sizes": sizes, **chosen}
    (out / "picks.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", type=Path, help="a calibration sweep's records, e.g. results/calibration/mod_arith")
    p.add_argument("--out", type=Path, help="where calibration.{md,csv,png} and picks.json go (default RECORDS/report)")
    p.add_argument("--margin", type=float, default=Rule.margin, help="accuracy clear of the floor and the ceiling")
    p.add_argument("--level", type=float, default=Rule.level, help="the accuracy that counts as learned")
    p.add_argument("--ceiling", type=float, default=Rule.ceiling, help="the best accuracy possible")
    p.add_argument("--baseline", action="append", default=[], metavar="KEY=VALUE",
                   help="pick among runs with this setting only (e.g. pos.momentum.gamma=0); repeatable")
    p.add_argument("--metric", default=METRIC, help="the final metric read from summary.json")
    args = p.parse_args(argv)
    try:
        if not args.records.is_dir():
            raise ConfigError(f"{args.records} is not a folder: give a calibration sweep's records, "
                              "e.g. results/calibration/mod_arith")
        result = report(args.records, args.out or args.records / "report",
                        Rule(args.margin, args.level, args.ceiling), parse_baseline(args.baseline), args.metric)
    except ConfigError as err:
        print(f"error: {err}")
        return 2
    for kind in ("partial", "learned"):
        p_ = result[kind]
        print(f"{kind}: " + ("none in this grid" if p_ is None else
                             f"{p_['budget']} steps at {size_label(p_['size'], result['sizes'])}"))
    print(f"report: {(args.out or args.records / 'report') / 'calibration.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
