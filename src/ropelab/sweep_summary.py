"""The end of a sweep: one summary of what this launch did, and an exit code that says whether a job failed.

``SweepSummary`` is a Hydra callback (``hydra.callbacks`` in conf/config.yaml). When a multirun starts it makes
a folder for this launch, ``<sweep>/.launches/<id>/``, and names it in ``$ROPELAB_SWEEP_LAUNCH``, which joblib
workers and SLURM jobs inherit; each job notes its outcome there (``note``, called by ``ropelab.train.main``).
When the multirun ends it prints completed / skipped / failed (each failure with its one-line error) and the
report command, removes the launch folder (and the sweep folder, if no job left anything in it), and exits 1
if a job failed. Only this launch's jobs are counted: another launch into the same folder keeps its own notes.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ropelab import runs

ENV = "ROPELAB_SWEEP_LAUNCH"
LAUNCHES = ".launches"
LISTED = 5  # skipped jobs of one reason are named up to this many, then only counted


def note(job_num: int, job: str, outcome: str, detail: str = "") -> None:
    """Record one job's outcome (completed, skipped, failed, diverged) for this launch's summary."""
    launch = os.environ.get(ENV)
    if launch:
        runs.atomic_write_text(Path(launch) / f"{job_num:06d}.json",
                               json.dumps({"job": job, "outcome": outcome, "detail": detail}))


def summary_lines(sweep_dir: Path, notes: list[dict]) -> list[str]:
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
        named = ", ".join(jobs) if len(jobs) <= LISTED else f"{', '.join(jobs[:LISTED])}, …"
        lines.append(f"  skipped {len(jobs)}, {reason}: {named}")
    for kind, found in by_outcome.items():
        if kind not in ("completed", "skipped"):
            lines += [f"  {kind} {n['job']}: {n['detail']}" for n in found]
    lines.append(f"next: {runs.report_command(sweep_dir)}")
    return lines


class SweepSummary(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        launch = Path(config.hydra.sweep.dir) / LAUNCHES / f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        launch.mkdir(parents=True)
        os.environ[ENV] = str(launch.resolve())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        launch = Path(os.environ.pop(ENV))
        notes = [json.loads(p.read_text()) for p in sorted(launch.glob("*.json"))]
        shutil.rmtree(launch, ignore_errors=True)
        sweep_dir = Path(config.hydra.sweep.dir)
        if launch.parent.is_dir() and not any(launch.parent.iterdir()):
            launch.parent.rmdir()
        if sweep_dir.is_dir() and {p.name for p in sweep_dir.iterdir()} <= {"multirun.yaml"}:
            shutil.rmtree(sweep_dir, ignore_errors=True)  # no job left anything: leave no folder
        # print, not log: with the basic launcher the root logger still writes into the last job's train.log
        print("\n".join(summary_lines(sweep_dir, notes)), flush=True)
        if any(n["outcome"] == "failed" for n in notes):
            raise SystemExit(1)  # BaseException: passes Hydra's callback and app wrappers, the process exits 1
