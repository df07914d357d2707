"""The end of a sweep: one summary of what this launch did, and an exit code that says whether a job failed.

``SweepSummary`` is a Hydra callback (``hydra.callbacks`` in conf/config.yaml). When a multirun starts it makes
a folder for this launch, ``<sweep>/.launches/<id>/``, writes the launch's job list there and names the folder in
``$ROPELAB_SWEEP_LAUNCH``, which joblib workers and SLURM jobs inherit; each job notes its outcome there (``note``,
called by ``ropelab.core.train.main``). When the multirun ends it prints completed / skipped / failed (each failure
with its one-line error), the jobs that were trials (not recorded), and the report command, removes the launch
folder (and the sweep folder, if no job left anything in it), and exits 1 if a job failed. Only this launch's
jobs are counted: another launch into the same folder keeps its own notes.

Ctrl-C ends a sweep early: ``interrupted_lines`` (printed by ``ropelab.core.train.entry``) then lists the launch's
finished, interrupted and unstarted jobs and the command that continues it.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ropelab.core import runs

ENV = "ROPELAB_SWEEP_LAUNCH"
LAUNCHES = ".launches"
JOBS = "jobs.json"  # in the launch folder: every job's folder name in launch order, and the launching process
LISTED = 5  # skipped jobs of one reason are named up to this many, then only counted
INTERRUPTED_EXIT = 130  # the shell's code for a process ended by Ctrl-C (128 + SIGINT)
DEFAULT_SUBDIR = "${hydra:job.override_dirname}"  # conf/config.yaml's hydra.sweep.subdir


def note(job_num: int, job: str, outcome: str, detail: str = "", where: Path | None = None,
         trial: str = "") -> None:
    """Record one job's outcome (completed, skipped, failed, diverged, interrupted) for this launch's summary;
    ``where`` is the folder its result lives in (its table's records, or the sweep's runs), ``trial`` why it was
    not recorded."""
    launch = os.environ.get(ENV)
    if launch:
        runs.atomic_write_text(Path(launch) / f"{job_num:06d}.json", json.dumps(
            {"job": job, "outcome": outcome, "detail": detail, "where": str(where or ""), "trial": trial}))


def _named(jobs: list[str]) -> str:
    return ", ".join(jobs) if len(jobs) <= LISTED else f"{', '.join(jobs[:LISTED])}, … ({len(jobs)} in all)"


def summary_lines(sweep_dir: Path, notes: list[dict], wandb: bool = False) -> list[str]:
    by_outcome: dict[str, list[dict]] = defaultdict(list)
    for n in notes:
        by_outcome[n["outcome"]].append(n)
    counts = " · ".join(f"{len(by_outcome[k])} {k}" for k in ("completed", "skipped", "failed"))
    extra = "".join(f" · {len(v)} {k}" for k, v in by_outcome.items() if k not in ("completed", "skipped", "failed"))
    lines = [f"sweep {sweep_dir}: {len(notes)} jobs · {counts}{extra}"]
    reasons: dict[str, list[str]] = defaultdict(list)
    for n in by_outcome["skipped"]:
        reasons[n["detail"]].append(n["job"])
    for reason, jobs in reasons.items():
        lines.append(f"  skipped {len(jobs)}, {reason}: {_named(jobs)}")
    recorded = sorted({n["where"] for n in by_outcome["skipped"] if n.get("where") and n["where"] != str(sweep_dir)})
    if wandb and recorded:  # a skipped job makes no W&B run: its record can
        lines += [f"  no W&B run for a recorded job; its record as one: {runs.python_command()} -m ropelab export "
                  f"{runs.shorter(Path(where))}" for where in recorded]
    for kind, found in by_outcome.items():
        if kind not in ("completed", "skipped"):
            lines += [f"  {kind} {n['job']}: {n['detail']}" for n in found]
    trials = sorted((n for n in notes if n.get("trial")), key=lambda n: n["trial"])
    for reason, jobs in itertools.groupby(trials, key=lambda n: n["trial"]):  # their runs stay in the sweep folder
        count = len(list(jobs))
        lines.append(f"  trial, {count} job{'s' * (count > 1)} in {sweep_dir}: {reason}")
    return lines + [f"next: {runs.report_command(target)}" for target in _report_targets(sweep_dir, notes)]


def _report_targets(sweep_dir: Path, notes: list[dict]) -> list[Path]:
    """Where this launch's results are: its table's records and/or the sweep folder, those that exist."""
    found = {Path(n["where"]) for n in notes if n.get("where")}
    targets = [p for p in sorted(found) if p.is_dir()]
    return targets or [sweep_dir]


def launched_here() -> bool:
    """True in the process that launched the sweep (the basic launcher runs its jobs in it)."""
    launch = os.environ.get(ENV)
    return bool(launch) and _jobs(Path(launch)).get("pid") == os.getpid()


def _jobs(launch: Path) -> dict:
    try:
        return json.loads((launch / JOBS).read_text())
    except (OSError, ValueError):
        return {}


def job_names(config: DictConfig) -> list[str]:
    """The folder name of every job this multirun launches, in Hydra's job order (``BasicSweeper``: the preset's
    ``hydra.sweeper.params`` then the command line, ``ropelab.core.cli.sweep_product``), named as Hydra names job
    folders. Empty if they cannot be worked out here: another sweeper, or a ``hydra.sweep.subdir`` other than the
    override dirname (a job's own config names its folder; each job notes it)."""
    from ropelab.core.cli import sweep_product

    if "basic" not in str(OmegaConf.select(config, "hydra.sweeper._target_") or "").lower():
        return []
    if OmegaConf.to_container(config.hydra.sweep).get("subdir") != DEFAULT_SUBDIR:
        return []
    params = [f"{k}={v}" for k, v in (OmegaConf.select(config, "hydra.sweeper.params") or {}).items()]
    try:
        jobs = sweep_product([*params, *config.hydra.overrides.task])
    except Exception:  # what Hydra itself refuses, it reports
        return []
    dirname = config.hydra.job.config.override_dirname
    excluded = set(dirname.exclude_keys)

    def name(job: list[str]) -> str:
        kept = sorted(line for line in job if line.split("=", 1)[0].lstrip("+~") not in excluded)
        return dirname.item_sep.join(kept).replace("=", dirname.kv_sep)

    return [name(job) for job in jobs]


def interrupted_lines(resume: str) -> list[str]:
    """After Ctrl-C ends a sweep in the launching process: its finished, interrupted and unstarted jobs and the
    command that continues it (finished jobs are skipped, interrupted ones resume from their checkpoints). Empty
    outside a sweep."""
    launch = Path(os.environ.pop(ENV, "") or ".")
    if launch == Path(".") or not launch.is_dir():
        return []
    sweep_dir = runs.shorter(launch.parent.parent)
    notes = {int(p.stem): json.loads(p.read_text()) for p in sorted(launch.glob("[0-9]*.json"))}
    names = _jobs(launch).get("names") or [notes[k]["job"] for k in sorted(notes)]
    finished, interrupted, unstarted = [], [], []
    for num, job in enumerate(names):
        job = notes.get(num, {}).get("job", job)  # the folder itself where the job noted it (hydra.sweep.subdir)
        try:
            summary = runs.read_summary(launch.parent.parent / job) or {}
        except OSError:  # a name worked out as Hydra's default subdir, too long for a folder: no summary to read
            summary = {}
        outcome = notes.get(num, {}).get("outcome")
        if outcome in ("completed", "skipped", "failed", "diverged"):
            finished.append(job)
        elif outcome == "interrupted" or summary.get("status") in ("running", "interrupted"):
            step = summary.get("checkpoint_step") if outcome == "interrupted" else None
            interrupted.append(f"{job} (checkpoint at step {step})" if step is not None else job)
        else:
            unstarted.append(job)
    _close(launch)
    return [f"sweep {sweep_dir} interrupted: {len(names)} jobs · {len(finished)} finished · {len(interrupted)} "
            f"interrupted · {len(unstarted)} not started",
            *([f"  interrupted: {_named(interrupted)}"] if interrupted else []),
            *([f"  not started: {_named(unstarted)}"] if unstarted else []),
            f"resume: {resume}   (finished jobs are skipped, interrupted ones resume from their last checkpoint)"]


def _close(launch: Path) -> None:
    shutil.rmtree(launch, ignore_errors=True)
    if launch.parent.is_dir() and not any(launch.parent.iterdir()):
        launch.parent.rmdir()


class SweepSummary(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        launch = Path(config.hydra.sweep.dir) / LAUNCHES / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        launch.mkdir(parents=True)
        runs.atomic_write_text(launch / JOBS, json.dumps({"pid": os.getpid(), "names": job_names(config)}))
        os.environ[ENV] = str(launch.resolve())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        launch = Path(os.environ.pop(ENV))
        notes = [json.loads(p.read_text()) for p in sorted(launch.glob("[0-9]*.json"))]
        _close(launch)
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir() and {p.name for p in sweep_dir.iterdir()} <= {"multirun.yaml"}:
            shutil.rmtree(sweep_dir, ignore_errors=True)  # no job left anything: leave no folder
        # print, not log: with the basic launcher the root logger still writes into the last job's train.log
        wandb = bool(OmegaConf.select(config, "logger.wandb", default=None))
        print("\n".join(summary_lines(sweep_dir, notes, wandb)), flush=True)
        if any(n["outcome"] == "failed" for n in notes):
            raise SystemExit(1)  # BaseException: passes Hydra's callback and app wrappers, the process exits 1
        if any(n["outcome"] == "interrupted" for n in notes):  # a worker's job got Ctrl-C, the launcher did not
            raise SystemExit(INTERRUPTED_EXIT)
