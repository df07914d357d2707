"""Learning speed and extrapolation (issue 21): steps to a level and OOD accuracy, scheme against scheme by seed."""

import json

import pandas as pd
import yaml

from ropelab.analysis import learning_speed


def write_run(folder, scheme, seed, val_acc, ood_acc, task=None, pos=None):
    folder.mkdir(parents=True)
    config = {"task": {"name": "mod_arith", **(task or {})}, "pos": {"name": scheme, **(pos or {})}, "seed": seed,
              "trainer": {"max_steps": 200}}
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
    assert (data["column"] == data.index.get_level_values("scheme")).all(), "no other axis: a column is a scheme"
    assert data.loc[("rope", 0), "to_level"] == 149 and data.loc[("spectral", 0), "to_level"] == 49
    assert pd.isna(data.loc[("spectral", 1), "to_level"])
    cells, diffs = learning_speed.tables(data.reset_index(), ["rope", "spectral"], [("spectral", "rope")], 0.9)
    pair = diffs.set_index("pair").loc["spectral − rope"]
    assert pair["steps to 0.9"] == "-100 (n=1)", "the seed that never got there leaves its pair out"
    assert pair["OOD acc (%)"].startswith("+12.5 [") and pair["OOD acc (%)"].endswith("(n=2)")
    spectral = cells.set_index("scheme").loc["spectral"]
    assert spectral["steps to 0.9"] == "49 (n=1, 1 never)"
    assert "Against rope" in (out / "learning_speed.md").read_text()


def test_refuses_a_folder_without_completed_runs(tmp_path, capsys):
    assert learning_speed.main([str(tmp_path)]) == 2
    assert "no completed run" in capsys.readouterr().out


def test_schemes_pair_within_each_setting_the_sweep_varies(tmp_path):
    """A ladder (task.rung varies beside the scheme): pope pairs with rope at its own rung, never across rungs;
    a scheme's own option (pos.delta_init) stays a pope column paired with rope."""
    for rung in (1, 2):
        for seed in (0, 1):
            write_run(tmp_path / f"rope{rung}{seed}", "rope", seed, [0.1, 0.2, 0.3, 0.4 + rung / 10], 0.2,
                      task={"rung": rung})
            write_run(tmp_path / f"pope{rung}{seed}", "pope", seed, [0.5, 0.9, 0.95, 0.9 + seed / 100], 0.6,
                      task={"rung": rung}, pos={"delta_init": "zero"})
    write_run(tmp_path / "popeu10", "pope", 0, [0.5, 0.9, 0.95, 0.97], 0.7, task={"rung": 1},
              pos={"delta_init": "uniform"})
    out = tmp_path / "report"
    assert learning_speed.main([str(tmp_path), "--out", str(out)]) == 0
    md = (out / "learning_speed.md").read_text()
    rows = {line.split("|")[2].strip(): line for line in md.splitlines() if " − " in line}
    assert set(rows) == {"pope delta_init=zero rung=1 − rope rung=1", "pope delta_init=zero rung=2 − rope rung=2",
                         "pope delta_init=uniform rung=1 − rope rung=1"}, md
    # val acc: rope 50 % at rung 1, 60 % at rung 2; pope 90 / 91 %: +40.5 and +30.5 points over 2 pairs each
    assert "+40.5 [" in rows["pope delta_init=zero rung=1 − rope rung=1"]
    assert "+30.5 [" in rows["pope delta_init=zero rung=2 − rope rung=2"]
    assert "(n=1)" in rows["pope delta_init=uniform rung=1 − rope rung=1"]
    from ropelab.analysis.report.sweep import Sweep
    from ropelab.analysis.stats import Landmarks
    pairs = Sweep(tmp_path, Landmarks()).scheme_pairs()
    assert {frozenset(p) for p in pairs} == {
        frozenset({"pope delta_init=zero rung=1", "rope rung=1"}), frozenset({"pope delta_init=zero rung=2", "rope rung=2"}),
        frozenset({"pope delta_init=uniform rung=1", "rope rung=1"}),
        frozenset({"pope delta_init=uniform rung=1", "pope delta_init=zero rung=1"})}, "a scheme's variants pair too"
