"""The report's result sections: one task × column table per metric (Markdown and LaTeX), scheme-against-scheme
differences paired by seed, the relative degradation of γ sweeps, and the papers the tables cite."""

from __future__ import annotations

import pandas as pd

from ropelab.analysis.report.cells import LANDMARKS, LOCKIN, METRICS, ONSET, mean_sd, metric_title, pivot
from ropelab.analysis.report.figures import file_part
from ropelab.analysis.report.records import Run
from ropelab.analysis.report.sweep import Sweep
from ropelab.analysis.report.tables import latex_table, markdown_table
from ropelab.analysis.stats import paired_difference

LATEX_METRICS = ("val/loss", "val/acc", "ood/acc", "test/acc", ONSET, LOCKIN)  # the headline tables of table.tex
PAIRED = {"val/loss": "final val/loss", ONSET: "onset step", LOCKIN: "lock-in step"}


def metric_tables(sweep: Sweep, agg: pd.DataFrame) -> tuple[list[str], list[str]]:
    """## Results: a table per metric the tasks log, and per landmark (Markdown lines; LaTeX tables)."""
    name = sweep.root.name
    md = ["## Results", "", "Accuracies in %, losses in nats per answer token. "
          "`paper` = the value in conf/paper_values.yaml for this task and column, where one exists.", ""]
    tex = []
    for metric in METRICS + [ONSET, LOCKIN]:
        if metric not in LANDMARKS and agg[f"{metric}_n"].sum() == 0 and agg["n_completed"].sum() > 0:
            continue  # the task never logs this metric
        table = pivot(agg, sweep, metric)
        md += [f"### {metric_title(metric)}", "", markdown_table(table), ""]
        notes = {row.get(f"paper_{metric}_note") for _, row in agg.iterrows()
                 if isinstance(row.get(f"paper_{metric}_note"), str) and row.get(f"paper_{metric}_note")}
        md += [f"- paper: {n}" for n in sorted(notes)] + ([""] if notes else [])
        if metric in LATEX_METRICS:
            tex.append(latex_table(table, f"{name}: {metric_title(metric)}",
                                   f"tab:{file_part(name)}-{file_part(metric)}"))
    md += ["Landmarks: " + sweep.rule.describe(), ""]
    return md, tex


def run_value(run: Run, key: str) -> float | None:
    """A final metric of a run, or one of its landmarks (the step)."""
    if key == ONSET:
        return run.onset
    if key == LOCKIN:
        return run.lockin
    return run.final.get(key)


def comparison_section(sweep: Sweep) -> list[str]:
    """Per task and pair of columns: the difference (column − reference) in final val loss and in the two
    landmarks, paired by seed, with a 95 % t interval, for the columns that differ in the scheme or its options
    alone (``Sweep.scheme_pairs``)."""
    pairs = sweep.scheme_pairs()
    rows = []
    for task in sweep.tasks():
        by_column = {c: {r.config.get("seed"): r for r in sweep.runs_in(task, c) if r.status == "completed"}
                     for c in {c for pair in pairs for c in pair}}
        for other, ref in pairs:
            row = {"task": task, "pair": f"{other} − {ref}"}
            for key, title in PAIRED.items():
                def values(c):
                    return {seed: run_value(r, key) for seed, r in by_column[c].items()}
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
            markdown_table(pd.DataFrame(rows).set_index("task"), "task"), ""]


GROUP_SPLITS = ("test", "ood")


def _group_order(label: str) -> tuple:
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def group_section(sweep: Sweep) -> list[str]:
    """Exact match per group (the task's group key: gap, depth, length bin, shift), test and OOD splits, per task
    and column: what one accuracy hides — which gaps, depths or shifts a scheme gets right."""
    md = []
    for task in sweep.tasks():
        for split in GROUP_SPLITS:
            names, cells = set(), {}
            for column in sweep.columns():
                for run in sweep.runs_in(task, column):
                    if run.status != "completed" or not run.exact_by_group.get(split):
                        continue
                    names.add(run.group_name)
                    for group, exact in run.exact_by_group[split].items():
                        cells.setdefault(group, {}).setdefault(column, []).append(exact)
            if not cells:
                continue
            table = pd.DataFrame(index=sorted(cells, key=_group_order), columns=sweep.columns(), dtype=object)
            for group, by_column in cells.items():
                for column, values in by_column.items():
                    mean, sd, n = mean_sd(values)
                    table.loc[group, column] = f"{100 * mean:.1f}" + ("" if n < 2 else f" ± {100 * sd:.1f}") + f" (n={n})"
            name = " / ".join(sorted(names))
            md += [f"### {task}: {split} exact match (%) per {name}", "",
                   markdown_table(table.fillna("—"), name), ""]
    if md:
        md = ["## Per group", "", "Mean ± SD over completed runs of each run's exact match within the group "
              "(the task's group key; `task.group_by` where the task offers one), n runs.", "", *md]
    return md


def degradation_section(deg: pd.DataFrame, name: str) -> tuple[list[str], str]:
    """The relative degradation table of a γ sweep (``cells.rel_degradation``): Markdown lines, a LaTeX table."""
    md = ["### Relative degradation vs γ = 0 (val/acc, %)", "",
          "(acc(γ=0) − acc(γ)) / acc(γ=0) × 100, from the seed means, with every other axis held fixed; "
          "positive = worse than without momentum. `paper` row: conf/paper_values.yaml "
          "(the paper does not say which tasks or metric it averages).", "",
          markdown_table(deg.map(lambda v: "–" if pd.isna(v) else f"{v:.1f}"), ""), ""]
    tex = latex_table(deg.map(lambda v: "--" if pd.isna(v) else f"{v:.1f}"),
                      f"{name}: relative degradation vs gamma=0 (val/acc, %)", f"tab:{file_part(name)}-degradation")
    return md, tex


def papers_section(agg: pd.DataFrame, deg: pd.DataFrame | None, entries: list[dict], papers: dict) -> list[str]:
    """## Papers: source, protocol and notes of each paper whose values appear in the tables."""
    used = {p for names in agg["papers"] for p in str(names).split()}
    if deg is not None and deg.loc["paper"].notna().any():
        used |= {e["paper"] for e in entries if e.get("derived") == "rel_degradation_gamma"}
    if not used:
        return []
    md = ["## Papers", ""]
    for paper in sorted(used):
        block = papers.get(paper) or {}
        md += [f"- **{paper}**: {block.get('source', '')}. Protocol: {block.get('protocol', 'n/a')}."]
        md += [f"  - {n}" for n in block.get("notes", []) or []]
    return md + [""]
