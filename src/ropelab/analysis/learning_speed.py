"""Learning speed and extrapolation, scheme against scheme: what separates schemes once a task is learned.

At a calibrated budget (``ropelab.experiments.calibrate``'s "learned" pick) every scheme may end near the same in-distribution
accuracy; what can still differ is how fast it got there and how it does beyond the training distribution. Per
task and scheme, over seeds: the onset (the step the train loss leaves its plateau, ``ropelab.analysis.stats``), the first
validation step at or above ``level`` accuracy, the final validation accuracy, and the OOD accuracy per answer
token and per whole answer (``ood/exact``); then each scheme minus the reference scheme, paired by seed, with a
95 % t interval ("no difference detected" when it includes 0).

    ropelab learning-speed results/bifocal_calibrated            # → results/bifocal_calibrated/report/
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from ropelab.analysis.report.sweep import TASK_ORDER, Sweep, ordered
from ropelab.analysis.report.tables import markdown_table
from ropelab.core.errors import ConfigError
from ropelab.analysis.stats import (Landmarks, estimate, first_step_at, metric_curve, onset_step, paired_difference,
                                    train_loss)

FINAL = ("val/acc", "ood/acc", "ood/exact")


def measures(sweep: Sweep, level: float) -> pd.DataFrame:
    """One row per completed run: task, scheme, its column in the sweep's report (the scheme, with the settings the
    sweep varies besides: ``rope rung=2``), seed, onset, steps to ``level``, the final metrics."""
    column_of = dict(zip(sweep.cells["run"], sweep.cells["column"])) if not sweep.cells.empty else {}
    rows = []
    for run in sweep.runs:
        if run.status != "completed":
            continue
        reached = first_step_at(metric_curve(run.metrics), level)
        onset = onset_step(train_loss(run.metrics), sweep.rule)
        rows.append({"task": run.config.get("task.name"), "scheme": run.config.get("pos.name"),
                     "column": column_of.get(run.rel, run.config.get("pos.name")), "seed": run.config.get("seed"), "steps": run.config.get("trainer.max_steps"),
                     "onset": math.nan if onset is None else onset, "to_level": reached,
                     **{m: run.final.get(m, math.nan) for m in FINAL}})
    return pd.DataFrame(rows)


MEASURES = {"onset": ("onset (step)", "{:.0f}"), "to_level": ("steps to {level:g}", "{:.0f}"),
            "val/acc": ("val acc (%)", "{:.1f}"), "ood/acc": ("OOD acc (%)", "{:.1f}"),
            "ood/exact": ("OOD whole answer (%)", "{:.1f}")}


def _scaled(key: str, value: float) -> float:
    return 100 * value if key in FINAL else value


def tables(data: pd.DataFrame, columns: list[str], pairs: list[tuple[str, str]], level: float
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per task × column: mean ± SD (n) of each measure; per task and (column, reference column) pair of
    ``pairs``: the paired difference)."""
    cells, diffs = [], []
    for task in ordered(data["task"], TASK_ORDER):
        here = data[data["task"] == task]
        by_column = {c: here[here["column"] == c].set_index("seed") for c in columns if (here["column"] == c).any()}
        for column, runs in by_column.items():
            row = {"task": task, "scheme": column, "steps": int(runs["steps"].iloc[0])}
            for key, (title, fmt) in MEASURES.items():
                values = [_scaled(key, v) for v in runs[key]]
                est = estimate(values)
                missing = sum(math.isnan(v) for v in values)
                text = "–" if est.n == 0 else fmt.format(est.mean) + ("" if est.n < 2 else f" ± {fmt.format(est.sd)}")
                row[title.format(level=level)] = f"{text} (n={est.n}" + (f", {missing} never" if missing else "") + ")"
            cells.append(row)
        for column, reference in pairs:
            if column not in by_column or reference not in by_column:
                continue
            drow = {"task": task, "pair": f"{column} − {reference}"}
            for key, (title, fmt) in MEASURES.items():
                def per_seed(c):
                    return {seed: _scaled(key, v) for seed, v in by_column[c][key].items()}
                d = paired_difference(per_seed(column), per_seed(reference))
                drow[title.format(level=level)] = ("–" if d.n == 0 else d.text(fmt.replace(":", ":+"))) + (
                    " *" if d.excludes_zero() else "")
            diffs.append(drow)
    return pd.DataFrame(cells), pd.DataFrame(diffs)


def report(root: Path, out: Path, reference: str, level: float) -> Path:
    sweep = Sweep(root, Landmarks())
    data = measures(sweep, level)
    if data.empty:
        raise ConfigError(f"{root}: no completed run to compare (a sweep's records, e.g. results/bifocal_calibrated)")
    cells, diffs = tables(data, sweep.columns(), sweep.scheme_pairs(reference), level)
    md = [f"# Learning speed and extrapolation: {root.name}", "",
          f"Records: `{root}` ({len(data)} completed runs). Onset: {sweep.rule.describe().split(';')[1].strip()}. "
          f"Steps to {level:g}: the first validation at or above {level:g} accuracy (\"never\": not within the "
          "budget; such a run leaves its pair out). OOD: the task's ood split (mod_arith: 4–6 terms; dyck3: 9–16 "
          "open brackets); whole answer = every answer token right.", "",
          "## Per scheme (mean ± SD over seeds)", "", markdown_table(cells.set_index("task"), "task"), "",
          f"## Against {reference}, paired by seed", "",
          "Mean difference [95 % t interval] (n pairs); `*` = the interval excludes 0; otherwise no difference "
          "detected, whatever the point estimate. Accuracies in points.", "",
          markdown_table(diffs.set_index("task"), "task") if not diffs.empty else "(no pairs)", ""]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "learning_speed.md"
    path.write_text("\n".join(md) + "\n")
    data.sort_values(["task", "scheme", "seed"]).to_csv(out / "learning_speed.csv", index=False, float_format="%.6g")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", type=Path, help="a sweep's records or runs, e.g. results/bifocal_calibrated")
    p.add_argument("--out", type=Path, help="where learning_speed.{md,csv} go (default RECORDS/report)")
    p.add_argument("--reference", default="rope", help="the scheme every other is paired against")
    p.add_argument("--level", type=float, default=0.9, help="the validation accuracy whose first step is read")
    args = p.parse_args(argv)
    try:
        if not args.records.is_dir():
            raise ConfigError(f"{args.records} is not a folder: give a sweep's records, e.g. results/bifocal_calibrated")
        path = report(args.records, args.out or args.records / "report", args.reference, args.level)
    except ConfigError as err:
        print(f"error: {err}")
        return 2
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
