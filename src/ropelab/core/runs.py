"""Run folders: where a run lives, its summary.json, and atomic writes.

A run folder holds ``config.yaml`` (resolved), ``metrics.csv``, ``summary.json``, ``checkpoints/``,
``train.log`` and, for schemes with learnable parameters, ``positional_trace.npz``. ``summary.json`` carries
``status``: running, completed, failed, diverged or interrupted; sweeps skip completed runs and resume the others
from ``checkpoints/last.ckpt``. While a process trains in a folder it holds an exclusive lock on its ``.lock``
file (``claim``), so two launches of the same sweep never train the same job at once.

A *record* is the part of a finished run folder that lasts (everything but checkpoints), copied to
``results/<table>/<job>/`` when the config sets ``record``; a sweep skips every job whose record is complete,
so the same command in a fresh clone runs only what is missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RUNS_ROOT = Path(os.environ.get("ROPELAB_RUNS", "runs"))
SUMMARY = "summary.json"
TRACE = "positional_trace.npz"  # learnable positional parameters over training (callbacks.PositionalTrace)
RECORD_FILES = ("config.yaml", SUMMARY, "metrics.csv", TRACE)
LOCK = ".lock"
UNSTARTED = {".hydra", "train.log", LOCK}  # what a job folder holds before training writes its config.yaml
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


class InUse(RuntimeError):
    """Another process holds the run folder's lock: it is training there now."""


@contextlib.contextmanager
def claim(run_dir: Path):
    """Hold an exclusive lock on ``run_dir/.lock`` while training there; raise InUse if another process holds it.

    ``flock`` locks die with their process (a SIGKILL included), so a lock is never stale; the file stays, since
    unlinking it would let a third process lock a fresh file while the second still holds the old one."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise InUse(f"{run_dir} is being trained by another process (pid {holder})") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def remove_if_unstarted(run_dir: Path) -> bool:
    """Remove a folder that holds nothing but what Hydra writes before a job starts (``.hydra/``, ``train.log``)
    and the lock: a rejected or skipped job leaves no folder behind. True if it was removed."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or any(p.name not in UNSTARTED for p in run_dir.iterdir()):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)  # a concurrent launch may be writing .hydra/ into it: best effort
    return not run_dir.exists()


def portable(path: Path | str) -> str:
    """``path`` as a committed file may name it: relative to the checkout where it lies under it (a record's
    ``record:`` and ``run_dir``: the same in every clone), else as given."""
    from ropelab.core.cli import REPO

    try:
        return str(Path(path).absolute().relative_to(REPO))
    except ValueError:
        return str(path)


def inside_results(path: Path | str) -> bool:
    """``path`` lies in the checkout's results/, where only finished records are written (``keep_record``)."""
    from ropelab.core.cli import REPO

    return (REPO / "results") in Path(path).absolute().parents


def shorter(path: Path) -> Path:
    """``path`` relative to the working directory where it lies under it, else as given."""
    try:
        return Path(path).absolute().relative_to(Path.cwd())
    except ValueError:
        return Path(path)


CHECKPOINTS = "checkpoints"  # in a run folder: where training writes its checkpoints
LAST_CHECKPOINT = Path(CHECKPOINTS, "last.ckpt")  # the one a resume or an evaluation reads


def last_checkpoint(run_dir: str | Path) -> Path:
    """Where the run folder ``run_dir`` keeps its last checkpoint (whether or not it exists yet)."""
    return Path(run_dir) / LAST_CHECKPOINT


def checkpoint_path(path: str | Path) -> Path:
    """A ``train.py`` run folder (its ``checkpoints/last.ckpt``) or a checkpoint file → the file."""
    path = Path(path)
    if path.is_dir():
        path = last_checkpoint(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no checkpoint (expected a run folder with checkpoints/last.ckpt or a .ckpt file)")
    return path


def python_command() -> str:
    """The interpreter the user ran, as they can type it here (``.venv/bin/python``), else ``python``."""
    python = shorter(Path(sys.executable))
    return str(python) if not python.is_absolute() else "python"


def report_command(path: Path | str) -> str:
    """The command that turns a run or sweep folder into a report, with the interpreter the user ran; paths
    relative to the working directory where they lie under it."""
    return f"{python_command()} -m ropelab report {shorter(Path(path))}"
