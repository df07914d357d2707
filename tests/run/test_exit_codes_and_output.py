"""A first hour that just works (issue 13): honest exit codes, one summary per sweep, no leftover folders,
progress by default, an end-of-run line with every split, quiet output, presets that do what they say."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest
from hydra import compose, initialize_config_dir

from conftest import HANG_GUARD_S, ROOT, TINY, run_train
from ropelab.core import config, runs
from ropelab.core.build import check_config
from ropelab.core.cli import axis_values
from ropelab.core.errors import ConfigError
from ropelab.core.bookkeeping import FINAL_METRICS, check_single_run_of_preset

CONF = str(ROOT / "conf")
PRESETS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
HARMLESS = ("validated against ConfigStore schema", "LeafSpec", "litlogger", "anonymous setting", "GPU available")


def composed(*overrides, hydra=False):
    """The config a run gets, or with ``hydra`` Hydra's own node beside it (names left to Hydra to resolve)."""
    if not hydra:
        return config.compose(overrides)
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def job_folder(*overrides) -> str:
    """The folder name Hydra gives a multirun job with these overrides."""
    return composed(*overrides, hydra=True).hydra.job.override_dirname


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.stderr, result.stderr[-2000:]
    return lines[0]


# ------------------------------------------------------------------------- single runs

def test_a_single_run_ends_with_every_split_in_order_and_the_report_command(tmp_path):
    """max_steps < val_every used to drop train/loss; rope writes no positional trace; train.log holds the log."""
    result = run_train(*TINY, "trainer.max_steps=3", "trainer.val_every=5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = next((tmp_path / "runs" / "single").iterdir())
    metrics_line = next(line for line in result.stdout.splitlines() if line.startswith("metrics: "))
    assert [item.split("=")[0] for item in metrics_line.removeprefix("metrics: ").split()] == list(FINAL_METRICS)
    assert "n/a" not in metrics_line
    assert f"run: {run_dir}" in result.stdout
    assert f"next: python -m ropelab report runs/single/{run_dir.name}" in result.stdout

    summary = runs.read_summary(run_dir)
    assert set(FINAL_METRICS) <= set(summary["final"])
    per_group = summary["per_group"]
    assert per_group["group"] == "gap" and per_group["metric"] == "exact"
    for split in ("test", "ood"):
        assert sum(bucket["examples"] for bucket in per_group[split].values()) == 8  # data.test_size / ood_size
        assert all(0 <= bucket["exact"] <= 1 for bucket in per_group[split].values())
    assert not (run_dir / "positional_trace.npz").exists()  # rope has no learnable positional parameters

    log = (run_dir / "train.log").read_text()
    assert "device cpu" in log and metrics_line in log
    for noise in HARMLESS:
        assert noise not in result.stdout + result.stderr


@pytest.mark.parametrize("overrides, message", [
    (["optim.lr=0"], "optim.lr=0 is invalid: a number > 0"),
    (["trainer.max_steps=abc"], "trainer.max_steps='abc' is invalid: an integer >= 1"),
    (["experiment=pope_indirect"], "run it with -m"),
])
def test_a_rejected_single_run_is_one_line_exit_2_and_leaves_no_folder(tmp_path, overrides, message):
    result = run_train(*TINY, *overrides, cwd=tmp_path)
    assert result.returncode == 2
    assert message in one_error_line(result)
    assert not list((tmp_path / "runs" / "single").glob("*"))


def test_same_key_same_message_whatever_the_bad_value():
    messages = []
    for lr in ("-0.001", "0"):
        with pytest.raises(ConfigError) as err:
            check_config(composed(f"optim.lr={lr}"))
        messages.append(str(err.value).replace(f"={lr}", "=…"))
    assert messages[0] == messages[1] == "optim.lr=… is invalid: a number > 0"


# ------------------------------------------------------------------------- resume

def test_resume_of_a_folder_that_is_no_run_is_one_line_exit_2(tmp_path):
    missing = tmp_path / "runs" / "single" / "does_not_exist"
    result = run_train(*TINY, f"resume={missing}", cwd=tmp_path)
    assert result.returncode == 2 and "is not a run folder" in one_error_line(result)
    assert not missing.exists()


def _stopped_run(tmp_path, checkpoint: bytes | None):
    """A run folder as a kill leaves it: config, a 'running' summary and maybe a (damaged) checkpoint."""
    run_dir = tmp_path / "stopped"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 0\n")
    runs.write_summary(run_dir, {"status": "running"})
    if checkpoint is not None:
        (run_dir / "checkpoints" / "step000005.ckpt").write_bytes(checkpoint)
        (run_dir / "checkpoints" / "last.ckpt").symlink_to("step000005.ckpt")
    return run_dir


def test_resume_of_a_run_without_checkpoint_is_one_line_exit_2(tmp_path):
    run_dir = _stopped_run(tmp_path, checkpoint=None)
    result = run_train(*TINY, f"resume={run_dir}", cwd=tmp_path)
    assert result.returncode == 2 and "holds no checkpoint" in one_error_line(result)


def test_resume_from_a_truncated_checkpoint_names_the_file(tmp_path):
    run_dir = _stopped_run(tmp_path, checkpoint=b"PK\x03\x04 truncated")
    result = run_train(*TINY, f"resume={run_dir}", cwd=tmp_path)
    assert result.returncode == 2
    line = one_error_line(result)
    assert f"{run_dir}/checkpoints/last.ckpt (→ step000005.ckpt) cannot be read" in line


# ------------------------------------------------------------------------- sweeps

SWEEP = [*TINY, "trainer.max_steps=2", "trainer.val_every=1"]


def test_a_sweep_with_a_failed_job_exits_1_with_one_summary(tmp_path):
    """One job completes, one is rejected: exit 1; the summary counts both, gives the error and the report
    command; the rejected job leaves no folder; the completed one logged a line per validation."""
    result = run_train("-m", *SWEEP, "name=f", "seed=0,-1", cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    ok, bad = job_folder(*SWEEP, "name=f", "seed=0"), job_folder(*SWEEP, "name=f", "seed=-1")
    tail = result.stdout[result.stdout.index("sweep runs/f:"):].splitlines()
    assert tail == ["sweep runs/f: 2 jobs · 1 completed · 0 skipped · 1 failed",
                    f"  failed {bad}: seed=-1 is invalid: an integer >= 0",
                    "next: python -m ropelab report runs/f"]
    sweep = tmp_path / "runs" / "f"
    assert sorted(p.name for p in sweep.iterdir()) == sorted([ok, "multirun.yaml"])
    assert runs.read_summary(sweep / ok)["status"] == "completed"
    for step in (1, 2):  # not a terminal: one line per validation, on the console and in train.log
        assert f"[{ok}] step {step}/2 · " in result.stdout
        assert f"[{ok}] step {step}/2 · " in (sweep / ok / "train.log").read_text()


def test_a_second_launch_skips_the_job_another_one_trains(tmp_path):
    """The job folder's lock is held (as a first launch training it would); this launch skips that job, says so
    in the summary, and exits 0."""
    held = tmp_path / "runs" / "l" / job_folder(*SWEEP, "name=l", "seed=0")
    free = job_folder(*SWEEP, "name=l", "seed=1")
    with runs.claim(held):
        result = run_train("-m", *SWEEP, "name=l", "seed=0,1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "sweep runs/l: 2 jobs · 1 completed · 1 skipped · 0 failed" in result.stdout
    assert f"  skipped 1, being trained by another launch: {held.name}" in result.stdout
    assert not (held / "summary.json").exists()
    assert runs.read_summary(held.parent / free)["status"] == "completed"


def test_claim_is_exclusive_and_dies_with_its_holder(tmp_path):
    with runs.claim(tmp_path):
        with pytest.raises(runs.InUse, match=f"pid {os.getpid()}"):
            with runs.claim(tmp_path):
                pass
    with runs.claim(tmp_path):  # released
        pass


# ------------------------------------------------------------------------- progress in a terminal

def test_progress_bar_in_a_terminal(tmp_path):
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a pty starts 0 columns wide
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *SWEEP], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=terminal, stderr=terminal)
    os.close(terminal)
    output = b""
    while True:  # read until the child closes the terminal (EIO): no clock involved
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    assert proc.wait() == 0, output.decode()[-2000:]
    text = output.decode()
    assert "2/2 [" in text and "step/s" in text and "loss " in text  # tqdm: count, elapsed<ETA, rate; our loss
    assert "step 2/2 · " in text  # the validation line, printed above the bar


# ------------------------------------------------------------------------- presets without -m

@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_without_m_names_only_its_multi_valued_axes(preset):
    """Every fixed axis (one value) is in the preset's config, so a single run trains it; the refusal names -m
    and the axes left to pick, and picking them is enough."""
    cfg = composed(f"experiment={preset}", hydra=True)
    axes = {k: [str(v) for v in axis_values(k, values)] for k, values in cfg.hydra.sweeper.params.items()}
    several = [k for k, values in axes.items() if len(values) > 1]
    with pytest.raises(ConfigError) as err:
        check_single_run_of_preset(cfg, cfg.hydra)
    message = str(err.value)
    assert "-m" in message and "\n" not in message
    assert [k for k in axes if f"{k} (" in message] == several
    picked = composed(f"experiment={preset}", *(f"{k}={axes[k][0]}" for k in several), hydra=True)
    check_single_run_of_preset(picked, picked.hydra)


def test_a_preset_job_without_m_trains_the_presets_task(tmp_path):
    result = run_train("experiment=pope_indirect", "pos=rope", "seed=0", *TINY, "trainer.max_steps=1",
                       "record=null", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = runs.read_summary(next((tmp_path / "runs" / "single").iterdir()))
    assert summary["task"] == "indirect_indexing" and summary["pos"] == "rope"


# ------------------------------------------------------------------------- quiet output

def test_harmless_warnings_are_silenced_and_real_ones_kept():
    code = ("import warnings, ropelab.core.train\n"
            "warnings.warn(\"`isinstance(treespec, LeafSpec)` is deprecated, use …\", FutureWarning)\n"
            "warnings.warn(\"\\n'hydra/launcher/joblib' is validated against ConfigStore schema with the same name.\")\n"
            "warnings.warn('a real warning')\n"
            "import logging; logging.getLogger('lightning.pytorch').warning('a real lightning warning')\n"
            "logging.getLogger('lightning.pytorch').info('GPU available: False, used: False')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "a real warning" in result.stderr and "a real lightning warning" in result.stderr
    for noise in HARMLESS:
        assert noise not in result.stderr


def test_a_joblib_sweep_with_wandb_prints_no_harmless_warnings_and_make_sync_finds_its_runs(tmp_path):
    result = run_train("-m", *SWEEP, "name=q", "seed=0,1", "hydra/launcher=joblib", "logger=wandb", cwd=tmp_path,
                       env={"WANDB_MODE": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sweep runs/q: 2 jobs · 2 completed · 0 skipped · 0 failed" in result.stdout
    for noise in HARMLESS:
        assert noise not in result.stdout + result.stderr, noise

    make = ["make", "-s", "-C", str(ROOT), "-o", ".venv/.installed"]  # never reinstall the venv from a test
    sync = subprocess.run([*make, "sync", f"SWEEP={tmp_path / 'runs' / 'q'}", "ARGS=--dry-run"], capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert sync.returncode == 0 and "Would sync 2 run(s)" in sync.stdout + sync.stderr, sync.stdout + sync.stderr
    empty = subprocess.run([*make, "sync", f"SWEEP={tmp_path / 'nothing'}"], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert empty.returncode == 0 and f"no offline W&B runs under {tmp_path / 'nothing'}" in empty.stdout
