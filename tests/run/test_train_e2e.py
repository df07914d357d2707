"""End to end through Hydra: a few steps leave a complete run folder; bad input is one line."""

import json

import pytest

from conftest import run_train


def test_train_writes_a_complete_run_folder(tmp_path, tiny):
    result = run_train("pos=spectral", "trainer.max_steps=4", "trainer.val_every=2", *tiny, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dirs = list((tmp_path / "runs" / "single").iterdir())
    assert len(run_dirs) == 1
    run_dir = run_dirs[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 4 and summary["params"] > 0
    assert {"train/loss", "val/loss", "val/acc", "val/exact", "ood/acc"} <= set(summary["final"])
    assert (run_dir / "config.yaml").is_file() and (run_dir / "metrics.csv").is_file()
    assert (run_dir / "positional_trace.npz").is_file()
    assert f"run: {run_dir}" in result.stdout


@pytest.mark.parametrize("override, key", [
    (["task=nonsense"], "task="),
    (["pos=nonsense"], "pos="),
    (["pos.base=-5"], "pos.base"),
    (["task.gap_min=50", "task.gap_max=10"], "task.gap_max"),
    (["seed=abc"], "seed"),
])
def test_bad_input_is_one_line(tmp_path, tiny, override, key):
    result = run_train(*override, "trainer.max_steps=1", *tiny, cwd=tmp_path)
    assert result.returncode != 0
    lines = [l for l in result.stderr.strip().splitlines() if l.strip()]
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("error:") and key in lines[-1], result.stderr[-2000:]
