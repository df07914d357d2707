"""Committed records on a W&B dashboard (issue 24): ``ropelab export results/<table>`` writes one
offline W&B run per record (grouped, tagged, its config, curves and learned-parameter histograms) and one with the
table's summary and figures, for ``make sync``."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import HANG_GUARD_S, ROOT, wandb_records

TABLE = ROOT / "results" / "bifocal_table1"


def _export(table, out):
    result = subprocess.run([sys.executable, "-m", "ropelab", "export", str(table), "--out", str(out)],
                            capture_output=True, text=True, timeout=HANG_GUARD_S, env={**os.environ, "WANDB_MODE": "offline"})
    assert result.returncode == 0, result.stderr[-2000:]
    return result, sorted((out / table.name / "wandb").glob("offline-run-*"))


def _runs(offline):
    """display name → (run record, history keys, exit codes) of each offline run."""
    found = {}
    for folder in offline:
        records = wandb_records(next(folder.glob("run-*.wandb")))
        run = next(r.run for r in records if r.HasField("run"))
        keys = {item.key or "/".join(item.nested_key) for r in records if r.HasField("history") for item in r.history.item}
        found[run.display_name] = (run, keys, [r.exit.exit_code for r in records if r.HasField("exit")])
    return found


def test_two_records_and_the_report_become_three_offline_runs(tmp_path):
    table = tmp_path / "bifocal_table1"
    for job in ("pos=spectral,seed=0,task=bio_rotation", "pos=rope,seed=1,task=dyck3", "report"):
        shutil.copytree(TABLE / job, table / job)
    result, offline = _export(table, tmp_path / "out")
    assert len(offline) == 3 and "wandb: 3 offline runs" in result.stdout
    assert f"next: make sync SWEEP={tmp_path / 'out' / 'bifocal_table1'}" in result.stdout
    runs = _runs(offline)
    spectral, keys, exits = runs["pos=spectral,seed=0,task=bio_rotation"]
    assert spectral.run_group == "bifocal_table1" and exits == [0]
    assert {"record", "task=bio_rotation", "pos=spectral", "seed=0", "gamma=0.0"} <= set(spectral.tags)
    assert any(u.key == "pos" for u in spectral.config.update)
    assert {"train/loss", "val/loss", "val/acc", "test/acc", "ood/acc"} <= keys  # the curves and the test row
    assert any(k.startswith("pos/omega/") for k in keys)  # the trace's histograms
    rope_keys = runs["pos=rope,seed=1,task=dyck3"][1]
    assert not any(k.startswith("pos/omega") for k in rope_keys)
    _, report_keys, _ = runs["bifocal_table1 report"]
    assert any(k.startswith("table") for k in report_keys) and any(k.startswith("figures/curves_") for k in report_keys)


def test_a_folder_without_records_is_one_line(tmp_path):
    from ropelab.experiments import wandb_export

    with pytest.raises(SystemExit) as refused:
        wandb_export.main([str(tmp_path)])
    assert str(refused.value) == (f"error: {tmp_path} holds no records (folders with summary.json): name a "
                                  "results/<table> folder")
    assert not (tmp_path / "wandb").exists()


@pytest.mark.slow
def test_the_bifocal_table_exports_27_runs_and_its_report(tmp_path):
    _, offline = _export(TABLE, tmp_path / "out")
    assert len(offline) == 28
    exits = [e for _, _, e in _runs(offline).values()]
    assert exits == [[0]] * 28
