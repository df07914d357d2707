"""What ran: the training budget, how many runs of each cell completed (or why not), the machines, precisions
and code versions they ran on, and one row per run (``runs.csv``)."""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from ropelab.analysis.report.cells import LOCKIN, METRICS, ONSET, STATUS_ORDER, status_pivot
from ropelab.analysis.report.records import steps_trained
from ropelab.analysis.report.sweep import Sweep, value_label
from ropelab.analysis.report.tables import markdown_table
from ropelab.core import identity, machine


def landmark_text(step: float | None) -> str | int:
    return "n/a" if step is None else "none" if math.isnan(step) else int(step)


def budget_lines(sweep: Sweep) -> list[str]:
    combos = Counter()
    for run in sweep.runs:
        combos[(value_label(run.config.get("trainer.max_steps")), value_label(run.config.get("data.batch_size")))] += 1
    lines = []
    for (steps, batch), n in sorted(combos.items(), key=lambda kv: -kv[1]):
        try:
            examples = f"{int(steps) * int(batch):,}"
        except (TypeError, ValueError):
            examples = "?"
        lines.append(f"{steps} steps × batch {batch} = {examples} training examples per run "
                     f"({n} run{'s' if n != 1 else ''})")
    return lines


def runs_table(sweep: Sweep) -> pd.DataFrame:
    """One row per run: status, the sweep's factors, seed, steps, wall time, final metrics, landmarks, error."""
    table = pd.DataFrame([{"run": r.rel, "status": r.status, **{k: sweep.value(r, k) for k in sweep.factors},
                           "seed": r.config.get("seed"), "steps": steps_trained(r),
                           "wall_seconds": (r.summary or {}).get("wall_seconds"),
                           **{m: r.final.get(m) for m in METRICS},
                           **{name: landmark_text(getattr(r, attr)) for name, attr in
                              ((ONSET, "onset"), (LOCKIN, "lockin"))},
                           "error": (r.summary or {}).get("error", "")} for r in sweep.runs])
    table["steps"] = table["steps"].map(lambda v: "" if pd.isna(v) else int(v)).astype(object)
    return table


def machines_section(sweep: Sweep) -> list[str]:
    """Which machines, precisions, torch versions and code versions the runs ran on; where several, whether they
    are one computation (``ropelab.core.identity.pairable``, with what joins them or a warning), and a warning for
    runs with uncommitted edits."""
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
    md = ["### Machines and code", "", markdown_table(table.set_index("machine"), "machine"), ""]
    if len(groups) > 1:   # whether its cells compare is the one rule's (ropelab.core.identity.pairable)
        pairing = identity.pairable([run.summary for run in sweep.runs if run.summary and run.summary.get("machine")])
        md += [f"One computation: {pairing.reason}." if pairing.ok else
               f"⚠ Not one computation: {pairing.reason}: compare cells with that in mind.", ""]
    if edited := sum(n for (*_, commit), n in groups.items() if commit.endswith("+edits")):
        md += [f"⚠ {edited} runs ran with uncommitted edits: their code is not their commit's.", ""]
    return md


def status_section(sweep: Sweep, agg: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """## Budget and status: budget, axes, status counts, runs per cell, machines, runs that did not complete."""
    status = Counter(r.status for r in sweep.runs)
    md = ["## Budget and status", ""]
    md += [f"- {line}" for line in budget_lines(sweep)]
    md += [f"- rows: `{sweep.row_key}`; columns: " + ", ".join(f"`{k}`" for k in sweep.col_keys)
           + " (detected: the config keys that vary within a task × scheme pair); mean ± SD over seeds"]
    md += ["- status: " + ", ".join(f"{status[s]} {s}" for s in STATUS_ORDER if status.get(s))
           + "".join(f", {n} {s}" for s, n in status.items() if s not in STATUS_ORDER)]
    md += ["- metrics are over completed runs only; a cell with other runs says how many and why (⚠). "
           "`running` = summary.json says running: in progress, or killed without a chance to record it; "
           "`no summary` = the job never reached training.", ""]
    md += ["### Runs per cell", "", markdown_table(status_pivot(agg, sweep)), ""]
    md += machines_section(sweep)
    if sweep.never_started:
        md += ["### Folders that never started training", "",
               "Not table cells: no config.yaml was written (a rejected config, or a job killed before training).",
               "", *[f"- `{r.rel}`: {(r.summary or {}).get('error', r.status)}" for r in sweep.never_started], ""]
    bad = runs[runs["status"] != "completed"]
    if not bad.empty:
        md += ["### Runs that did not complete", "",
               markdown_table(bad.set_index("run")[["status", "steps", "error"]].fillna(""), "run"), ""]
    return md
