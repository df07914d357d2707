"""``python -m ropelab.reproduce TABLE [--jobs k|all]`` (``make reproduce TABLE=… JOBS=…``): retrain committed
records from their own config.yaml into a scratch folder and compare.

Each chosen record (the ``k`` that trained fastest, or ``--job NAME``) is trained again from its config.yaml (over
today's defaults for keys added since, ``ropelab.core.config.record_config``) with the settings it computed with
pinned to its identity (``ropelab.core.identity``: the AdamW kernel, compile, precision, threads, device), into
``<out>/<table>/<job>`` (default runs/reproduce/: nothing under results/ is written). Then:

- on the CPU kind that made it (the model and speed flags its summary.json records, torch's version and the
  threads alike): its metrics.csv must be bit-identical (wall-time columns aside) — README's rule;
- on another kind: the final metrics a verdict reads (``VERDICT_METRICS``: accuracy and loss, in distribution and
  OOD) must lie within the table's spread over the seeds of the same cell (the records that differ from it in the
  seed only): their range widened by their standard deviation on each side. A metric stuck at one value over every
  seed (an exact match at 0) tells nothing and is not compared; the line names what was. A cell of one seed has no
  spread to compare against, which is said.

``--kind-check`` instead measures what the machine kind does (``ropelab.core.identity.pairable`` reads it): the
chosen records retrained here, the paired differences (here − record) of the verdict metrics, their mean with a
95 % interval, against the seed SD of the table's cells; written to results/kind_check/<kind>__<kind>/ (commit it).
The kind is bounded when the interval's far end is within one seed SD for every metric. The retraining code must
be the records' computation: the same commit, or one an equivalence record joins to it.

One line per job, the table's identity (one, or mixed), and a verdict line; exit 0 when every job reproduced.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, open_dict

from ropelab.core import identity, machine, runs
from ropelab.core.cli import REPO
from ropelab.core.config import flatten, record_config
from ropelab.core.errors import ConfigError
from ropelab.core.record import read as read_record

log = logging.getLogger("ropelab")

RESULTS = REPO / "results"
DEFAULT_JOBS = 3
SCRATCH = runs.RUNS_ROOT / "reproduce"
WALL_TIME = re.compile(r"(time|seconds|per_s(ec)?)\b")  # metrics.csv columns that measure the clock, not the run
VERDICT_METRICS = ("val/acc", "val/loss", "ood/acc", "ood/loss", "test/acc", "test/loss")   # what verdicts read


def tables_with_records() -> list[str]:
    """The tables under results/ that hold a completed record (a job folder, or one folder deeper: card/<task>/)."""
    return sorted(p.name for p in RESULTS.iterdir() if p.is_dir() and records_of(p)) if RESULTS.is_dir() else []


def table_dir(table: str | Path) -> Path:
    """``bifocal_table1`` → results/bifocal_table1; a folder given as a path stays one."""
    path = Path(table)
    if not path.is_dir() and (RESULTS / table).is_dir():
        path = RESULTS / table
    if not path.is_dir():
        raise ConfigError(f"TABLE={table} is no table: choose one of {', '.join(tables_with_records())} (or a "
                          "folder of records)")
    return path


def _load(folder: Path) -> tuple[dict, dict]:
    rec = read_record(folder)
    return rec.summary, rec.saved_config


def _record(job: Path) -> bool:
    if not job.is_dir() or job.name.startswith("."):
        return False
    rec = read_record(job)
    return rec.completed and rec.saved_config is not None


def records_of(table: Path) -> list[Path]:
    """The table's completed records (job folders with a completed summary.json and a config.yaml, or one folder
    deeper: the card's results/card/<task>/<job>), by name."""
    found = []
    for job in sorted(table.iterdir()) if table.is_dir() else ():
        if _record(job):
            found.append(job)
        elif job.is_dir() and not job.name.startswith("."):
            found += [sub for sub in sorted(job.iterdir()) if _record(sub)]
    return found


def choose(records: list[Path], jobs: str | int, names: list[str]) -> list[Path]:
    """``names`` if given, else ``jobs`` of them (all, or the k that trained fastest: the cheapest check)."""
    if names:
        by_name = {r.name: r for r in records}
        for name in names:
            if name not in by_name:
                raise ConfigError(f"--job {name} is no completed record of the table: choose one of "
                                  f"{', '.join(by_name)}")
        return [by_name[n] for n in names]
    if jobs == "all":
        return records
    return sorted(records, key=lambda r: (_load(r)[0].get("wall_seconds") or float("inf"), r.name))[:int(jobs)]


def pinned_config(summary: dict, saved: dict) -> DictConfig:
    """The record's config ready to train again: its own settings, the ones that change what it computes pinned to
    what it resolved to, its bookkeeping neutral (no record, no resume, no rerun, no progress, the CSV logger)."""
    cfg = record_config(saved)
    ran = identity.of_record(summary, saved)
    with open_dict(cfg):
        cfg.record, cfg.resume, cfg.rerun, cfg.retry_failed, cfg.needs_checkpoint = None, None, False, False, False
        cfg.trainer.progress = "off"
        cfg.logger = {"csv": {"_target_": "ropelab.loggers.RunCSVLogger"}}
        cfg.optim.fused = bool(ran["optim.fused"])
        cfg.trainer.compile = bool(ran["trainer.compile"])
        if ran.get("trainer.precision"):
            cfg.trainer.precision = ran["trainer.precision"]
        if ran.get("trainer.threads"):
            cfg.trainer.threads = int(ran["trainer.threads"])
        if ran.get("trainer.accelerator"):
            cfg.trainer.accelerator = "gpu" if ran["trainer.accelerator"] == "cuda" else ran["trainer.accelerator"]
        if ran.get("trainer.devices"):
            cfg.trainer.devices = int(ran["trainer.devices"])
    return cfg


def same_kind(summary: dict) -> tuple[bool, str]:
    """(this machine is the kind that made the record, what differs): CPU model and flags (or GPU), torch."""
    made, here = summary.get("machine") or {}, machine.describe(summary.get("accelerator") or "cpu")
    differs = [f"{what} {made.get(key) if key != 'cpu' else machine.label(made)} here "
               f"{here.get(key) if key != 'cpu' else machine.label(here)}"
               for what, key in (("CPU", "cpu"), ("GPU", "gpu"), ("torch", "torch")) if made.get(key) != here.get(key)]
    return not differs, "; ".join(differs)


def metrics_rows(folder: Path) -> list[list[str]]:
    """A run's metrics.csv as its strings (the digits as written), wall-time columns left out."""
    rows = read_record(folder).metrics_rows()
    keep = [i for i, name in enumerate(rows[0]) if not WALL_TIME.search(name)] if rows else []
    return [[row[i] if i < len(row) else "" for i in keep] for row in rows]


# Until this commit the logged train/grad_norm was a norm of the per-tensor norms, another rounding of the norm the
# clipping used (clip_grad_norm_'s, then and now: the weights are the same); since, the clipping's own norm is logged
GRAD_NORM_LOGGED_AS_CLIPPED = "c6b9119"
RELOGGED = "train/grad_norm"


def _predates(commit: str | None, change: str) -> bool:
    """The record's ``commit`` is from before ``change`` (git knows both and ``change`` is no ancestor of it)."""
    import subprocess

    if not commit:
        return False
    try:
        known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO, capture_output=True)
        after = subprocess.run(["git", "merge-base", "--is-ancestor", change, commit], cwd=REPO, capture_output=True)
    except OSError:
        return False
    return known.returncode == 0 and after.returncode == 1


def first_difference(recorded: Path, retrained: Path, commit: str | None = None) -> tuple[str, str]:
    """("", note) if the two run folders' metrics.csv are bit-identical (wall time aside; for a record from before
    ``GRAD_NORM_LOGGED_AS_CLIPPED``, train/grad_norm aside within float rounding, said in ``note``), else
    (where they first differ, "")."""
    a, b = metrics_rows(recorded), metrics_rows(retrained)
    if a == b:
        return "", ""
    if not a or not b or a[0] != b[0] or len(a) != len(b):
        return (f"columns or rows differ ({len(a[0]) if a else 0} × {len(a)} recorded, "
                f"{len(b[0]) if b else 0} × {len(b)} retrained)"), ""
    header, step = a[0], a[0].index("step") if "step" in a[0] else None
    differing = [(n, i) for n, (ra, rb) in enumerate(zip(a[1:], b[1:])) for i, (x, y) in enumerate(zip(ra, rb)) if x != y]
    relogged = header.index(RELOGGED) if RELOGGED in header else None
    if relogged is not None and all(i == relogged for _, i in differing) and _predates(commit, GRAD_NORM_LOGGED_AS_CLIPPED):
        rel = max(abs(float(a[n + 1][i]) - float(b[n + 1][i])) / max(abs(float(a[n + 1][i])), 1e-30) for n, i in differing)
        if rel <= 1e-6:
            return "", (f"{RELOGGED} aside: {len({n for n, _ in differing})} rows differ by ≤ {rel:.1e} relative, "
                        f"logged before {GRAD_NORM_LOGGED_AS_CLIPPED} from another reduction of the norm the clipping used")
    n, col = differing[0]
    at = f"step {a[n + 1][step]}" if step is not None else "a row"
    return f"first differs at {at}, {header[col]}: recorded {a[n + 1][col]}, retrained {b[n + 1][col]}", ""


def cell_key(saved: dict) -> tuple:
    """What a record's table cell is: its flattened config but the seed, the bookkeeping and the compute settings."""
    flat = flatten(saved)
    return tuple(sorted((k, str(v)) for k, v in flat.items()
                        if k != "seed" and not identity.bookkeeping(k) and k not in identity.COMPUTE))


def cell_values(record: Path, table: Path) -> dict[str, list[float]]:
    """{metric: the final values of the table's records of ``record``'s cell (its seeds)}."""
    key = cell_key(_load(record)[1])
    values: dict[str, list[float]] = {}
    for other in records_of(table):
        summary, saved = _load(other)
        if cell_key(saved) != key:
            continue
        for metric in VERDICT_METRICS:
            value = (summary.get("final") or {}).get(metric)
            if isinstance(value, (int, float)) and np.isfinite(value):
                values.setdefault(metric, []).append(float(value))
    return values


def seed_spread(record: Path, table: Path) -> dict[str, tuple[float, float, int]]:
    """{metric: (low, high, n)} over the table's records of ``record``'s cell: the range widened by one standard
    deviation each side; n the number of seeds. A metric stuck at one value over the seeds is left out: it would
    pass whatever was trained."""
    spread = {}
    for metric, xs in cell_values(record, table).items():
        if len(set(xs)) < 2:
            continue
        sd = float(np.std(xs, ddof=1))
        spread[metric] = (min(xs) - sd, max(xs) + sd, len(xs))
    return spread


def reproduce_one(record: Path, table: Path, out: Path) -> tuple[str, str]:
    """(outcome, line) for one record: outcome bit-identical | differs | within-spread | outside-spread |
    no-spread | not-reproducible | failed."""
    from ropelab.core.train import run

    summary, saved = _load(record)
    if saved.get("init_from") and not _exists(saved["init_from"]):
        return "not-reproducible", (f"{record.name}: starts from init_from={saved['init_from']}, a checkpoint this "
                                    f"clone lacks: train that run first")
    kind_matches, kind_differs = same_kind(summary)
    if summary.get("accelerator") == "cuda" and not torch.cuda.is_available():
        return "not-reproducible", f"{record.name}: made on CUDA ({kind_differs}), and torch sees no CUDA device here"
    scratch = out / table.name / record.name
    if scratch.exists():
        shutil.rmtree(scratch)  # a fresh run every time: a leftover would be skipped or resumed
    retrained = run(pinned_config(summary, saved), scratch, record_dir=None)
    where = runs.shorter(scratch)
    if retrained.get("status") != "completed":
        return "failed", f"{record.name}: retrained run {retrained.get('status')} ({retrained.get('error', '')}) in {where}"
    if kind_matches:
        diff, note = first_difference(record, scratch,
                                      (summary.get("machine") or {}).get("commit"))
        if not diff:
            return "bit-identical", (f"{record.name}: bit-identical (metrics.csv, {retrained.get('steps')} steps"
                                     f"{'; ' + note if note else ''}; {where})")
        return "differs", f"{record.name}: NOT bit-identical on the CPU kind that made it: {diff} ({where})"
    key = cell_key(saved)
    pairing = identity.pairable([s for s, c in map(_load, records_of(table)) if cell_key(c) == key])
    if not pairing.ok:   # the one rule: a spread over seeds of several computations is no spread of one
        return "no-spread", (f"{record.name}: other CPU kind ({kind_differs}): the cell's seeds are not one "
                             f"computation ({pairing.reason})")
    spread = seed_spread(record, table)
    final = retrained.get("final") or {}
    compared = [(m, final[m], *spread[m]) for m in VERDICT_METRICS if m in spread and m in final]
    stuck = [m for m, xs in cell_values(record, table).items() if m not in spread and len(xs) > 1]
    shown = ", ".join(f"{m} {x:.4f} in [{lo:.4f}, {hi:.4f}]" if lo <= x <= hi else f"{m} {x:.4f} outside [{lo:.4f}, {hi:.4f}]"
                      for m, x, lo, hi, _ in compared)
    seeds = max((n for *_, n in compared), default=0)
    aside = f"; not compared, the same over every seed: {', '.join(stuck)}" if stuck else ""
    if seeds < 2:
        return "no-spread", (f"{record.name}: other CPU kind ({kind_differs}): no seed spread of a verdict metric "
                             f"({', '.join(VERDICT_METRICS)}) to compare ({seeds} seeds{aside})")
    inside = all(lo <= x <= hi for _, x, lo, hi, _ in compared)
    return ("within-spread" if inside else "outside-spread"), (
        f"{record.name}: other CPU kind ({kind_differs}): compared {', '.join(m for m, *_ in compared)}: "
        f"{'within' if inside else 'NOT within'} seed spread ({shown}; {seeds} seeds, range ± sd{aside}; {where})")


REPRODUCED = ("bit-identical", "within-spread")


# ----------------------------------------------------------------------------------------------- the kind check

def _scaled(metric: str) -> float:
    return 100.0 if metric.endswith("/acc") else 1.0


def seed_sd(table: Path, metric: str) -> float:
    """The table's seed SD of ``metric``: pooled over its cells of two or more seeds (√ of the mean variance)."""
    cells: dict[tuple, list[float]] = {}
    for record in records_of(table):
        summary, saved = _load(record)
        value = (summary.get("final") or {}).get(metric)
        if isinstance(value, (int, float)) and np.isfinite(value):
            cells.setdefault(cell_key(saved), []).append(float(value) * _scaled(metric))
    variances = [np.var(xs, ddof=1) for xs in cells.values() if len(xs) > 1]
    return float(np.sqrt(np.mean(variances))) if variances else float("nan")


def bound(diffs: list[float], metric: str) -> tuple[float, float, float]:
    """(mean, low, high): the paired differences' mean and 95 % t interval; an accuracy's stays in ±100 pts (the
    difference of two proportions)."""
    from scipy.stats import t as student

    mean = float(np.mean(diffs))
    half = float(student.ppf(0.975, len(diffs) - 1) * np.std(diffs, ddof=1) / np.sqrt(len(diffs))) \
        if len(diffs) > 1 else float("inf")
    low, high = mean - half, mean + half
    if metric.endswith("/acc"):
        low, high = max(low, -100.0), min(high, 100.0)
    return mean, low, high


def kind_check(table: Path, chosen: list[Path], out: Path, results: Path = RESULTS) -> tuple[int, Path | None]:
    """Retrain ``chosen`` here and measure what the kind moves; writes results/kind_check/<kind>__<kind>/."""
    from ropelab.core.train import run

    here = machine.describe()
    here_kind, here_commit = identity.kind_of({"machine": here}), str(here.get("commit") or "unknown")[:7]
    loaded = [(r, *_load(r)) for r in chosen]
    kinds = sorted({identity.kind_of(s) for _, s, _ in loaded})
    commits = sorted({identity.commit_of(s) for _, s, _ in loaded})
    if len(kinds) != 1 or kinds[0] == here_kind:
        raise ConfigError(f"--kind-check needs records of one other kind: these ran on {', '.join(kinds)}, this "
                          f"machine is {here_kind}")
    devices = sorted({identity.of_record(s).get("trainer.accelerator") or "cpu" for _, s, _ in loaded})
    if devices != ["cpu"] and not torch.cuda.is_available():
        raise ConfigError(f"--kind-check: the records ran on {', '.join(kinds)} (trainer.accelerator="
                          f"{', '.join(devices)}) and retrain on their own device: run it on a machine with one")
    links = identity.commit_links([here_commit, *commits], results)
    if not identity.joined([here_commit, *commits], links):
        raise ConfigError(f"--kind-check: the records ran at {', '.join(commits)}, this code is {here_commit}, and "
                          f"no equivalence record joins them: run it from a worktree at {commits[0]}, or first "
                          f"{identity.equivalence_command(commits[0], here_commit, table)}")
    jobs, diffs = [], {}
    for record, summary, saved in loaded:
        scratch = out / table.name / record.name
        if scratch.exists():
            shutil.rmtree(scratch)
        retrained = run(pinned_config(summary, saved), scratch, record_dir=None)
        if retrained.get("status") != "completed":
            print(f"{record.name}: retrained run {retrained.get('status')}: left out", flush=True)
            continue
        pair = {}
        for metric in VERDICT_METRICS:
            a, b = (summary.get("final") or {}).get(metric), (retrained.get("final") or {}).get(metric)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and np.isfinite(a) and np.isfinite(b):
                pair[metric] = {"record": a, "here": b}
                diffs.setdefault(metric, []).append((b - a) * _scaled(metric))
        jobs.append({"job": str(record.relative_to(table)), **pair})
        print(f"{record.name}: " + ", ".join(f"{m} {v['record']:.4f} → {v['here']:.4f}" for m, v in pair.items()),
              flush=True)
    metrics, says = {}, []
    for metric, ds in diffs.items():
        sd = seed_sd(table, metric)
        if len(ds) < 2 or not np.isfinite(sd) or sd == 0:
            continue   # a metric stuck at one value over the seeds bounds nothing
        mean, low, high = bound(ds, metric)
        moves = max(abs(low), abs(high))
        unit = " pts" if metric.endswith("/acc") else ""
        metrics[metric] = {"mean_diff": round(mean, 4), "low": round(low, 4), "high": round(high, 4), "n": len(ds),
                           "seed_sd": round(sd, 4), "moves_at_most": round(moves, 4), "bounded": bool(moves <= sd)}
        says.append(f"{metric} moves by at most {moves:.3g}{unit} (here − record {mean:+.3g} [{low:+.3g}, "
                    f"{high:+.3g}], n={len(ds)}; seed SD {sd:.3g}{unit})")
    if not metrics:
        print("kind check: no verdict metric varies over the seeds (or fewer than 2 jobs): nothing bounded")
        return 1, None
    bounded = all(m["bounded"] for m in metrics.values())
    folder = results / identity.KIND_CHECK / f"{identity.slug(kinds[0])}__{identity.slug(here_kind)}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps({
        "status": "completed", "kinds": [kinds[0], here_kind], "commits": [*commits, here_commit],
        "table": table.name, "bounded": bounded, "says": "; ".join(says), "metrics": metrics, "jobs": jobs},
        indent=1) + "\n")
    print(f"kind check: {kinds[0]} vs {here_kind}: {'bounded' if bounded else 'NOT bounded'} — {'; '.join(says)}")
    print(f"written: {runs.shorter(folder)} (commit it)")
    return (0 if bounded else 1), folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ropelab.reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("table", help="a table under results/ (bifocal_table1) or a folder of records")
    parser.add_argument("--jobs", default=str(DEFAULT_JOBS), help=f"how many records (default {DEFAULT_JOBS}, the "
                        "fastest-trained) or all")
    parser.add_argument("--job", action="append", default=[], help="a record's folder name (repeatable)")
    parser.add_argument("--out", type=Path, default=SCRATCH, help="the scratch folder (default runs/reproduce)")
    parser.add_argument("--kind-check", action="store_true", help="measure what this machine kind moves against "
                        "the records' kind; writes results/kind_check/ (see above)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        if args.jobs != "all" and not (args.jobs.isdigit() and int(args.jobs) >= 1):
            raise ConfigError(f"JOBS={args.jobs} is invalid: an integer >= 1 or all")
        if runs.inside_results(args.out) or args.out.absolute() == RESULTS.absolute():
            raise ConfigError(f"--out {args.out} is under results/: a reproduction goes to a scratch folder")
        table = table_dir(args.table)
        records = records_of(table)
        if not records:
            raise ConfigError(f"{runs.shorter(table)} holds no completed record to reproduce: choose one of "
                              f"{', '.join(tables_with_records())}")
        chosen = choose(records, args.jobs, args.job)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.kind_check:
        try:
            return kind_check(table, chosen, args.out)[0]
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    print(f"{runs.shorter(table)}: {len(records)} records, {identity.describe(identity.table(table))}; "
          f"retraining {len(chosen)} into {runs.shorter(args.out / table.name)}", flush=True)
    outcomes = []
    for record in chosen:
        outcome, line = reproduce_one(record, table, args.out)
        outcomes.append(outcome)
        print(line, flush=True)
    ok = sum(o in REPRODUCED for o in outcomes)
    counts = ", ".join(f"{outcomes.count(o)} {o}" for o in dict.fromkeys(outcomes))
    print(f"verdict: {'reproduced' if ok == len(outcomes) else 'NOT reproduced'} — {ok}/{len(outcomes)} jobs ({counts})")
    return 0 if ok == len(outcomes) else 1


def _exists(path: Any) -> bool:
    try:
        runs.checkpoint_path(path)
        return True
    except FileNotFoundError:
        return False
