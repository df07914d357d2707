"""Learning speed and extrapolation (issue 21): steps to a level and OOD accuracy, scheme against scheme by seed."""

import json

import pandas as pd
import yaml

from ropelab.analysis import learning_speed


def write_run(folder, scheme, seed, val_acc, ood_acc):
    folder.mkdir(parents=True)
    config = {"task": {"name": "mod_arith"}, "pos": {"name": scheme}, "seed": seed, "trainer": {"max_steps": 200}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "summary.json").write_text(json.dumps({"status": "completed", "final": {
        "val/acc": val_acc[-1], "ood/acc": ood_acc, "ood/exact": ood_acc / 2}}))
    pd.DataFrame({"step": [49, 99, 149, 199], "val/acc": val_acc}).to_csv(folder / "metrics.csv", index=False)


def test_steps_to_level_and_ood_are_paired_by_seed(tmp_path):
    write_run(tmp_path / "rope0", "rope", 0, [0.2, 0.5, 0.91, 0.95], 0.30)
    write_run(tmp_path / "rope1", "rope", 1, [0.2, 0.92, 0.93, 0.95], 0.40)
    write_run(tmp_path / "spec0", "spectral", 0, [0.9, 0.9, 0.95, 0.97], 0.50)
    write_run(tmp_path / "spec1", "spectral", 1, [0.2, 0.5, 0.6, 0.7], 0.45)  # never reaches 0.9
    out = tmp_path / "report"
    assert learning_speed.main([str(tmp_path), "--out", str(out)]) == 0
    data = pd.read_csv(out / "learning_speed.csv").set_index(["scheme", "seed"])
    assert data.loc[("rope", 0), "to_level"] == 149 and data.loc[("spectral", 0), "to_level"] == 49
    assert pd.isna(data.loc[("spectral", 1), "to_level"])
    cells, diffs = learning_speed.tables(data.reset_index(), "rope", 0.9)
    pair = diffs.set_index("pair").loc["spectral − rope"]
    assert pair["steps to 0.9"] == "-100 (n=1)", "the seed that never got there leaves its pair out"
    assert pair["OOD acc (%)"].startswith("+12.5 [") and pair["OOD acc (%)"].endswith("(n=2)")
    spectral = cells.set_index("scheme").loc["spectral"]
    assert spectral["steps to 0.9"] == "49 (n=1, 1 never)"
    assert "Against rope" in (out / "learning_speed.md").read_text()


def test_refuses_a_folder_without_completed_runs(tmp_path, capsys):
    assert learning_speed.main([str(tmp_path)]) == 2
    assert "no completed run" in capsys.readouterr().out
