"""Issue 39, item 3: nothing typed corrupts a record or a run — rerun=true of a recorded job trains elsewhere, a
resume (or a skip) with other settings is one line with the run's files untouched, and a sweep with one bad value
trains nothing."""

import json
import sys

import pytest

from conftest import ROOT, TINY, run_train, torch_threads_kept
from ropelab.core import runs
from ropelab.core.config import compose
from ropelab.core.errors import ConfigError
from ropelab.core.bookkeeping import check_sweep, sweep_jobs
from ropelab.core.train import run

STEPS = ["task=mod_arith", "trainer.max_steps=4", "trainer.val_every=2", "trainer.precision=32-true"]


def files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and p.name != runs.LOCK}


@pytest.fixture
def recorded(tmp_path):
    table, run_dir = tmp_path / "table", tmp_path / "runs" / "job"
    with torch_threads_kept():
        assert run(compose([*TINY, *STEPS, f"record={table}"]), run_dir)["status"] == "completed"
    return table / run_dir.name, run_dir


def test_rerun_of_a_recorded_job_trains_in_its_run_folder_and_leaves_the_record(recorded):
    record, run_dir = recorded
    before = files(record)
    with torch_threads_kept():
        summary = run(compose([*TINY, *STEPS, f"record={record.parent}", "rerun=true"]), run_dir)
    assert summary["status"] == "completed" and "record" not in summary
    assert summary["trial"].startswith(f"rerun=true of a job recorded in {record}")
    assert files(record) == before


def test_nothing_trains_in_results():
    with pytest.raises(ConfigError, match=r"results/x is under results/, where records are kept, never trained in"):
        run(compose([*TINY, *STEPS]), ROOT / "results" / "x")
    assert not (ROOT / "results" / "x").exists()


@pytest.mark.parametrize("status", ["completed", "interrupted"])
def test_a_resume_with_other_settings_names_them_and_leaves_the_run(recorded, status):
    _, run_dir = recorded
    if status == "interrupted":  # a run stopped with its checkpoint: a resume would load it into another model
        summary = json.loads((run_dir / "summary.json").read_text())
        (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    before = files(run_dir)
    cfg = compose([*TINY, *STEPS, "pos=spectral", "optim.fused=true", f"resume={run_dir}"])
    with pytest.raises(ConfigError) as err:
        run(cfg, run_dir)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"resume={runs.shorter(run_dir)} was trained with other settings (")
    assert "pos.name: 'rope' → 'spectral'" in message and "optim.fused: false → true" in message
    assert files(run_dir) == before


def test_a_resume_with_the_same_settings_is_no_mismatch(recorded):
    _, run_dir = recorded
    with torch_threads_kept():
        summary = run(compose([*TINY, *STEPS, f"resume={run_dir}", "trainer.progress=off"]), run_dir)
    assert summary["skipped"].startswith("already completed")


def test_a_sweeps_jobs_are_those_hydra_launches():
    jobs = sweep_jobs(["experiment=bifocal_table1", "seed=0,1", "trainer.max_steps=2"])
    assert len(jobs) == 3 * 3 * 2
    assert ["task=dyck3", "pos=rope", "seed=0", "experiment=bifocal_table1", "trainer.max_steps=2"] in jobs


def test_a_sweeps_job_folders_are_named_as_hydra_names_them_and_not_guessed_under_a_custom_subdir():
    from omegaconf import open_dict

    from ropelab.core.config import compose_with_hydra
    from ropelab.core.sweep_summary import job_names

    def launched(*overrides):
        config = compose_with_hydra(["experiment=bifocal_table1", *overrides])
        with open_dict(config):   # what Hydra hands the callback of `train.py -m experiment=… seed=0,1 …`
            config.hydra.overrides.task = ["experiment=bifocal_table1", "seed=0,1", "trainer.max_steps=2", *overrides]
        return job_names(config)

    names = launched()
    assert len(names) == 3 * 3 * 2 and names[:3] == ["pos=rope,seed=0,task=dyck3,trainer.max_steps=2",
                                                     "pos=rope,seed=1,task=dyck3,trainer.max_steps=2",
                                                     "pos=spectral,seed=0,task=dyck3,trainer.max_steps=2"]
    assert launched("hydra.sweep.subdir=seed${seed}") == []   # each job notes its own folder


def test_every_job_of_a_sweep_is_checked_before_the_first_trains(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        check_sweep(["-m", "task=mod_arith", "pos.base=1000,-5", *TINY])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: [task=mod_arith pos.base=-5 ") and "pos.base=-5 is invalid: a number > 1" in err
    check_sweep(["-m", "task=mod_arith", "pos.base=1000,500", *TINY])  # good values: it returns
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_sweep_with_one_bad_value_trains_nothing(tmp_path):
    result = run_train("-m", "task=mod_arith", "pos.base=1000,-5", *TINY, "trainer.max_steps=2", cwd=tmp_path)
    assert result.returncode == 2
    assert "pos.base=-5 is invalid" in result.stderr and "nothing trained" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_resume_into_a_record_is_refused_before_hydra_writes_there(monkeypatch, capsys):
    from ropelab.core import train

    record = ROOT / "results" / "bifocal_table1" / "pos=rope,seed=0,task=mod_arith"
    before = files(record)
    monkeypatch.setattr(sys, "argv", ["train.py", f"resume='{record.relative_to(ROOT)}'", "rerun=true"])
    with pytest.raises(SystemExit) as stop:
        train.entry()
    assert stop.value.code == 2
    assert "a folder under results/ holds a record, never trained in" in capsys.readouterr().err
    assert files(record) == before and not (record / ".hydra").exists()
