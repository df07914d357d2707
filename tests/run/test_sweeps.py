"""Sweeps that become tables: experiment presets, launchers, the report, W&B offline."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import tasks
from conftest import HANG_GUARD_S, ROOT, TINY, run_train, wandb_records
from ropelab.analysis import attention_maps, report
from ropelab.analysis.stats import Landmarks, lockin_step
from ropelab.core import positional
from ropelab.core.cli import axis_values
from ropelab.core.model import LlamaConfig, build_model

CONF = ROOT / "conf"
CALIBRATIONS = sorted(p.stem for p in (CONF / "experiment").glob("calibrate_*.yaml"))  # budget grids, not tables
CONFIRMATIONS = sorted(p.stem for p in (CONF / "experiment").glob("confirm_*.yaml"))  # fresh seeds of a table
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")
                 if p.stem not in CALIBRATIONS and p.stem not in CONFIRMATIONS)
EXPECTED = {  # preset → sweep axes (as sets) that the papers' protocols call for
    "bifocal_table1": {"task": {"dyck3", "bio_rotation", "mod_arith"}, "pos": {"rope", "spectral", "bifocal"}},
    "bifocal_calibrated_mod_arith": {"task": {"mod_arith"}, "pos": {"rope", "spectral", "bifocal"}},
    "bifocal_calibrated_dyck3": {"task": {"dyck3"}, "pos": {"rope", "spectral", "bifocal"}},
    "pope_indirect": {"task": {"indirect_indexing"},
                      "pos": {"rope", "pope", "rope_half", "alibi", "learned_abs", "sinusoidal"}},
    # issue 22: the size ladder (task.rung) and Table 9's baselines at one rung
    "pope_ladder": {"task": {"indirect_indexing"}, "pos": {"rope", "pope"}, "task.rung": {"1", "2", "3"}},
    "pope_ladder_b256": {"task": {"indirect_indexing"}, "pos": {"rope", "pope"}, "task.rung": {"1", "2"}},
    "pope_baselines": {"task": {"indirect_indexing"},
                       "pos": {"rope", "pope", "rope_half", "alibi", "learned_abs", "sinusoidal"}},
    "momentum_gamma": {"task": {"assoc_recall", "variable_tracking", "global_counting", "mean_pooling"},
                       "pos": {"rope"}, "pos.momentum.gamma": {"0", "0.3", "0.5", "0.7", "1.0", "2.0"}},
    "momentum_freqs": {"task": {"assoc_recall", "variable_tracking", "global_counting", "mean_pooling"},
                       "pos": {"rope"}, "pos.freqs": {"geometric", "single@1", "single@0.1", "single@0.01",
                                                      "bandpass@low", "bandpass@mid", "bandpass@high"},
                       "pos.momentum.gamma": {"0", "2"}},
    "momentum_calibrated_assoc_recall": {"task": {"assoc_recall"}, "pos": {"rope"}, "pos.momentum.gamma": {
        "0", "0.01", "0.02", "0.05", "0.1", "0.2", "0.3", "2.0"}},
    "momentum_calibrated_global_counting": {"task": {"global_counting"}, "pos": {"rope"},
                                            "pos.momentum.gamma": {"0", "0.1", "0.3", "1.0", "2.0"}},
    "momentum_calibrated_global_counting_freqs": {"task": {"global_counting"}, "pos": {"rope"}, "pos.freqs": {
        "single@1", "single@0.1", "single@0.01", "bandpass@low", "bandpass@mid", "bandpass@high"},
        "pos.momentum.gamma": {"0", "2.0"}},
    "momentum_calibrated_variable_tracking": {"task": {"variable_tracking"}, "pos": {"rope"},
                                              "pos.momentum.gamma": {"0", "0.1", "0.3", "1.0", "2.0"}},
    # issue 38: the momentum options' table (its other variants are further commands into the same sweep) and the
    # base table at calibrated settings, a long task and a local one
    **{f"momentum_options_{task}": {"task": {task}, "pos": {"rope"}, "pos.momentum.gamma": {"0", "1.0", "2.0"}}
       for task in ("assoc_recall", "variable_tracking", "global_counting", "mean_pooling")},
    "rope_base": {"task": {"bio_rotation"}, "pos": {"rope", "spectral"},
                  "pos.base": {"1000", "5000", "10000", "50000", "100000"}},
    "rope_base_local": {"task": {"assoc_recall"}, "pos": {"rope", "spectral"},
                        "pos.base": {"1000", "5000", "10000", "50000", "100000"}},
    "bio_phase": {"task.noise": {"lower", "same"}, "pos": {"rope", "spectral"}},
    # PoPE's Figure 2 on code: every scheme; rope + PI / NTK / YaRN are evaluation variants of the rope runs
    "extrapolation_code_lm": {"task": {"code_lm"}, "pos": {"rope", "pope", "spectral", "bifocal", "alibi", "nope",
                                                          "learned_abs", "sinusoidal"}},
    "extrapolation_code_lm_ft": {"task": {"code_lm"}, "pos": {"rope", "pope", "spectral", "bifocal", "alibi", "nope",
                                                             "sinusoidal"}},  # learned_abs: no row past its table
}

# tables planned after a calibration on seeds 0–2: their own seeds, disjoint from it (issue 38)
FRESH_SEEDS = {preset: {"300", "301", "302"} for preset in EXPECTED
               if preset.startswith(("momentum_options_", "rope_base"))}


def _compose(*overrides, hydra: bool = True):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra)


def _axes(params) -> dict[str, set[str]]:
    return {k: set(map(str, axis_values(k, values))) for k, values in params.items()}


# ------------------------------------------------------------------------------------------- presets

def test_every_preset_is_tested():
    assert set(PRESETS) == set(EXPECTED)


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_with_its_sweep_and_budget(preset):
    cfg = _compose(f"experiment={preset}")
    assert cfg.name == preset
    axes = _axes(cfg.hydra.sweeper.params)
    assert axes.pop("seed") == FRESH_SEEDS.get(preset, {"0", "1", "2"})
    assert axes == EXPECTED[preset]
    assert cfg.trainer.max_steps >= 400 and cfg.model.d_model == 128 and cfg.model.n_heads == 4
    text = (CONF / "experiment" / f"{preset}.yaml").read_text()
    assert text.startswith("# @package _global_") and "Budget" in text
    assert f"{cfg.trainer.max_steps:,} steps × batch {cfg.data.batch_size}" in text


@pytest.mark.parametrize("preset", CONFIRMATIONS)
def test_confirmation_is_its_table_on_fresh_seeds_only(preset):
    """A confirmation retrains a calibrated table on seeds no calibration or earlier run used: every other key of the
    job is its base preset's, so its records differ from the base's only by seed (and where they are kept)."""
    base = yaml.safe_load((CONF / "experiment" / f"{preset}.yaml").read_text())["defaults"][0]
    mine, theirs = _compose(f"experiment={preset}"), _compose(f"experiment={base}")
    my_seeds, their_seeds = (set(_axes(c.hydra.sweeper.params).pop("seed")) for c in (mine, theirs))
    assert my_seeds and not my_seeds & their_seeds and min(map(int, my_seeds)) >= 100
    assert mine.record != theirs.record and mine.record.startswith("results/")
    # the base's grid, or a slice of it (a confirmation of one rung)
    my_axes, their_axes = ({k: v for k, v in _axes(c.hydra.sweeper.params).items() if k != "seed"} for c in (mine, theirs))
    assert my_axes.keys() == their_axes.keys() and all(my_axes[k] and my_axes[k] <= their_axes[k] for k in my_axes)
    mine, theirs = ({k: v for k, v in OmegaConf.to_container(c).items() if k not in ("name", "record", "hydra")}
                    for c in (mine, theirs))
    assert mine == theirs


@pytest.mark.parametrize("preset", CALIBRATIONS)
def test_calibration_preset_is_a_budget_grid_of_one_task_recorded_apart(preset):
    grid = preset.removeprefix("calibrate_")  # the task's name, or it and a suffix for a further grid of it
    cfg = _compose(f"experiment={preset}")
    defaults = yaml.safe_load((CONF / "experiment" / f"{preset}.yaml").read_text())["defaults"]
    task = next(d["override /task"] for d in defaults if isinstance(d, dict) and "override /task" in d)
    assert grid == task or grid.startswith(f"{task}_")
    assert {"override /pos": "rope"} in defaults
    assert cfg.name == f"calibration/{grid}" and cfg.record == f"results/calibration/{grid}"
    axes = _axes(cfg.hydra.sweeper.params)
    assert len(axes.pop("trainer.max_steps")) >= 2 and len(axes.pop("seed")) >= 2
    assert "task" not in axes and "pos" not in axes, "one task and the baseline scheme: the other axes are sizes"
    text = (CONF / "experiment" / f"{preset}.yaml").read_text()
    assert text.startswith("# @package _global_") and "Budget" in text


def _missing_choices(params) -> list[str]:
    """``group=choice`` of a sweep's task and pos axes that name no conf/<group>/<choice>.yaml."""
    return sorted({f"{group}={choice}" for group, choices in _axes(params).items() if group in ("task", "pos")
                   for choice in choices if not (CONF / group / f"{choice}.yaml").is_file()})


def test_preset_task_and_scheme_choices_exist():
    assert _missing_choices({"task": "bio_rotation,bio_rotatoin", "pos": "rope"}) == ["task=bio_rotatoin"]
    missing = [m for preset in PRESETS for m in _missing_choices(_compose(f"experiment={preset}").hydra.sweeper.params)]
    assert not missing, f"presets name choices that do not exist: {', '.join(missing)}"


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_jobs_pass_the_config_check(preset):
    """Every value of every axis, with the other axes at their first value, composes and passes check_config
    (which builds the task and the scheme): a preset cannot set a key that some job's scheme refuses."""
    from ropelab.core import build, config

    axes = {k: [str(v) for v in axis_values(k, vals)]
            for k, vals in _compose(f"experiment={preset}").hydra.sweeper.params.items()}
    jobs = {tuple(f"{k}={v if k == key else vals[0]}" for k, vals in axes.items()) for key in axes for v in axes[key]}
    if preset in ("pope_indirect", "pope_baselines"):
        jobs.add(("task=indirect_indexing", "pos=alibi", "seed=0", "pos.heads_fraction=0.5"))  # `make pope`
        jobs.add(("task=indirect_indexing", "pos=pope", "seed=0", "pos.delta_init=uniform"))  # `make pope-table`
    if preset == "pope_indirect":  # `make pope-gpu`: the paper's fixed training set
        jobs.add(("task=indirect_indexing", "pos=rope", "seed=0", "data.train_size=1000000"))
    # the fine-tune starts from the pretraining sweep's runs, refused until they exist
    # (tests/analyses/test_extrapolation.py)
    extra = ["init_from=null"] if preset == "extrapolation_code_lm_ft" else []
    if preset == "extrapolation_code_lm_ft":  # `make extrapolation`: YaRN + ft
        jobs.add(("task=code_lm", "pos=rope", "seed=0", "pos.scaling=yarn", "pos.scaling_factor=4",
                  "pos.original_max_len=128"))
    for job in sorted(jobs):
        build.check_config(config.compose([f"experiment={preset}", *job, *extra]))


@pytest.mark.filterwarnings(r"ignore:\s*'hydra/launcher/joblib' is validated")  # conf/ shadows the plugin's, on purpose
@pytest.mark.parametrize("launcher, target", [
    (None, "hydra._internal.core_plugins.basic_launcher.BasicLauncher"),
    ("joblib", "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"),
    ("slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
    ("submitit_slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
    ("packed", "hydra_plugins.ropelab_launcher.PackedLauncher"),  # ropelab's: tests/run/test_packed_launcher.py
])
def test_launcher_configs_compose_and_are_selected(launcher, target):
    cfg = _compose("experiment=bifocal_table1", *([f"hydra/launcher={launcher}"] if launcher else []))
    assert cfg.hydra.launcher._target_ == target
    if launcher == "joblib":
        assert cfg.hydra.launcher.n_jobs == 2
    if launcher == "packed":
        assert cfg.hydra.launcher.pack == 8
    if launcher == "slurm":
        assert cfg.hydra.launcher.cpus_per_task == 8 and cfg.hydra.launcher.timeout_min > 0
        assert cfg.hydra.launcher.submitit_folder == "runs/bifocal_table1/.submitit/%j"
    assert cfg.hydra.sweep.dir == "runs/bifocal_table1"


JOBLIB_APP = """
import json, os, sys
from pathlib import Path
import hydra
from hydra.core.hydra_config import HydraConfig

@hydra.main(config_path=sys.argv.pop(1), config_name="config", version_base="1.3")
def app(cfg):
    from ropelab.core.machine import threads  # imported in the worker only

    out = Path(HydraConfig.get().runtime.output_dir) / "threads.json"
    out.write_text(json.dumps({"threads": threads(cfg.trainer.threads), "pid": os.getpid(),
                               "n_jobs": HydraConfig.get().launcher.n_jobs}))

if __name__ == "__main__":
    print("main pid", os.getpid())
    app()
"""


def test_joblib_jobs_see_hydra_config_and_split_the_cores(tmp_path):
    """In a joblib worker, HydraConfig is set, so ropelab.core.machine.threads gives each job cores // n_jobs threads."""
    app = tmp_path / "app.py"
    app.write_text(JOBLIB_APP)
    result = subprocess.run([sys.executable, str(app), str(CONF), "-m", "hydra/launcher=joblib", "seed=0,1",
                             f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr[-3000:]
    main_pid = int(result.stdout.split("main pid")[1].split()[0])
    found = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/threads.json"))]
    cores = len(os.sched_getaffinity(0))
    assert len(found) == 2
    for job in found:
        assert job["n_jobs"] == 2 and job["pid"] != main_pid
        assert job["threads"] == max(1, cores // 2)


# ------------------------------------------------------------------------------------------- a tiny real sweep

@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory) -> Path:
    """bifocal_table1 cut to bio_rotation × {rope, spectral} × seed 0, 3 tiny steps, W&B offline, basic launcher
    (so both jobs share one process: each must still get its own, finished W&B run)."""
    cwd = tmp_path_factory.mktemp("sweep")
    result = run_train("-m", "experiment=bifocal_table1", "hydra.sweeper.params.task=bio_rotation",
                       "hydra.sweeper.params.pos='rope,spectral'", "hydra.sweeper.params.seed=0", "logger=wandb",
                       "trainer.max_steps=3", "trainer.val_every=1", *TINY, cwd=cwd, env={"WANDB_MODE": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    return cwd / "runs" / "bifocal_table1"


def test_tiny_multirun_lands_in_override_named_folders(tiny_sweep):
    jobs = sorted(p for p in tiny_sweep.iterdir() if p.is_dir())
    assert len(jobs) == 2
    for job, pos in zip(jobs, ("rope", "spectral")):
        parts = job.name.split(",")
        assert {f"pos={pos}", "seed=0", "task=bio_rotation"} <= set(parts)  # as the running sweeps name them
        assert not any(p.startswith(("experiment=", "logger=", "name=", "trainer.threads=")) for p in parts)
        assert json.loads((job / "summary.json").read_text())["status"] == "completed"


def test_report_builds_from_the_tiny_sweep(tiny_sweep, tmp_path):
    out = report.write_report(tiny_sweep, tmp_path / "report")
    md = (out / "report.md").read_text()
    table = pd.read_csv(out / "table.csv")
    assert list(table["task"]) == ["bio_rotation", "bio_rotation"]
    assert list(table["column"]) == ["rope", "spectral"]
    assert (table["n_completed"] == 1).all() and table["val/loss_mean"].notna().all()
    assert "| bio_rotation |" in md and "final val/loss" in md and "lock-in step" in md
    assert (out / "table.tex").read_text().count(r"\begin{tabular}") >= 4
    assert len(pd.read_csv(out / "runs.csv")) == 2
    assert (out / "curves_bio_rotation.png").stat().st_size > 1000
    assert (out / "params_bio_rotation_spectral.png").is_file()  # spectral logs Ω, A, Φ; rope has none


def test_report_cli_writes_into_the_sweep(tiny_sweep, tmp_path):
    sweep = tmp_path / "copy"
    shutil.copytree(tiny_sweep, sweep, ignore=shutil.ignore_patterns("wandb"))
    result = subprocess.run([sys.executable, "-m", "ropelab", "report", str(sweep)], capture_output=True, text=True,
                            timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (sweep / "report" / "report.md").is_file() and (sweep / "report" / "table.csv").is_file()


def test_wandb_offline_one_finished_run_per_job(tiny_sweep):
    ids = set()
    for job in sorted(p for p in tiny_sweep.iterdir() if p.is_dir()):
        offline = list((job / "wandb").glob("offline-run-*"))
        assert len(offline) == 1, offline
        records = wandb_records(next(offline[0].glob("run-*.wandb")))
        keys = {item.key or "/".join(item.nested_key) for r in records if r.HasField("history")
                for item in r.history.item}
        assert {"train/loss", "val/loss", "val/acc", "test/acc", "ood/acc"} <= keys  # test metrics: finished last
        run = next(r.run for r in records if r.HasField("run"))
        pos = "spectral" if "pos=spectral" in job.name else "rope"
        assert run.run_group == "bifocal_table1" and run.display_name == job.name
        assert {"task=bio_rotation", f"pos={pos}", "seed=0", "gamma=0.0", "base=10000"} <= set(run.tags)
        assert any(u.key == "pos" for u in run.config.update)  # the resolved config
        if pos == "spectral":
            assert any(k.startswith("pos/omega/") for k in keys) and any(k.startswith("pos/phase/") for k in keys)
        exits = [r.exit.exit_code for r in records if r.HasField("exit")]
        assert exits == [0]
        ids.add(run.run_id)
    assert len(ids) == 2


def test_attention_maps_of_a_gamma_sweep(tiny_sweep, tmp_path):
    """Two copies of the rope job as γ = 0 and γ = 2 (rope has no learned parameters, so the checkpoint loads
    under either config): the report detects γ as the axis, computes relative degradation, draws the maps."""
    rope = next(p for p in tiny_sweep.iterdir() if "pos=rope" in p.name)
    sweep = tmp_path / "momentum"
    for gamma, acc in ((0, 0.8), (2, 0.6)):
        job = sweep / f"pos.momentum.gamma={gamma},pos=rope,seed=0,task=bio_rotation"
        shutil.copytree(rope, job, ignore=shutil.ignore_patterns("wandb"))
        cfg = yaml.safe_load((job / "config.yaml").read_text())
        cfg["pos"]["momentum"]["gamma"] = gamma
        (job / "config.yaml").write_text(yaml.safe_dump(cfg))
        summary = json.loads((job / "summary.json").read_text())
        summary["final"]["val/acc"] = acc
        (job / "summary.json").write_text(json.dumps(summary))
    out = report.write_report(sweep, tmp_path / "report")
    md = (out / "report.md").read_text()
    assert "γ=0" in md and "γ=2" in md
    assert "Relative degradation" in md and "25.0" in md and "9.8" in md  # ours vs the paper's geometric value
    assert (out / "attention_bio_rotation.png").stat().st_size > 1000
    assert "could not draw" not in md
    weights, tokens = attention_maps.run_attention(sweep / "pos.momentum.gamma=2,pos=rope,seed=0,task=bio_rotation")
    assert weights.shape[-1] == weights.shape[-2] == len(tokens)
    assert np.allclose(weights.sum(-1), 1, atol=1e-5) and np.allclose(np.triu(weights, 1), 0)


@pytest.mark.parametrize("pos", [{"name": "rope", "momentum": {"gamma": 0.5}},
                                 {"name": "spectral", "phase_std": 0.3, "momentum": {"gamma": 1.0}}])
def test_attention_weights_reproduce_the_model(pos):
    torch.manual_seed(0)
    model = build_model(LlamaConfig(vocab_size=11, d_model=32, n_layers=2, n_heads=2, mlp_hidden=64, max_len=40),
                        pos).eval()
    idx = torch.randint(0, 11, (2, 17))
    for layer in range(2):
        rebuilt, own = attention_maps.attention_output(model, idx, layer)
        torch.testing.assert_close(rebuilt, own, atol=1e-5, rtol=1e-4)
    w = attention_maps.attention_weights(model, idx)
    assert w.shape == (2, 2, 2, 17, 17) and torch.allclose(w.sum(-1), torch.ones(()), atol=1e-5)


# ------------------------------------------------------------------------------------------- synthetic sweeps

def _fake_run(root: Path, pos: str, seed: int, status: str | None, loss: np.ndarray | None = None,
              final: dict | None = None, task: str = "bio_rotation", **extra) -> Path:
    run = root / f"pos={pos},seed={seed},task={task}"
    run.mkdir(parents=True)
    cfg = {"task": {"name": task, "gap_min": 100}, "pos": {"name": pos, "base": 10000, "momentum": {"gamma": 0.0}},
           "seed": seed, "name": root.name, "trainer": {"max_steps": 400, "threads": 1}, "data": {"batch_size": 32},
           **extra}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    if loss is not None:
        rows = ["step,train/loss,val/loss,val/acc"] + [
            f"{t},{v},{v if t % 50 == 49 else ''},{0.5 if t % 50 == 49 else ''}" for t, v in enumerate(loss)]
        (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    if status:
        summary = {"status": status, "task": task, "pos": pos, "seed": seed}
        if status == "completed":
            summary["final"] = final or {"val/loss": float(loss[-1]), "val/acc": 0.5, "train/loss": float(loss[-1])}
        if status == "failed":
            summary["error"] = "RuntimeError: boom"
        (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_report_marks_failed_running_and_missing_runs(tmp_path):
    sweep = tmp_path / "synthetic"
    flat = np.full(400, 1.07)
    drop = flat.copy()
    drop[150:] = 0.01  # locks in: the 10-step trailing mean falls below 0.535 at step 155
    _fake_run(sweep, "rope", 0, "completed", flat)
    _fake_run(sweep, "rope", 1, "completed", flat + 0.02)
    _fake_run(sweep, "rope", 2, "failed", flat[:30])
    _fake_run(sweep, "spectral", 0, "completed", drop)
    _fake_run(sweep, "spectral", 1, None)                 # started, never wrote a summary
    _fake_run(sweep, "spectral", 2, "running", drop[:200])
    job = sweep / "pos=spectral,seed=3,task=bio_rotation"  # Hydra made the folder, run() never started
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("- task=bio_rotation\n- pos=spectral\n- seed=3\n")
    out = report.write_report(sweep, tmp_path / "report")

    table = pd.read_csv(out / "table.csv").set_index("column")
    assert table.loc["rope", "n_runs"] == 3 and table.loc["rope", "n_failed"] == 1
    assert table.loc["rope", "n_completed"] == 2
    assert table.loc["rope", "val/loss_mean"] == pytest.approx(1.08)
    # the folder that never started training (seed 3) is listed apart, not counted in a cell
    assert table.loc["spectral", "n_runs"] == 3 and table.loc["spectral", "n_completed"] == 1
    assert table.loc["spectral", "n_running"] == 1 and table.loc["spectral", "n_no_summary"] == 1
    assert table.loc["spectral", "lockin_step_mean"] == 155
    assert table.loc["rope", "lockin_step_n"] == 0 and table.loc["rope", "lockin_step_defined"] == 2
    assert table.loc["spectral", "paper_lockin_step_mean"] == 150  # from conf/paper_values.yaml

    md = (out / "report.md").read_text()
    assert "⚠ 1 failed" in md and "⚠ 1 running, 1 no summary" in md
    assert "### Folders that never started training" in md and "`pos=spectral,seed=3,task=bio_rotation`" in md
    assert "1.080 ± 0.014 (n=2) ⚠ 1 failed · paper 1.07" in md
    assert "none (0/2)" in md and "155 (1/1)" in md
    assert "RuntimeError: boom" in md  # the failed run's error is listed
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 6 and set(runs["status"]) == {"completed", "failed", "running", "no summary"}


def test_report_detects_the_swept_axes(tmp_path):
    """Keys that vary within a task × scheme pair are axes (pos.base); scheme options (phase_std) and keys only
    some runs have (trainer.compile) are not."""
    sweep = tmp_path / "bases"
    loss = np.full(100, 1.0)
    for base in (1000, 10000):
        for pos in ("rope", "spectral"):
            run = _fake_run(sweep / str(base), pos, 0, "completed", loss, final={"val/acc": base / 1e5})
            cfg = yaml.safe_load((run / "config.yaml").read_text())
            cfg["pos"]["base"] = base
            if pos == "spectral":
                cfg["pos"]["phase_std"] = 1e-3
            if base == 10000:
                cfg["trainer"]["compile"] = False  # a key older runs lack: schema drift, not an axis
            (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    swept = report.Sweep(sweep, Landmarks())
    assert swept.col_keys == ["pos.name", "pos.base"]
    assert swept.columns() == ["rope base=1000", "rope base=10000", "spectral base=1000", "spectral base=10000"]


@pytest.mark.parametrize("loss, expected", [
    (np.r_[np.full(150, 1.0), np.full(250, 0.1)], 155),
    (np.full(400, 1.0), math.nan),
    (np.r_[np.full(150, 1.0), np.full(200, 0.1), np.full(50, 1.0)], math.nan),  # fell, then came back up
    (np.full(50, 1.0), None),                                                    # ends inside the plateau window
])
def test_lockin_step(loss, expected):
    metrics = pd.DataFrame({"step": np.arange(len(loss)), "train/loss": loss})
    got = lockin_step(report.smoothed_train_loss(metrics, 10), Landmarks())
    if expected is None:
        assert got is None
    elif math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected


def test_report_shows_exact_match_per_group_mean_sd_and_n_and_reads_old_records(tmp_path):
    sweep = tmp_path / "synthetic"
    flat = np.full(400, 1.07)
    for seed, (zero, one) in enumerate([(1.0, 0.2), (1.0, 0.4)]):
        run = _fake_run(sweep, "pope", seed, "completed", flat, task="indirect_indexing")
        summary = json.loads((run / "summary.json").read_text())
        summary["per_group"] = {"group": "shift", "metric": "exact",
                                "test": {"0": {"exact": zero, "examples": 10}, "-1": {"exact": one, "examples": 10}}}
        (run / "summary.json").write_text(json.dumps(summary))
    old = _fake_run(sweep, "rope", 0, "completed", flat, task="indirect_indexing")
    summary = json.loads((old / "summary.json").read_text())
    summary["per_group"] = {"test": {"0": 0.9}}   # older code: no group name, bare fractions
    (old / "summary.json").write_text(json.dumps(summary))
    md = (report.write_report(sweep, tmp_path / "report") / "report.md").read_text()
    block = md.split("### indirect_indexing: test exact match (%) per length / shift")[1].split("##")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in block.splitlines() if line.startswith("| ") and not line.startswith("| length")}
    assert rows["-1"] == ["—", "30.0 ± 14.1 (n=2)"]     # columns: rope, pope; sorted as numbers, -1 first
    assert rows["0"] == ["90.0 (n=1)", "100.0 ± 0.0 (n=2)"]
    assert list(rows) == ["-1", "0"]
