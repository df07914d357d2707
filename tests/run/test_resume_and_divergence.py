"""Nothing lost: exact resume after SIGKILL, resumable sweeps, divergence, determinism, atomic writes (a bad
config's one line: tests/config/test_validation.py)."""

import os
import signal
import warnings

import numpy as np
import pytest

import tasks
from conftest import TINY, run_train, torch_threads_kept, train_here
from ropelab.core import runs, train
from ropelab.core.callbacks import KillAtStep
from ropelab.core.config import compose
from ropelab.core.data import SPLITS, TaskDataModule, draw, split_seed
from ropelab.core.train import run


# ---------------------------------------------------------------- exact resume after SIGKILL
RESUME = [*TINY, "pos=spectral", "trainer.max_steps=40", "trainer.val_every=5"]


def test_sigkill_then_resume_ends_bit_identical(tmp_path):
    """The run SIGKILLs itself at the start of step 17 (``$ROPELAB_KILL_AT_STEP``): the checkpoint of step 15 is
    on disk and steps 15–16 are lost. An exact kill point, where polling for a checkpoint file raced the run."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = run_train(*RESUME, f"hydra.run.dir={straight}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]

    crashed = run_train(*RESUME, f"hydra.run.dir={killed}", cwd=tmp_path, env={KillAtStep.ENV: "17"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert runs.read_summary(killed)["status"] == "running"  # what a SIGKILL leaves behind
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == ["last.ckpt", "step000015.ckpt"]

    resumed = run_train(*RESUME, f"resume={killed}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = runs.read_summary(straight), runs.read_summary(killed)
    assert b["status"] == "completed" and b["resumed_from_step"] == 15
    assert a["final"] == b["final"]
    assert (straight / "metrics.csv").read_text() == (killed / "metrics.csv").read_text()
    ta, tb = np.load(straight / "positional_trace.npz"), np.load(killed / "positional_trace.npz")
    assert all(np.array_equal(ta[k], tb[k]) for k in ta.files)


def test_rerunning_a_completed_run_folder_skips_it(tmp_path):
    args = [*TINY, "trainer.max_steps=2", "trainer.val_every=1"]
    assert train_here(*args, run_dir=tmp_path / "r")["status"] == "completed"
    before = (tmp_path / "r" / "summary.json").read_text()
    again = run_train(*args, f"resume={tmp_path / 'r'}", cwd=tmp_path)
    assert again.returncode == 0 and (tmp_path / "r" / "summary.json").read_text() == before
    assert "skipped: already completed" in again.stdout


# ---------------------------------------------------------------- sweeps
SWEEP = ["-m", *TINY, "trainer.max_steps=3", "trainer.val_every=3", "name=s", "seed=0,1"]


def test_sweep_skips_completed_and_retries_failed_only_when_asked(tmp_path):
    assert run_train(*SWEEP, cwd=tmp_path).returncode == 0
    jobs = sorted(p for p in (tmp_path / "runs" / "s").iterdir() if p.is_dir() and "seed=" in p.name)
    assert [runs.read_summary(j)["status"] for j in jobs] == ["completed", "completed"]
    failed = runs.read_summary(jobs[1]) | {"status": "failed", "error": "synthetic"}
    runs.write_summary(jobs[1], failed)
    stamps = [(j / "summary.json").stat().st_mtime_ns for j in jobs]

    assert run_train(*SWEEP, cwd=tmp_path).returncode == 0
    assert [(j / "summary.json").stat().st_mtime_ns for j in jobs] == stamps  # nothing re-run

    assert run_train(*SWEEP, "retry_failed=true", cwd=tmp_path).returncode == 0
    assert (jobs[0] / "summary.json").stat().st_mtime_ns == stamps[0]
    assert runs.read_summary(jobs[1])["status"] == "completed"


def test_divergence_stops_the_run_and_the_sweep_goes_on(tmp_path):
    result = run_train("-m", *TINY, "trainer.max_steps=3", "trainer.val_every=3", "name=d",
                       "trainer.diverge_grad_norm=1e-9,null", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summaries = {p.name: runs.read_summary(p) for p in (tmp_path / "runs" / "d").iterdir() if p.is_dir()}
    diverged = next(s for name, s in summaries.items() if "diverge_grad_norm=1e-09" in name)
    assert diverged["status"] == "diverged" and diverged["diverged_step"] == 0 and "gradient norm" in diverged["error"]
    assert next(s for name, s in summaries.items() if "diverge_grad_norm=null" in name)["status"] == "completed"


def test_nan_loss_is_diverged_with_last_finite_loss(tmp_path):
    summary = train_here(*TINY, "trainer.max_steps=20", "trainer.val_every=10", "optim.lr=1e6",
                         "optim.warmup_steps=0", "trainer.gradient_clip_val=null", "trainer.diverge_grad_norm=null",
                         run_dir=tmp_path / "nan")
    assert summary["status"] == "diverged"
    assert summary["last_finite_loss"] is not None and np.isfinite(summary["last_finite_loss"])
    assert runs.read_summary(tmp_path / "nan")["status"] == "diverged"


# ---------------------------------------------------------------- determinism
def _metrics(tmp_path, name, *overrides):
    train_here(*TINY, "trainer.max_steps=6", "trainer.val_every=3", *overrides, run_dir=tmp_path / name)
    return (tmp_path / name / "metrics.csv").read_text()


def test_same_seed_same_metrics_different_seed_different(tmp_path):
    a, b = _metrics(tmp_path, "a", "seed=3"), _metrics(tmp_path, "b", "seed=3")
    c = _metrics(tmp_path, "c", "seed=4")
    assert a == b and a != c


def test_splits_never_share_a_generator_seed():
    seeds = {split: {split_seed(s, split, i) for s in range(3) for i in range(50)} for split in SPLITS}
    for x in SPLITS:
        for y in SPLITS:
            if x != y:
                assert not seeds[x] & seeds[y]
    dm = TaskDataModule(*tasks.build_with_ood({"name": "bio_rotation", "gap_min": 5, "gap_max": 9}), seed=0,
                        val_size=16, test_size=16, ood_size=16, eval_batch_size=16)
    val = dm.fixed_set("val").tensors[0].numpy()
    train = draw(dm.task, 0, "train", 16)[0]
    assert not np.array_equal(train, val[:16])


# ---------------------------------------------------------------- atomic writes
def test_summary_write_is_atomic(tmp_path, monkeypatch):
    runs.write_summary(tmp_path, {"status": "completed", "x": 1})
    before = (tmp_path / "summary.json").read_text()

    def killed(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        runs.write_summary(tmp_path, {"status": "running", "x": 2})
    assert (tmp_path / "summary.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


# ---------------------------------------------------------------- Ctrl-C in the final evaluation
STEPS = ["task=mod_arith", "trainer.max_steps=4", "trainer.val_every=2", "trainer.precision=32-true"]


def test_ctrl_c_in_the_final_evaluation_keeps_the_metrics_and_a_resume_ends_them(tmp_path, monkeypatch):
    import lightning.pytorch as pl

    real_test = pl.Trainer.test

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    cfg = compose([*TINY, *STEPS])
    with torch_threads_kept():
        monkeypatch.setattr(pl.Trainer, "test", interrupted)
        stopped = run(cfg, tmp_path / "job")
        assert stopped["status"] == "interrupted"
        assert {"train/loss", "val/loss", "val/exact"} <= set(stopped["final"])
        monkeypatch.setattr(pl.Trainer, "test", real_test)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train._quiet_harmless_warnings()  # what importing ropelab.core.train installs, ahead of "always"
            resumed = run(cfg, tmp_path / "job")
    assert resumed["status"] == "completed" and resumed["resumed_from_step"] == 4
    assert resumed["final"]["train/loss"] == stopped["final"]["train/loss"]
    assert resumed["final"]["val/loss"] == stopped["final"]["val/loss"]
    assert {"test/exact", "ood/exact"} <= set(resumed["final"])
    assert not [w for w in caught if "exists and is not empty" in str(w.message)]
