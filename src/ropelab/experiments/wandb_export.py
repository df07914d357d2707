"""Committed records as W&B runs: ``ropelab export results/<table> [--out DIR]``.

A table's records (``results/<table>/<job>/``) are what lasts; a sweep run again in a fresh clone skips every
recorded job, so ``logger=wandb`` alone never puts them on a dashboard. This writes, offline, one W&B run per
record — grouped by the table, tagged as a live run is (task, pos, seed, γ, base, freqs; ``ropelab.core.loggers``), its
config, its curves from ``metrics.csv`` at their own steps, its learned positional parameters from
``positional_trace.npz`` as histograms, its final metrics and machine as the summary — and one ``report`` run
with the table's summary (``report/table.csv``) and figures (``report/*.png``). Nothing needs a key or network
here: ``make sync SWEEP=<out>`` uploads them where there is one. The output goes under ``runs/`` (scratch,
ignored by git), never into the records.
"""

from __future__ import annotations

import argparse
import math
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from ropelab.core import record
from ropelab.core.loggers import _wandb_tags
from ropelab.core.record import Record
from ropelab.core.runs import RUNS_ROOT, SUMMARY, TRACE, shorter

DEFAULT_OUT = RUNS_ROOT / "wandb_export"


def records(table: Path) -> list[Record]:
    """The records of a table (nested tables' too): every run folder holding a summary.json, in path order."""
    return [r for r in record.under(table) if r.summary is not None]


def history(rec: Record) -> dict[int, dict[str, float]]:
    """A record's logged values by step: ``metrics.csv``'s rows (a blank is no value) merged per step."""
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    if rec.metrics is not None:
        for row in rec.metrics.drop(columns=["epoch"], errors="ignore").to_dict("records"):
            step = int(row.pop("step"))
            by_step[step].update({k: float(v) for k, v in row.items() if not math.isnan(v)})
    return by_step


def _flat(prefix: str, value, out: dict) -> dict:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(value, (int, float, str, bool)) and not (isinstance(value, float) and math.isnan(value)):
        out[prefix] = value
    return out


def export_record(wandb, rec: Record, out: Path, group: str, project: str, entity: str | None) -> None:
    """One record as one offline W&B run."""
    config, summary = rec.saved_config or {}, rec.summary or {}
    steps = history(rec)
    trace = np.load(rec.path / TRACE) if (rec.path / TRACE).is_file() else None
    if trace is not None:
        for i, step in enumerate(trace["steps"].tolist()):
            steps[int(step)].update({f"pos/{name}": wandb.Histogram(trace[name][i].ravel())
                                     for name in trace.files if name != "steps"})
    run = wandb.init(mode="offline", dir=str(out), project=project, entity=entity, group=group, name=rec.path.name,
                     job_type="record", tags=["record", *_wandb_tags(config)], config=config,
                     settings=wandb.Settings(quiet=True, silent=True))
    for step in sorted(steps):
        run.log(steps[step], step=step)
    run.summary.update(_flat("", {k: summary.get(k) for k in ("status", "final", "steps", "wall_seconds", "precision",
                                                                "accelerator", "threads", "machine")}, {}))
    run.summary["record"] = str(shorter(rec.path))
    run.finish(exit_code=0 if summary.get("status") == "completed" else 1)


def export_report(wandb, table: Path, out: Path, group: str, project: str, entity: str | None) -> bool:
    """The table's report (``report/table.csv`` and figures) as one W&B run; False when there is no report."""
    report = table / "report"
    if not (report / "table.csv").is_file():
        return False
    import pandas as pd

    run = wandb.init(mode="offline", dir=str(out), project=project, entity=entity, group=group,
                     name=f"{group} report", job_type="report", tags=["report"],
                     settings=wandb.Settings(quiet=True, silent=True))
    run.log({"table": wandb.Table(dataframe=pd.read_csv(report / "table.csv")),
             **{f"figures/{png.stem}": wandb.Image(str(png)) for png in sorted(report.glob("*.png"))}})
    run.finish()
    return True


def export(table: Path, out: Path = DEFAULT_OUT, project: str = "ropelab", entity: str | None = None) -> Path:
    """Every record of ``table`` and its report as offline W&B runs under ``out/<table>/wandb/``; returns that
    folder."""
    import wandb

    table = Path(table)
    found = records(table)
    if not table.is_dir() or not found:
        raise SystemExit(f"error: {table} holds no records (folders with {SUMMARY}): name a results/<table> folder")
    out = Path(out) / table.name
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_SILENT", "true")
    for rec in found:
        export_record(wandb, rec, out, table.name, project, entity)
    export_report(wandb, table, out, table.name, project, entity)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ropelab export", description=__doc__.split("\n\n")[0])
    p.add_argument("table", type=Path, help="a folder of records, e.g. results/bifocal_table1")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where the offline runs go (default {DEFAULT_OUT})")
    p.add_argument("--project", default="ropelab")
    p.add_argument("--entity", default=None)
    args = p.parse_args(argv)
    out = export(args.table, args.out, args.project, args.entity)
    offline = sorted((out / "wandb").glob("offline-run-*"))
    print(f"wandb: {len(offline)} offline runs of {args.table} in {shorter(out)}/wandb "
          f"({len(records(args.table))} records + the report)")
    print(f"next: make sync SWEEP={shorter(out)}   # uploads them, on a machine with network and `wandb login`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
