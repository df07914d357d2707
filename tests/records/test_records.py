"""Records that last (results/<table>/<job>/), the report from records alone, landmarks, paired statistics and
the bio-rotation phase diagram."""

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import TINY, run_train
from ropelab.analysis import phase, report
from ropelab.analysis.stats import Landmarks, estimate, onset_step, paired_difference, t975
from ropelab.core import runs

SWEEP = ["-m", *TINY, "trainer.max_steps=3", "trainer.val_every=3", "name=tbl", "pos=rope,spectral", "seed=0"]


def test_sweep_keeps_records_skips_them_in_a_fresh_folder_and_reports_from_them_alone(tmp_path):
    record = tmp_path / "results" / "tbl"
    first = run_train(*SWEEP, f"record={record}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    jobs = sorted(p for p in record.iterdir() if p.is_dir())
    assert len(jobs) == 2 and "pos=rope,seed=0" in jobs[0].name and "pos=spectral,seed=0" in jobs[1].name
    for job in jobs:
        names = {p.name for p in job.iterdir()}
        assert {"config.yaml", "summary.json", "metrics.csv"} <= names and "checkpoints" not in names
        summary = runs.read_summary(job)
        assert summary["status"] == "completed"
        assert summary["machine"]["cpu"]["model"] and summary["machine"]["torch"] and "commit" in summary["machine"]
        assert summary["precision"] in ("32-true", "bf16-mixed") and summary["accelerator"] == "cpu"
    assert (jobs[1] / "positional_trace.npz").is_file() and not (jobs[0] / "positional_trace.npz").exists()

    # a fresh clone: no runs/ folder, the records only; the same command runs nothing
    shutil.rmtree(tmp_path / "runs")
    stamps = [(j / "summary.json").stat().st_mtime_ns for j in jobs]
    again = run_train(*SWEEP, f"record={record}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [(j / "summary.json").stat().st_mtime_ns for j in jobs] == stamps
    assert not list((tmp_path / "runs").glob("tbl/pos=*/metrics.csv"))  # nothing trained

    out = report.write_report(record, tmp_path / "rep")
    md = (out / "report.md").read_text()
    assert "| task | rope | spectral |" in md
    assert "### Machines and code" in md and "computation" not in md
    table = pd.read_csv(out / "table.csv")
    assert sorted(table["column"]) == ["rope", "spectral"] and (table["n_completed"] == 1).all()


def test_a_missing_record_runs_only_that_job(tmp_path):
    record = tmp_path / "results" / "tbl"
    assert run_train(*SWEEP, f"record={record}", cwd=tmp_path).returncode == 0
    shutil.rmtree(tmp_path / "runs")
    rope, spectral = sorted(p for p in record.iterdir() if p.is_dir())
    shutil.rmtree(spectral)
    kept = (rope / "summary.json").stat().st_mtime_ns
    assert run_train(*SWEEP, f"record={record}", cwd=tmp_path).returncode == 0
    assert (rope / "summary.json").stat().st_mtime_ns == kept
    assert runs.recorded(spectral)["status"] == "completed"


def test_a_table_that_needs_checkpoints_retrains_a_recorded_job_whose_run_folder_is_gone(tmp_path):
    """make extrapolation evaluates checkpoints: in a fresh clone (records, no runs/) its jobs train again, once."""
    record = tmp_path / "results" / "tbl"
    sweep = [*SWEEP, f"record={record}", "needs_checkpoint=true"]
    assert run_train(*sweep, cwd=tmp_path).returncode == 0
    shutil.rmtree(tmp_path / "runs")
    stamps = sorted((j / "summary.json").stat().st_mtime_ns for j in record.iterdir() if j.is_dir())
    again = run_train(*sweep, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(list((tmp_path / "runs").glob("tbl/*/checkpoints/last.ckpt"))) == 2  # trained again
    renewed = sorted((j / "summary.json").stat().st_mtime_ns for j in record.iterdir() if j.is_dir())
    assert all(new > old for new, old in zip(renewed, stamps))  # each record replaced by its new run's
    third = run_train(*sweep, cwd=tmp_path)  # run folders complete with checkpoints: nothing trains
    assert third.returncode == 0 and "2 skipped" in third.stdout + third.stderr
    assert sorted((j / "summary.json").stat().st_mtime_ns for j in record.iterdir() if j.is_dir()) == renewed


def test_keep_record_replaces_a_record_whole(tmp_path):
    run_dir, record = tmp_path / "run", tmp_path / "rec" / "job"
    run_dir.mkdir()
    runs.write_summary(run_dir, {"status": "completed", "v": 1})
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "last.ckpt").write_text("x")
    runs.keep_record(run_dir, record)
    runs.write_summary(run_dir, {"status": "completed", "v": 2})
    runs.keep_record(run_dir, record)
    assert runs.read_summary(record)["v"] == 2 and not (record / "checkpoints").exists()
    assert sorted(p.name for p in record.parent.iterdir()) == ["job"]  # no staging left behind


# ---------------------------------------------------------------------------------------------- landmarks

def plateau_then_fall(onset: int, steps: int = 400, plateau: float = 1.2, seed: int = 0) -> pd.Series:
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    loss = np.where(t < 20, 3.0 - (3.0 - plateau) * t / 20, plateau)
    loss = np.where(t >= onset, plateau * np.exp(-(t - onset) / 30), loss)
    return pd.Series(loss + rng.normal(0, 0.02, steps), index=t)


@pytest.mark.parametrize("onset", [80, 150, 250])
def test_onset_finds_the_step_the_loss_leaves_its_plateau(onset):
    found = onset_step(plateau_then_fall(onset))
    # 0.9 × plateau is reached ln(1/0.9) × 30 ≈ 3 steps after the fall starts; centred smoothing adds no lag
    assert onset <= found <= onset + 8


def test_onset_is_none_for_a_stall_and_undefined_for_a_short_run():
    flat = pd.Series(np.full(400, 1.07), index=np.arange(400))
    assert math.isnan(onset_step(flat))
    assert onset_step(flat.iloc[:50]) is None


def test_onset_precedes_lockin_on_the_same_curve():
    curve = plateau_then_fall(150)
    smoothed = curve.rolling(10, min_periods=1).mean()
    rule = Landmarks()
    from ropelab.analysis.stats import lockin_step
    assert onset_step(curve, rule) < lockin_step(smoothed, rule)


def test_t_interval_and_paired_difference_on_known_numbers():
    est = estimate([1.0, 2.0, 3.0])
    assert est.mean == 2.0 and est.sd == 1.0 and est.n == 3
    assert est.half_width == pytest.approx(4.303 / math.sqrt(3), rel=1e-4) == t975(2) / math.sqrt(3)
    assert t975(2) == pytest.approx(4.3027, abs=1e-4) and t975(30) == pytest.approx(2.0423, abs=1e-4)
    assert t975(31) == pytest.approx(2.0395, abs=1e-4) and t975(1000) == pytest.approx(1.9623, abs=1e-4)  # not 1.96
    diff = paired_difference({0: 5.0, 1: 7.0, 2: 6.0, 3: 1.0}, {0: 4.0, 1: 5.0, 2: 3.0})  # seed 3 unpaired
    assert (diff.mean, diff.n) == (2.0, 3) and diff.excludes_zero() is False
    tight = paired_difference({0: 1.0, 1: 1.1, 2: 0.9}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert tight.excludes_zero()


# ---------------------------------------------------------------------------------------------- synthetic records

def fake_record(root, name, pos, seed, curve, noise="lower", gap=(100, 200), pos_lr_scale=1.0, machine=None):
    d = root / name
    d.mkdir(parents=True)
    config = {"task": {"name": "bio_rotation", "noise": noise, "gap_min": gap[0], "gap_max": gap[1]},
              "pos": {"name": pos}, "seed": seed, "trainer": {"max_steps": len(curve)},
              "data": {"batch_size": 32}, "optim": {"pos_lr_scale": pos_lr_scale}}
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    pd.DataFrame({"step": curve.index, "train/loss": curve.values}).to_csv(d / "metrics.csv", index=False)
    summary = {"status": "completed", "task": "bio_rotation", "pos": pos, "seed": seed,
               "final": {"val/loss": float(curve.iloc[-1]), "val/acc": 0.5}, "precision": "32-true",
               "machine": machine or {"cpu": {"model": "CPU A", "flags": ["avx2"]}, "torch": "2.13.0",
                                      "commit": "a" * 40, "dirty": False}}
    (d / "summary.json").write_text(json.dumps(summary))


def test_phase_diagram_finds_the_cell_where_the_claim_holds(tmp_path):
    table, sweep = tmp_path / "results" / "bifocal_table1", tmp_path / "results" / "bio_phase"
    for seed in range(3):
        # paper regime only with noise=same: rope stalls, spectral falls at ~150
        fake_record(sweep, f"rope_same_{seed}", "rope", seed, pd.Series(np.full(400, 1.07)), noise="same")
        fake_record(sweep, f"spec_same_{seed}", "spectral", seed, plateau_then_fall(150, seed=seed), noise="same")
        # elsewhere both fall
        fake_record(table, f"rope_lower_{seed}", "rope", seed, plateau_then_fall(140, seed=seed))
        fake_record(table, f"spec_lower_{seed}", "spectral", seed, plateau_then_fall(150, seed=seed + 7))
    out = phase.write([table, sweep], tmp_path / "out")
    md = (out / "phase.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if "| claim" in line}
    assert "claim holds" in rows["same"] and "claim does not hold" in rows["lower"]
    assert (out / "phase_loss.png").is_file() and (out / "phase_diff.png").is_file()
    assert len(pd.read_csv(out / "phase.csv")) == 12


def test_report_warns_when_a_tables_runs_are_not_one_computation(tmp_path):
    root = tmp_path / "tbl"
    curve = plateau_then_fall(150)
    fake_record(root, "a", "rope", 0, curve)
    fake_record(root, "b", "spectral", 0, curve, machine={"cpu": {"model": "CPU B", "flags": ["avx2", "amx_bf16"]},
                                                           "torch": "2.13.0", "commit": "b" * 40, "dirty": True})
    md = (report.write_report(root, tmp_path / "rep") / "report.md").read_text()
    # the one rule (ropelab.core.identity.pairable): two commits no check joins
    assert "⚠ Not one computation: pairs records of 2 code versions" in md and "bbbbbbb+edits" in md
    assert "⚠ 1 runs ran with uncommitted edits" in md


def test_report_compares_single_runs_side_by_side(tmp_path):
    curve = plateau_then_fall(150)
    fake_record(tmp_path / "single", "a_rope", "rope", 0, curve)
    fake_record(tmp_path / "single", "b_spectral", "spectral", 0, curve)
    assert report.main([str(tmp_path / "single" / "a_rope"), str(tmp_path / "single" / "b_spectral"),
                        "--out", str(tmp_path / "cmp"), "--no-attention"]) == 0
    md = (tmp_path / "cmp" / "report" / "report.md").read_text()
    assert "| task | rope | spectral |" in md and (tmp_path / "cmp" / "report" / "curves_bio_rotation.png").is_file()
    with pytest.raises(SystemExit, match="not a run folder"):
        report.main([str(tmp_path / "single" / "a_rope"), str(tmp_path / "nothing")])


def _job(folder, summary=None, config=None, metrics=None):
    folder.mkdir(parents=True)
    if summary is not None:
        (folder / "summary.json").write_text(summary if isinstance(summary, str) else json.dumps(summary))
    if config is not None:
        (folder / "config.yaml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    if metrics is not None:
        (folder / "metrics.csv").write_text(metrics)
    return folder


def test_a_record_reads_its_summary_config_metrics_and_identity(tmp_path):
    from ropelab.core import identity, record

    saved = {"task": {"name": "dyck3", "depth": 3}, "pos": {"name": "rope", "momentum": {"gamma": 0.5}}, "seed": 7,
             "trainer": {"threads": 2}}
    summary = {"status": "completed", "final": {"val/acc": 0.9}, "precision": "32-true", "accelerator": "cpu",
               "machine": {"commit": "0123456789abcdef", "cpu": {"model": "CPU A"}}}
    rec = record.read(_job(tmp_path / "job", summary, saved, "step,train/loss,val/acc\n0,2.0,\n9,1.0,0.9\n"))
    assert rec.completed and rec.final == {"val/acc": 0.9} and rec.seed == 7
    assert rec.config["pos.momentum.gamma"] == 0.5 and rec.config["task.depth"] == 3 and rec.saved_config == saved
    assert rec.commit == "0123456" and rec.hardware == "CPU A"
    assert rec.identity == identity.of_record(summary, saved) and rec.identity["trainer.threads"] == 2
    assert "metrics" not in vars(rec), "metrics.csv is read on first use, not with the record"
    assert rec.metrics["train/loss"].tolist() == [2.0, 1.0] and rec.metrics["val/acc"].isna().tolist() == [True, False]
    on_gpu = {**summary, "accelerator": "cuda", "machine": {**summary["machine"], "gpu": "GPU B"}}
    assert record.read(_job(tmp_path / "gpu_job", on_gpu, saved, "step,train/loss\n0,2.0\n")).hardware == "GPU B"


def test_a_record_gives_its_metrics_digits_as_written_and_may_be_read_as_another_config(tmp_path):
    """Bit-identity compares metrics.csv's strings (a float parse could round 0.10000000000000001 away); the card and
    claims select a record by a config other than its file's (over today's defaults; an analysis row's keys)."""
    from ropelab.core import record

    rec = record.read(_job(tmp_path / "job", {"status": "completed"}, {"seed": 1, "pos": {"name": "rope"}},
                           "step,train/loss\n0,0.10000000000000001\n1,\n"))
    assert rec.metrics_rows() == [["step", "train/loss"], ["0", "0.10000000000000001"], ["1", ""]]
    assert record.read(tmp_path / "nothing").metrics_rows() == []
    seen = record.Record(rec.path, rec.summary, rec.saved_config, "a_table", read_as={"pos.name": "rope", "x": 2})
    assert seen.config == {"pos.name": "rope", "x": 2} and seen.table == "a_table" and seen.completed
    assert rec.config == {"seed": 1, "pos.name": "rope"} and rec.table == ""


def test_missing_or_unreadable_parts_of_a_record_read_as_absent(tmp_path):
    from ropelab.core import record

    broken = record.read(_job(tmp_path / "broken", "{not json", "task: [unclosed", ""))
    assert broken.summary is None and broken.saved_config is None and broken.metrics is None
    assert broken.status == "no summary" and not broken.completed and broken.config == {} and broken.seed is None
    assert broken.identity is None and broken.commit == "unknown" and broken.hardware == "unknown"
    started = record.read(_job(tmp_path / "started", {"status": "running", "seed": 3}))
    assert started.status == "running" and started.seed == 3 and started.metrics is None


def test_the_records_of_a_folder_of_tables_include_nested_tables_and_skip_what_is_no_run(tmp_path):
    from ropelab.core import record

    results = tmp_path / "results"
    done = {"status": "completed"}
    _job(results / "tbl" / "pos=rope,seed=0", done, {"seed": 0})
    _job(results / "tbl" / "pos=rope,seed=1", {"status": "failed"}, {"seed": 1})
    _job(results / "tbl" / "report", done, {"seed": 9})                       # a report folder is no run
    _job(results / "calibration" / "mod_arith" / "budget=100,seed=0", done, {"seed": 0})
    _job(results / "tbl" / "pos=rope,seed=0" / "checkpoints" / "inner", done)  # a run's own folders: not searched
    (results / "calibration" / "README.md").write_text("calibration tables\n")
    (results / "other").symlink_to(results / "tbl")                            # a linked table reads too
    names = [p.relative_to(results).as_posix() for p in record.run_dirs(results)]
    assert names == ["calibration/mod_arith/budget=100,seed=0", "other/pos=rope,seed=0", "other/pos=rope,seed=1",
                     "tbl/pos=rope,seed=0", "tbl/pos=rope,seed=1"]
    assert [r.seed for r in record.under(results / "tbl", completed=True)] == [0]
    assert record.under(tmp_path / "nothing") == []


class _Opens:
    """Pickles as a call of ``open``: unpickling it creates ``path``, as a downloaded checkpoint could run code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def test_a_checkpoint_carrying_a_pickled_callable_is_refused_before_it_runs(tmp_path):
    import shutil

    import torch

    from conftest import ROOT
    from ropelab.analysis.attention_maps import RunFolderError, load_run_model
    from ropelab.core.record import UnsafeCheckpoint, checkpoint_weights
    from ropelab.experiments.extrapolate import load_weights

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(next((ROOT / "results" / "bifocal_table1").glob("pos=rope,*/config.yaml")), run / "config.yaml")
    ran = tmp_path / "ran"
    torch.save({"state_dict": {"model.w": torch.zeros(1)}, "hook": _Opens(ran)}, run / "checkpoints" / "last.ckpt")
    with pytest.raises(UnsafeCheckpoint, match=r"last\.ckpt: refused, .*open.*could run code"):
        checkpoint_weights(run / "checkpoints" / "last.ckpt")
    with pytest.raises(RunFolderError, match="refused"):
        load_run_model(run)
    with pytest.raises(UnsafeCheckpoint):
        load_weights(torch.nn.Linear(1, 1), run)
    assert not ran.exists()
    torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)  # what the analyses did before
    assert ran.exists()


def test_a_checkpoint_of_weights_loads_the_models_entries(tmp_path):
    import torch

    from ropelab.core.record import checkpoint_weights

    torch.save({"state_dict": {"model.w": torch.ones(2), "other": torch.zeros(1)}, "global_step": 5,
                "hyper_parameters": {"lr": 1e-3}}, tmp_path / "last.ckpt")
    assert list(checkpoint_weights(tmp_path / "last.ckpt")) == ["w"]
