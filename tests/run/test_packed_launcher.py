"""``hydra/launcher=packed`` (``ropelab.core.packed_launcher``, issue 23 items 1-2): a multirun's same-shape jobs
trained together leave the folders, records and numbers their single runs leave; a killed pack resumes exactly;
a job that cannot pack runs alone; a bad ``hydra.launcher.pack`` is one line."""


import numpy as np
import pandas as pd
import pytest

from conftest import TINY, run_train, train_here
from ropelab.core import runs
from ropelab.core.callbacks import KillAtStep
from ropelab.core.config import compose
from ropelab.core.packed_launcher import Member, packs

PACKED = ["hydra/launcher=packed", "hydra.sweep.subdir=job${hydra.job.num}"]  # short folder names: job0, job1, …
STEPS = 50
# a fixed training set of 24 batches: the 50 steps run through epochs, and the resume at step 20 starts mid-epoch
FP32 = [*TINY, "task=mod_arith", "pos=spectral", "trainer.precision=32-true", "trainer.accelerator=cpu",
        "data.train_size=96", f"trainer.max_steps={STEPS}", "trainer.val_every=20", "trainer.progress=off"]
MEMBERS = ["seed=0,1", "optim.lr=3e-3"]  # a sweep of two seeds: one pack of two


def _files(run_dir):
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))


def _metrics(run_dir) -> pd.DataFrame:
    return pd.read_csv(run_dir / "metrics.csv")


def test_a_packed_sweep_writes_each_members_folder_and_record_as_a_single_run(tmp_path):
    """bf16-mixed, 2 steps: jobs 0-2 are one pack (jobs 0 and 1 diverge at their first step, job 2 goes on), job 3
    trains alone (pack=3). The packed member's folder and record hold the files, metrics.csv columns and rows,
    and summary keys of the alone job; a diverged member's summary has a diverged single run's keys."""
    result = run_train("-m", *TINY, "task=mod_arith", "pos=spectral", "trainer.precision=bf16-mixed",
                       "trainer.max_steps=2", "trainer.val_every=2", "trainer.progress=off", "record=records",
                       "trainer.diverge_grad_norm=1e-9,1e4", "seed=0,1", *PACKED, "hydra.launcher.pack=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "4 jobs · 2 completed · 0 skipped · 0 failed · 2 diverged" in result.stdout
    sweep = tmp_path / "runs" / "sweep"
    member, alone = sweep / "job2", sweep / "job3"
    assert runs.read_summary(member)["packed"] == {"members": 3, "index": 2}
    assert "packed" not in runs.read_summary(alone)
    assert _files(member) == _files(alone)
    assert "checkpoints/last.ckpt" in _files(member) and "positional_trace.npz" in _files(member)
    assert "status: completed · steps 2" in (member / "train.log").read_text()
    packed_rows, single_rows = _metrics(member), _metrics(alone)
    assert list(packed_rows.columns) == list(single_rows.columns)
    assert packed_rows[["epoch", "step"]].equals(single_rows[["epoch", "step"]])
    assert packed_rows.notna().equals(single_rows.notna())
    summary, single = runs.read_summary(member), runs.read_summary(alone)
    assert set(summary) - {"packed"} == set(single)
    assert set(summary["final"]) == set(single["final"]) and set(summary["per_group"]) == set(single["per_group"])
    assert summary["status"] == "completed" and summary["steps"] == 2 and summary["fused_adamw"] is False
    records = tmp_path / "records"
    assert sorted(p.name for p in records.iterdir()) == ["job2", "job3"]  # completed jobs are recorded
    assert _files(records / "job2") == _files(records / "job3")
    assert (records / "job2" / "config.yaml").read_text() == (member / "config.yaml").read_text()

    diverged = runs.read_summary(sweep / "job0")
    assert diverged["status"] == "diverged" and diverged["diverged_step"] == 0 and diverged["steps"] == 0
    last = diverged["last_finite_loss"]
    assert diverged["error"].startswith("gradient norm ") and diverged["error"].endswith(f" at step 0 (last finite loss {last})")
    single_diverged = train_here(*TINY, "task=mod_arith", "pos=spectral", "trainer.precision=bf16-mixed",
                                 "trainer.max_steps=2", "trainer.diverge_grad_norm=1e-9", run_dir=tmp_path / "one")
    assert set(diverged) - {"packed"} == set(single_diverged)

    again = run_train("-m", *TINY, "task=mod_arith", "pos=spectral", "trainer.precision=bf16-mixed",
                      "trainer.max_steps=2", "trainer.val_every=2", "trainer.progress=off", "record=records",
                      "trainer.diverge_grad_norm=1e-9,1e4", "seed=0,1", *PACKED, "hydra.launcher.pack=3", cwd=tmp_path)
    assert "4 jobs · 0 completed · 4 skipped · 0 failed" in again.stdout, again.stdout[-2000:]  # as any sweep


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted packed fp32 sweep of two members, 50 steps."""
    cwd = tmp_path_factory.mktemp("straight")
    result = run_train("-m", *FP32, *MEMBERS, *PACKED, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd / "runs" / "sweep"


def test_a_packed_members_metrics_equal_its_single_runs_in_fp32(straight, tmp_path):
    """Each member's train/loss over 50 steps within 1e-5 relative of its single run's, and its validation, test
    and OOD metrics too."""
    for k, seed in enumerate((0, 1)):
        member = straight / f"job{k}"
        assert runs.read_summary(member)["packed"] == {"members": 2, "index": k}
        single = train_here(*FP32, f"seed={seed}", run_dir=tmp_path / str(seed))
        packed_rows, single_rows = _metrics(member), _metrics(tmp_path / str(seed))
        assert list(packed_rows.columns) == list(single_rows.columns)
        assert packed_rows[["epoch", "step"]].equals(single_rows[["epoch", "step"]])
        train = [rows.dropna(subset=["train/loss"])["train/loss"].to_numpy() for rows in (packed_rows, single_rows)]
        assert len(train[0]) == STEPS
        np.testing.assert_allclose(train[0], train[1], rtol=1e-5, atol=0)
        final, single_final = runs.read_summary(member)["final"], single["final"]
        assert set(final) == set(single_final)
        for key in final:
            assert final[key] == pytest.approx(single_final[key], rel=1e-5, abs=1e-7), key
        assert runs.read_summary(member)["per_group"] == single["per_group"]


def test_a_killed_pack_resumes_every_member_and_ends_as_an_uninterrupted_one(straight, tmp_path):
    """SIGKILL at the start of step 30 (checkpoints of step 20 on disk); the same command again resumes both
    members from step 20 and leaves the metrics, trace and final numbers of the uninterrupted pack."""
    killed = run_train("-m", *FP32, *MEMBERS, *PACKED, cwd=tmp_path, env={KillAtStep.ENV: "30"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    sweep = tmp_path / "runs" / "sweep"
    for k in (0, 1):
        assert (sweep / f"job{k}" / "checkpoints" / "last.ckpt").resolve().name == "step000020.ckpt"
        assert runs.read_summary(sweep / f"job{k}")["status"] == "running"
    resumed = run_train("-m", *FP32, *MEMBERS, *PACKED, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for k in (0, 1):
        member, reference = sweep / f"job{k}", straight / f"job{k}"
        summary = runs.read_summary(member)
        assert summary["status"] == "completed" and summary["resumed_from_step"] == 20
        assert (member / "metrics.csv").read_text() == (reference / "metrics.csv").read_text()
        assert summary["final"] == runs.read_summary(reference)["final"]
        trace, straight_trace = np.load(member / runs.TRACE), np.load(reference / runs.TRACE)
        assert list(trace.keys()) == list(straight_trace.keys())
        assert all(np.array_equal(trace[key], straight_trace[key]) for key in trace.keys())
        assert f"resuming {member} from step 20" in (member / "train.log").read_text()


def _same_as_straight(sweep, straight, resumed_from: int) -> None:
    for k in (0, 1):
        member, reference = sweep / f"job{k}", straight / f"job{k}"
        summary = runs.read_summary(member)
        assert summary["status"] == "completed" and summary["resumed_from_step"] == resumed_from
        assert (member / "metrics.csv").read_text() == (reference / "metrics.csv").read_text()
        assert summary["final"] == runs.read_summary(reference)["final"]
        assert summary["per_group"] == runs.read_summary(reference)["per_group"]
        trace, straight_trace = np.load(member / runs.TRACE), np.load(reference / runs.TRACE)
        assert all(np.array_equal(trace[key], straight_trace[key]) for key in straight_trace.keys())


def test_ctrl_c_stops_a_pack_at_the_step_under_way_and_the_rerun_ends_as_an_uninterrupted_one(straight, tmp_path):
    """SIGINT during step 30: every member saves its checkpoint of that step's end (31), its run is interrupted
    (exit 130, as a sweep's Ctrl-C); the same command resumes both from 31, and they end as the straight pack."""
    stopped = run_train("-m", *FP32, *MEMBERS, *PACKED, cwd=tmp_path,
                        env={KillAtStep.ENV: "30", KillAtStep.SIGNAL_ENV: "INT"})
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    sweep = tmp_path / "runs" / "sweep"
    for k in (0, 1):
        summary = runs.read_summary(sweep / f"job{k}")
        assert summary["status"] == "interrupted" and summary["steps"] == summary["checkpoint_step"] == 31
        assert sorted(p.name for p in (sweep / f"job{k}" / "checkpoints").iterdir()) == ["last.ckpt", "step000031.ckpt"]
    resumed = run_train("-m", *FP32, *MEMBERS, *PACKED, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _same_as_straight(sweep, straight, 31)


@pytest.mark.slow
def test_a_pack_killed_once_it_has_saved_resumes_to_the_uninterrupted_end(straight, tmp_path):
    """SIGKILL as soon as the last member's first checkpoint is linked (waiting on that file, not on a clock),
    wherever the pack then is: the rerun resumes from what every member holds and ends as the straight pack."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    first = tmp_path / "runs" / "sweep" / "job1" / "checkpoints" / "last.ckpt"
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "-m", *FP32, *MEMBERS, *PACKED],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        while not first.is_symlink() and process.poll() is None:
            time.sleep(0.02)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert first.is_symlink()
    resumed = run_train("-m", *FP32, *MEMBERS, *PACKED, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = {runs.read_summary(tmp_path / "runs" / "sweep" / f"job{k}")["resumed_from_step"] for k in (0, 1)}
    assert len(steps) == 1 and steps <= {20, 40}  # every member from one step a validation saved
    _same_as_straight(tmp_path / "runs" / "sweep", straight, steps.pop())


def test_jobs_pack_by_shape_and_start_and_a_job_alone_in_its_shape_is_left_to_run_alone(tmp_path):
    """The grouping: members of one shape (all but PER_MEMBER keys equal) in job order, ``pack`` at most; a fresh
    job alone in its shape is left out (the launcher runs it as any job: test above, job3); a member resuming
    from a pack's checkpoint packs even alone, at its checkpoint's step."""
    def member(num, *overrides, step=0):
        cfg = compose([*TINY, "task=mod_arith", *overrides])
        return Member(num, None, cfg, tmp_path / str(num), None, "", None, step=step,
                      checkpoint=tmp_path / "x.ckpt" if step else None)

    jobs = [member(0, "seed=0"), member(1, "model.d_model=16"), member(2, "seed=1", "optim.lr=1e-3"),
            member(3, "seed=2", "pos.momentum.gamma=0.5"), member(4, "seed=3"), member(5, "seed=4", step=20)]
    assert [[m.num for m in p] for p in packs(jobs, 3)] == [[0, 2, 3], [5]]
    assert [[m.num for m in p] for p in packs(jobs, 2)] == [[0, 2], [3, 4], [5]]

    # killed between two members' saves: one at step 40, one still at 20; both hold step 20's files
    behind, ahead = member(6, "seed=5", step=20), member(7, "seed=6", step=40)
    for m in (behind, ahead):
        (m.run_dir / "checkpoints").mkdir(parents=True)
        (m.run_dir / "checkpoints" / "step000020.ckpt").touch()
    assert [[(m.num, m.step) for m in p] for p in packs([behind, ahead], 8)] == [[(6, 20), (7, 20)]]
    assert ahead.checkpoint == ahead.run_dir / "checkpoints" / "step000020.ckpt"


@pytest.mark.parametrize("value", ["1", "0", "two", "2.5"])
def test_a_bad_pack_size_is_one_line_naming_the_key(value, tmp_path):
    result = run_train("-m", *TINY, "seed=0,1", "hydra/launcher=packed", f"hydra.launcher.pack={value}", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: hydra.launcher.pack={value!r}"[:len("error: hydra.launcher.pack=")])
    assert "an integer >= 2" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_in_bf16_a_packed_member_agrees_with_its_single_run_within_seed_noise(tmp_path):
    """Issue 23 item 3, bf16-mixed (no bit-for-bit claim: vmap batches the matmuls, so bf16 rounds differently):
    mod 7 at the Bifocal model size, 3 seeds × 300 steps, packed and one job at a time. For each seed the packed
    final val loss is closer to its single run's than the single runs' seed-to-seed SD. Prints the numbers."""
    common = ["task=mod_arith", "pos=rope", "trainer.precision=bf16-mixed", "trainer.max_steps=300",
              "trainer.val_every=100", "trainer.progress=off", "trainer.threads=1", "seed=0,1,2",
              "hydra.sweep.subdir=seed${seed}"]
    for name, launcher in (("single", []), ("packed", ["hydra/launcher=packed"])):
        result = run_train("-m", *common, f"hydra.sweep.dir=runs/{name}", *launcher, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
    final = {name: np.array([runs.read_summary(tmp_path / "runs" / name / f"seed{s}")["final"]["val/loss"]
                             for s in range(3)]) for name in ("single", "packed")}
    gap, noise = np.abs(final["packed"] - final["single"]), final["single"].std(ddof=1)
    print(f"val/loss single {final['single']} packed {final['packed']} |gap| {gap} seed SD {noise:.4f}")
    assert gap.max() < noise


class _Opens:
    """Pickles as a call of ``open``: unpickling it creates ``path``, as a downloaded checkpoint could run code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def test_a_checkpoint_that_would_run_code_is_refused_by_the_resume_and_runs_nothing(tmp_path):
    """Where a resume (single or packed) reads the step of a run folder's checkpoint, it loads weights only: a
    pickled callable is a one-line refusal, never called; a checkpoint of plain data still gives its step."""
    import torch

    from ropelab.core.bookkeeping import checkpoint_step, last_checkpoint_step
    from ropelab.core.errors import ConfigError

    ran = tmp_path / "ran"
    (tmp_path / "checkpoints").mkdir()
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    torch.save({"global_step": 20, "state_dict": {"model.w": torch.zeros(1)}, "hook": _Opens(ran)}, ckpt)
    with pytest.raises(ConfigError, match=r"last\.ckpt cannot be read") as err:
        checkpoint_step(ckpt)
    assert "\n" not in str(err.value)
    assert last_checkpoint_step(tmp_path) is None
    assert not ran.exists()
    torch.save({"global_step": 20, "state_dict": {"model.w": torch.zeros(1)}}, ckpt)
    assert checkpoint_step(ckpt) == 20
