"""Nothing lost, nothing cryptic: validation, exact resume after SIGKILL, resumable sweeps, divergence,
determinism, atomic writes."""

import os
import signal

import numpy as np
import pytest

import tasks
from conftest import TINY, run_train, train_here
from ropelab.core import runs
from ropelab.core.build import check_config
from ropelab.core.callbacks import KillAtStep
from ropelab.core.config import compose
from ropelab.core.data import SPLITS, TaskDataModule, draw, split_seed
from ropelab.core.errors import ConfigError


def composed(*overrides):
    return compose([*TINY, *overrides])


BAD = [
    (["seed=abc"], "seed"),
    (["seed=1.5"], "seed"),
    (["seed=-1"], "seed"),
    (["pos.base=-5"], "pos.base"),
    (["pos.base=0"], "pos.base"),
    (["pos=spectral", "pos.phase_on=middle"], "pos.phase_on"),
    (["pos.momentum.gamma=-0.5"], "pos.momentum.gamma"),
    (["pos=bifocal", "pos.spectral_fraction=1.5"], "pos.spectral_fraction"),
    (["pos.freqs=triangular"], "pos.freqs"),
    (["model.n_heads=3"], "model.n_heads"),
    (["model.d_model=6", "model.n_heads=2"], "model.d_model"),  # head dim 3: odd, rotary refuses
    (["task.gap_min=50", "task.gap_max=10"], "task.gap_max"),
    (["task=mod_arith", "task.modulus=1"], "task.modulus"),
    (["task=assoc_recall", "task.pairs_max=1000"], "task.pairs_max"),
    (["data.batch_size=0"], "data.batch_size"),
    (["trainer.max_steps=abc"], "trainer.max_steps"),
    (["trainer.max_steps=0"], "trainer.max_steps"),
    (["trainer.precision=fp8"], "trainer.precision"),
    (["optim.lr=-1"], "optim.lr"),
    (["optim.min_lr_ratio=2"], "optim.min_lr_ratio"),
    (["optim.betas=[0.9]"], "optim.betas"),
    (["+trainer.max_stepz=3"], "trainer.max_stepz"),
    (["+pos.phase_sdt=0.1", "pos=spectral"], "pos.phase_sdt"),
    (["+task.motif_length=5"], "motif_length"),
    (["trainer.val_every=-3"], "trainer.val_every"),
    (["model.attn_fp32=maybe"], "model.attn_fp32"),
    (["optim.fused=sometimes"], "optim.fused"),
]


@pytest.mark.parametrize("overrides, key", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_config_fails_before_training_naming_the_key(overrides, key):
    cfg = composed(*overrides)
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    message = str(err.value)
    assert key in message and "\n" not in message


@pytest.mark.parametrize("args, key", [
    (["task=nonsense"], "task="), (["trainer.max_stepz=3"], "trainer.max_stepz"),
    (["pos=spectral", "pos.phase_sdt=0.1"], "pos.phase_sdt"), (["-m", "pos=rope,nonsense"], "pos="),
])
def test_cli_errors_are_one_line(tmp_path, args, key):
    result = run_train(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and key in result.stderr and "Traceback" not in result.stderr


def test_default_config_is_valid():
    check_config(composed())


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
