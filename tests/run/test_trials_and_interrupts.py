"""The first hour, again (issue 24): a trial of a paper preset never writes where the committed records live, and
Ctrl-C stops a run or a sweep cleanly, says where it stopped and how to resume, and exits 130."""

import shlex

import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, TINY, run_train
from ropelab.core import identity, runs
from ropelab.core.callbacks import KillAtStep
from ropelab.core.bookkeeping import INTERRUPTED_EXIT, record_plan


def plan(*overrides, sweep=True):
    """Where ropelab.core.train.main would record the job these command-line overrides make (the overrides are that
    job's, as Hydra hands them to it), and why not. The settings it computes with are taken to be its table's
    records' (this machine's threads, precision… are test_identity's)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(identity, "trial_reason", lambda *args: "")
        record_dir, why = record_plan(cfg, cfg.hydra, ROOT / "runs" / "x" / "job", sweep)
    return (str(record_dir.parent) if record_dir else None), why


@pytest.mark.parametrize("overrides, recorded_in", [
    (["experiment=bifocal_table1", "task=dyck3", "pos=rope", "seed=0"], "results/bifocal_table1"),
    # how a job runs is no trial: threads, launcher, logger, progress, compile, the device (make pope-gpu)
    (["experiment=bifocal_table1", "task=dyck3", "pos=rope", "seed=0", "trainer.threads=1", "logger=wandb",
      "trainer.progress=lines", "trainer.compile=true", "trainer.accelerator=cpu"], "results/bifocal_table1"),
    # the table's other commands (Makefile phase, pope-table): the preset lists their keys in record_also
    (["experiment=bio_phase", "pos=bifocal", "task.noise=same", "seed=0"], "results/bio_phase"),
    (["experiment=bio_phase", "pos=spectral", "optim.pos_lr_scale=10", "task.noise=lower", "seed=1"],
     "results/bio_phase"),
    (["experiment=pope_indirect", "pos=alibi", "pos.heads_fraction=0.5", "seed=0"], "results/pope_indirect"),
    (["experiment=pope_indirect", "pos=pope", "pos.delta_init=uniform", "seed=2"], "results/pope_indirect"),
    (["experiment=pope_indirect", "pos=rope", "data.train_size=1000000", "seed=0"], "results/pope_indirect"),  # pope-gpu
    (["experiment=pope_indirect", "pos=rope", "data.train_size=1000000", "seed=0", "hydra/launcher=packed",
      "hydra.launcher.pack=3"], "results/pope_indirect"),  # pope-gpu's launcher
    # issue 22: the ladder's rungs are an axis; the baselines' other commands as pope_indirect's
    (["experiment=pope_ladder", "pos=pope", "task.rung=2", "seed=1"], "results/pope_ladder"),
    (["experiment=pope_baselines", "pos=pope", "pos.delta_init=uniform", "seed=0"], "results/pope_baselines"),
    # issue 25: make extrapolation's YaRN ×4 + ft command (a seed at a time, as a resumed chain gives it)
    (["experiment=extrapolation_code_lm_ft", "pos=rope", "pos.scaling=yarn", "pos.scaling_factor=4",
      "pos.original_max_len=128", "seed=1"], "results/extrapolation_code_lm_ft"),
    (["experiment=calibrate_indirect_indexing", "trainer.max_steps=3000", "task.rung=3", "seed=1"],
     "results/calibration/indirect_indexing"),
    (["experiment=momentum_gamma", "task=assoc_recall", "pos.momentum.gamma=0.3", "seed=0"],
     "results/momentum_gamma"),
    (["experiment=calibrate_assoc_recall", "trainer.max_steps=500", "task.n_keys=16", "pos.momentum.gamma=0.3",
      "seed=1"], "results/calibration/assoc_recall"),  # a budget grid: the budget is an axis there
    # a record= the user gives records whatever the job
    (["experiment=bifocal_table1", "task=dyck3", "pos=rope", "seed=0", "trainer.max_steps=2", "record=elsewhere"],
     "elsewhere"),
])
def test_a_presets_own_jobs_are_recorded(overrides, recorded_in):
    assert plan(*overrides) == (recorded_in, "")


@pytest.mark.parametrize("overrides, outside", [
    (["experiment=bifocal_table1", "task=mod_arith", "pos=rope", "seed=0", "trainer.max_steps=2"],
     "trainer.max_steps=2"),  # the issue's command
    (["experiment=bifocal_table1", "task=dyck3", "pos=rope", "seed=5"], "seed=5"),  # not one of its seeds
    (["experiment=bifocal_table1", "task=dyck3", "pos=alibi", "seed=0"], "pos=alibi"),  # not one of its schemes
    (["experiment=pope_indirect", "pos=rope", "seed=0", "model.d_model=64"], "model.d_model=64"),
    (["experiment=pope_ladder", "pos=rope", "seed=0", "task.rung=4"], "task.rung=4"),  # not one of its rungs
    (["experiment=bifocal_table1", "task=dyck3", "pos=rope", "seed=0", "+task.extra=1"], "+task.extra=1"),
    (["experiment=bifocal_table1", "task=dyck3", "pos=rope", "seed=3", "hydra.sweeper.params.seed='0,1,2,3'"],
     "hydra.sweeper.params.seed='0,1,2,3'"),  # a grid widened on the command line is not the preset's
])
def test_any_other_job_of_a_preset_is_a_trial_and_says_why(overrides, outside):
    record_dir, why = plan(*overrides)
    assert record_dir is None
    assert why.startswith(f"{outside} is outside experiment=") and "a trial, not recorded in results/" in why


def test_a_single_run_of_a_preset_is_a_trial():
    record_dir, why = plan("experiment=pope_indirect", "pos=rope", "seed=0", sweep=False)
    assert record_dir is None and "-m records its jobs" in why


def test_the_issues_trial_leaves_no_record_and_says_where_it_went(tmp_path):
    result = run_train("-m", "experiment=bifocal_table1", "trainer.max_steps=2", "task=mod_arith", "pos=rope",
                       "seed=0", *TINY, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (tmp_path / "results").exists()
    job = next((tmp_path / "runs" / "bifocal_table1").glob("*trainer.max_steps=2*"))
    assert runs.read_summary(job)["trial"].startswith("trainer.max_steps=2 model.d_model=32 ")
    lines = result.stdout.splitlines()
    assert f"run: {job}" in lines
    assert any(line.startswith("  trial, 1 job in runs/bifocal_table1: ") and
               line.endswith("a trial, not recorded in results/bifocal_table1") for line in lines), result.stdout
    assert lines[-1] == "next: python -m ropelab report runs/bifocal_table1"


# ------------------------------------------------------------------------- Ctrl-C

CTRL_C = {KillAtStep.ENV: "17", KillAtStep.SIGNAL_ENV: "INT"}  # a real SIGINT, at the start of step 17
RUN = [*TINY, "pos=spectral", "trainer.max_steps=40", "trainer.val_every=5"]


def _line(result, prefix: str) -> str:
    return next(line for line in result.stdout.splitlines() if line.startswith(prefix))


def test_ctrl_c_stops_a_run_with_a_checkpoint_and_its_resume_command_ends_it_bit_identical(tmp_path):
    """SIGINT during step 17: the step ends, a checkpoint of step 18 (no validation step) is saved, the run
    says where it stopped and the command that resumes it, and exits 130. Starting the same command afresh
    names the interrupted run; its resume command then ends it as an uninterrupted run would have ended."""
    stopped = run_train(*RUN, cwd=tmp_path, env=CTRL_C)
    assert stopped.returncode == INTERRUPTED_EXIT, stopped.stderr[-2000:]
    run_dir = tmp_path / runs.shorter(_line(stopped, "run: ").removeprefix("run: "))
    assert _line(stopped, "status: ").startswith("status: interrupted at step 18 · checkpoint at step 18 · ")
    assert (run_dir / "checkpoints" / "last.ckpt").resolve().name == "step000018.ckpt"
    summary = runs.read_summary(run_dir)
    assert summary["status"] == "interrupted" and summary["steps"] == summary["checkpoint_step"] == 18
    assert "Traceback" not in stopped.stdout + stopped.stderr
    resume = _line(stopped, "resume: ").removeprefix("resume: ")
    assert resume.endswith(f"resume={runs.shorter(run_dir)}".replace(str(tmp_path) + "/", ""))

    afresh = run_train(*RUN, cwd=tmp_path)  # the same command again: an uninterrupted run, beside a note
    assert afresh.returncode == 0, afresh.stderr[-2000:]
    assert f"was interrupted at step 18 with this config; this run starts afresh" in afresh.stdout
    straight = tmp_path / runs.shorter(_line(afresh, "run: ").removeprefix("run: "))

    args = shlex.split(resume)
    assert args[0] == "python" and args[1] == str(ROOT / "train.py")
    resumed = run_train(*args[2:], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert runs.read_summary(run_dir)["resumed_from_step"] == 18
    assert (run_dir / "metrics.csv").read_text() == (straight / "metrics.csv").read_text()
    assert runs.read_summary(run_dir)["final"] == runs.read_summary(straight)["final"]


def test_ctrl_c_ends_a_sweep_with_its_finished_interrupted_and_unstarted_jobs(tmp_path):
    """The basic launcher runs the jobs in this process: SIGINT in the first job ends the sweep."""
    stopped = run_train("-m", *RUN, "name=c", "seed=0,1,2", cwd=tmp_path, env=CTRL_C)
    assert stopped.returncode == INTERRUPTED_EXIT, stopped.stderr[-2000:]
    tail = stopped.stdout[stopped.stdout.index("sweep runs/c interrupted"):].splitlines()
    job = "data.batch_size=4,data.eval_batch_size=8,data.ood_size=8,data.test_size=8,data.val_size=8,model.d_model=32,"\
          "model.mlp_hidden=64,model.n_heads=2,model.n_layers=1,pos=spectral,seed={},trainer.max_steps=40,"\
          "trainer.val_every=5"
    assert tail[:3] == ["sweep runs/c interrupted: 3 jobs · 0 finished · 1 interrupted · 2 not started",
                        f"  interrupted: {job.format(0)} (checkpoint at step 18)",
                        f"  not started: {job.format(1)}, {job.format(2)}"]
    assert tail[3].startswith(f"resume: python {ROOT / 'train.py'} -m ") and "seed=0,1,2" in tail[3]
    assert not (tmp_path / "runs" / "c" / ".launches").exists()

    again = run_train(*shlex.split(tail[3].removeprefix("resume: ").split("   (")[0])[2:], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "sweep runs/c: 3 jobs · 3 completed · 0 skipped · 0 failed" in again.stdout
    assert runs.read_summary(tmp_path / "runs" / "c" / job.format(0))["resumed_from_step"] == 18
