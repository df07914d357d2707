import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("WANDB_MODE", "offline")


# Tests wait for a subprocess to end and then read what it wrote, never for a time to pass; a timeout only
# guards against a hang, so it is far above any run's time on a loaded machine.
HANG_GUARD_S = 1200


def run_train(*overrides: str, cwd: Path, timeout: int = HANG_GUARD_S, env: dict | None = None,
              root: Path = ROOT) -> subprocess.CompletedProcess:
    """Run ``python <root>/train.py`` as a user would, in ``cwd`` (runs land in cwd/runs)."""
    return subprocess.run([sys.executable, str(root / "train.py"), *overrides], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@contextlib.contextmanager
def torch_threads_kept():
    """Puts back torch's thread count, which a run in this process sets (trainer.threads)."""
    import torch

    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_here(*overrides: str, run_dir: Path) -> dict:
    """Train in this process, as ``python train.py`` does once Hydra has composed the config
    (``ropelab.core.train.run``), for tests that need a finished run rather than the command line; returns the
    summary. Saves the 5 s a subprocess spends importing."""
    from ropelab.core.config import compose
    from ropelab.core.train import run

    with torch_threads_kept():
        return run(compose(list(overrides)), Path(run_dir))


def _checkout_state() -> set[str]:
    """What tests must leave as they found it: git's view of the checkout (new, changed, deleted files) and the
    files under runs/, which git ignores. runs/campaign/ is left out: a campaign trains there from its own worktrees,
    in another process, while tests run."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                            text=True).stdout.splitlines()
    runs = ROOT / "runs"
    scratch = {f"runs/{p.relative_to(runs)}" for top in (runs.iterdir() if runs.is_dir() else ()) if top.name != "campaign"
               for p in (top, *top.rglob("*"))}
    return set(status) | scratch


def pytest_sessionstart(session):
    session.config.checkout_before = _checkout_state()


def pytest_sessionfinish(session, exitstatus):
    """No test writes into the checkout: a run, a report or a record made there fails the session, by name."""
    before = getattr(session.config, "checkout_before", None)
    if before is None or getattr(session.config, "workerinput", None) is not None:
        return
    written = sorted(_checkout_state() - before)
    if written:
        print(f"\nerror: the tests wrote into the checkout {ROOT}: {', '.join(written[:10])}"
              f"{' …' if len(written) > 10 else ''}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# a tiny, fast configuration for end-to-end runs
TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.mlp_hidden=64", "data.batch_size=4",
        "data.val_size=8", "data.test_size=8", "data.ood_size=8", "data.eval_batch_size=8", "trainer.threads=1"]


@pytest.fixture
def tiny():
    return list(TINY)


def wandb_records(path: Path) -> list:
    """Records of a .wandb file (LevelDB log format: 32 KiB blocks, 7-byte chunk headers after a 7-byte magic)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf, out = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            out.append(buf + chunk)
    records = []
    for raw in out:
        record = pb.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records
