"""Calibration (issue 21): a grid point's state against its floor and ceiling, the steps to a level, and the picks
— on synthetic grids whose answers are known, and from records on disk through the command."""

import json
import math

import pandas as pd
import pytest
import yaml

from ropelab.analysis.stats import first_step_at
from ropelab.experiments import calibrate
from ropelab.experiments.calibrate import Rule

RULE = Rule(margin=0.05, level=0.9, ceiling=1.0)


@pytest.mark.parametrize("accs, state", [
    ([0.22, 0.40], "floor"),      # one seed within the margin of the 0.2 floor
    ([0.26, 0.40], "partial"),
    ([0.30, 0.96], "ceiling"),    # one seed within the margin of the ceiling
    ([0.95, 0.95], "partial"),    # exactly ceiling − margin still has room
])
def test_state_against_floor_and_ceiling(accs, state):
    assert calibrate.state(accs, floor=0.2, rule=RULE) == state


def test_first_step_at_a_threshold():
    curve = pd.Series([0.1, 0.5, 0.95, 0.8, 0.97], index=[49, 99, 149, 199, 249])
    assert first_step_at(curve, 0.9) == 149
    assert first_step_at(curve, 0.5) == 99
    assert math.isnan(first_step_at(curve, 0.99))


def synthetic_runs(grid):
    """grid: {(len_max, budget): [acc per seed]} → one row per run, floor 0.2 (len 16) and 0.1 (len 32)."""
    rows = []
    for (size, budget), accs in grid.items():
        for seed, acc in enumerate(accs):
            rows.append({"budget": budget, "task.len_max": size, "seed": seed, "acc": acc,
                         "floor": 0.2 if size == "16" else 0.1,
                         "leaves_floor": 50.0 * (seed + 1) if acc >= 0.25 else math.nan,
                         "reaches_level": 100.0 if acc >= 0.9 else math.nan})
    return pd.DataFrame(rows)


GRID = {("16", 400): [0.21, 0.30], ("16", 1000): [0.40, 0.55], ("16", 2000): [0.92, 0.97], ("16", 4000): [1.0, 1.0],
        ("32", 400): [0.10, 0.11], ("32", 1000): [0.12, 0.30], ("32", 2000): [0.20, 0.40], ("32", 4000): [0.86, 0.95]}  # learned: the mean (0.905) reaches 0.9


def test_picks_the_smallest_partial_and_learned_budget_per_size_and_overall():
    table = calibrate.points(synthetic_runs(GRID), ["task.len_max"], RULE)
    assert list(table["budget"]) == [400, 1000, 2000, 4000] * 2, "grid order: size, then budget"
    assert list(table["state"]) == ["floor", "partial", "ceiling", "ceiling", "floor", "floor", "partial", "partial"]
    chosen = calibrate.picks(table, ["task.len_max"])
    assert chosen["per_size"] == [{"size": {"task.len_max": "16"}, "partial": 1000, "learned": 2000},
                                  {"size": {"task.len_max": "32"}, "partial": 2000, "learned": 4000}]
    assert chosen["partial"] == {"budget": 1000, "size": {"task.len_max": "16"}}
    assert chosen["learned"] == {"budget": 2000, "size": {"task.len_max": "16"}}
    row = table[(table["task.len_max"] == "16") & (table["budget"] == 1000)].iloc[0]
    assert (row["leaves_floor"], row["leaves_floor_n"]) == (75.0, "2/2")
    assert (math.isnan(row["reaches_level"]), row["reaches_level_n"]) == (True, "0/2")


def test_no_pick_when_every_point_sits_at_the_floor():
    grid = {("16", b): [0.2, 0.21] for b in (400, 1000)}
    chosen = calibrate.picks(calibrate.points(synthetic_runs(grid), ["task.len_max"], RULE), ["task.len_max"])
    assert chosen["partial"] is None and chosen["learned"] is None


def write_record(folder, budget, seed, curve, modulus=7):
    """A completed mod_arith record as train.py keeps it: config.yaml, summary.json, metrics.csv."""
    folder.mkdir(parents=True)
    config = {"task": {"name": "mod_arith", "modulus": modulus, "terms_min": 3, "terms_max": 3, "operand_min": 0,
                       "operand_max": 6, "ood": {"terms_min": 4, "terms_max": 6}},
              "pos": {"name": "rope"}, "seed": seed, "trainer": {"max_steps": budget}, "record": "x"}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "summary.json").write_text(json.dumps({"status": "completed", "steps": budget, "seed": seed,
                                                     "final": {"val/acc": curve[-1]}}))
    steps = [50 * (i + 1) - 1 for i in range(len(curve))]
    pd.DataFrame({"step": steps, "val/acc": curve}).to_csv(folder / "metrics.csv", index=False)


def test_command_reads_records_computes_floors_and_writes_its_report(tmp_path, capsys):
    records = tmp_path / "records"
    for seed in (0, 1):
        write_record(records / f"seed={seed},trainer.max_steps=100", 100, seed, [0.14, 0.15])
        write_record(records / f"seed={seed},trainer.max_steps=200", 200, seed, [0.2, 0.5, 0.7, 0.8 + 0.1 * seed])
    out = tmp_path / "report"
    assert calibrate.main([str(records), "--out", str(out)]) == 0
    picks = json.loads((out / "picks.json").read_text())
    assert picks["sizes"] == [] and picks["partial"] == {"budget": 200, "size": {}} and picks["learned"] is None
    table = pd.read_csv(out / "calibration.csv")
    assert table["floor"].round(2).tolist() == [0.14, 0.14], "mod 7 with 3 uniform terms: the mode is 1/7"
    assert table["state"].tolist() == ["floor", "partial"]
    assert table.loc[1, "leaves_floor"] == 49 and table.loc[1, "reaches_level_n"] == "1/2"
    assert (out / "calibration.png").stat().st_size > 0 and "partial: 200 steps" in capsys.readouterr().out


def test_command_refuses_a_folder_without_records_and_a_bad_baseline(tmp_path, capsys):
    assert calibrate.main([str(tmp_path)]) == 2
    assert "no completed run" in capsys.readouterr().out
    write_record(tmp_path / "r" / "a", 100, 0, [0.5])
    assert calibrate.main([str(tmp_path / "r"), "--baseline", "pos.momentum.gamma=0", "--out", str(tmp_path / "o")]) == 2
    assert "pos.momentum.gamma is not an axis" in capsys.readouterr().out
