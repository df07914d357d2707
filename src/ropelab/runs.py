"""Run folders: where a run lives, its summary.json, and atomic writes.

A run folder holds ``config.yaml`` (resolved), ``metrics.csv``, ``summary.json``, ``checkpoints/`` and, for
schemes with learnable parameters, ``positional_trace.npz``. ``summary.json`` carries ``status``: running,
completed, failed, diverged or interrupted; sweeps skip completed runs and resume the others from
``checkpoints/last.ckpt``.

A *record* is the part of a finished run folder that lasts (everything but checkpoints), copied to
``results/<table>/<job>/`` when the config sets ``record``; a sweep skips every job whose record is complete,
so the same command in a fresh clone runs only what is missing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

RUNS_ROOT = Path(os.environ.get("ROPELAB_RUNS", "runs"))
SUMMARY = "summary.json"
RECORD_FILES = ("config.yaml", SUMMARY, "metrics.csv", "positional_trace.npz")
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def single_run_dir(task: str, pos: str, seed: Any, resume: Any = None) -> str:
    """Folder of a single (non-sweep) run: the resume folder if given, else a fresh, never-colliding one."""
    if resume not in (None, "", "null"):
        return str(resume)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    return str(RUNS_ROOT / "single" / f"{stamp}_{task}_{pos}_s{seed}_{secrets.token_hex(3)}")


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write then rename, so a kill never leaves a half-written file that looks complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; the file should read like any other the user writes
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_summary(run_dir: Path, summary: dict) -> None:
    atomic_write_text(Path(run_dir) / SUMMARY, json.dumps(summary, indent=2, sort_keys=True, default=float) + "\n")


def read_summary(run_dir: Path) -> dict | None:
    path = Path(run_dir) / SUMMARY
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def recorded(record_dir: Path | None) -> dict | None:
    """The summary of a completed record in ``record_dir``, else None."""
    if record_dir is None:
        return None
    summary = read_summary(record_dir)
    return summary if summary and summary.get("status") == "completed" else None


def keep_record(run_dir: Path, record_dir: Path) -> None:
    """Copy the lasting files of ``run_dir`` to ``record_dir`` in one rename: a kill leaves the old record
    or the new one, never half of one."""
    record_dir = Path(record_dir)
    record_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=record_dir.parent, prefix=f".{record_dir.name}."))
    try:
        for name in RECORD_FILES:
            if (Path(run_dir) / name).is_file():
                shutil.copyfile(Path(run_dir) / name, staging / name)
        os.chmod(staging, 0o777 & ~_UMASK)
        if record_dir.exists():
            old = record_dir.with_name(f".{record_dir.name}.old-{secrets.token_hex(3)}")
            os.replace(record_dir, old)
            shutil.rmtree(old)
        os.replace(staging, record_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
