"""ropelab.analysis.resonance: cos(ω·N) near 1 at the distances a task bridges, from learned Ω traces (issue 38)."""

import math

import numpy as np
import pandas as pd
import pytest

from conftest import TINY, train_here
from ropelab.analysis import claims as C
from ropelab.analysis import resonance
from ropelab.core.data import draw
from tasks.bio_rotation import BioRotation
from tasks.dyck3 import Dyck3


def test_the_share_counts_only_pairs_that_have_turned_half_a_cycle():
    one_turn = np.array([2 * math.pi / 100])
    assert resonance.resonance_share(one_turn, np.array([100.0]), np.array([1.0])) == 1.0
    assert resonance.resonance_share(one_turn, np.array([50.0]), np.array([1.0])) == 0.0  # half a turn: cos = −1
    assert math.isnan(resonance.resonance_share(one_turn, np.array([40.0]), np.array([1.0])))  # 0.8π: not counted
    # two distances weighted 3:1, one resonant: the share is the resonant one's weight
    assert resonance.resonance_share(one_turn, np.array([100.0, 50.0]), np.array([0.75, 0.25])) == pytest.approx(0.75)


def test_the_threshold_is_the_declared_cosine():
    omega = np.array([(2 * math.pi + math.acos(0.9) - 1e-6) / 100, (2 * math.pi + math.acos(0.9) + 1e-6) / 100])
    assert resonance.resonance_share(omega, np.array([100.0]), np.array([1.0])) == 0.5


def test_bio_rotation_distances_are_those_of_the_generator():
    task = BioRotation(motif_len=3, gap_min=4, gap_max=9)
    inputs, targets = task.sample(np.random.default_rng(0), 200)
    seen = set()
    for row_in, row_t in zip(inputs, targets):
        answer = np.flatnonzero(row_t != -100)
        for j, query in enumerate(answer):
            source = 1 + (task.motif_len - 1 - j)  # answer j reverse-complements motif token m − 1 − j
            assert 7 - row_t[query] == row_in[source]  # complement in token ids: A(2)↔T(5), C(3)↔G(4)
            seen.add(int(query - source))
    values, weights = resonance.bio_rotation_distances({"motif_len": 3, "gap_min": 4, "gap_max": 9})
    assert set(values.astype(int)) == seen == set(range(5, 9 + 1 + 2 * 2 + 1))
    assert weights.sum() == pytest.approx(1.0)
    assert weights[0] == pytest.approx(1 / 18)  # distance 5: only g = 4, j = 0 of 6 gaps × 3 tokens


def test_closing_distances_match_the_bracket_each_answer_closes():
    task = Dyck3(depth_min=1, depth_max=4, len_min=4, len_max=12)
    inputs, targets = draw(task, 0, "val", 64)
    ids = {t: i for i, t in enumerate(task.vocab)}
    pairs = {ids["("]: ids[")"], ids["["]: ids["]"], ids["{"]: ids["}"]}
    distances = resonance.closing_distances(inputs, targets, list(pairs), list(pairs.values()))
    k = 0
    for row_in, row_t in zip(inputs, targets):
        for query in np.flatnonzero(row_t != -100):
            assert pairs[row_in[query - int(distances[k])]] == row_t[query]  # the source is the matching opener
            k += 1
    assert k == len(distances)
    # by hand: <bos> ( [ ] { > → closers } ) predicted at positions 5 and 6, opened at 4 and 1
    by_hand_in = np.array([[1, ids["("], ids["["], ids["]"], ids["{"], ids[">"], ids["}"]]])
    by_hand_t = np.array([[-100, -100, -100, -100, -100, ids["}"], ids[")"]]])
    assert resonance.closing_distances(by_hand_in, by_hand_t, list(pairs), list(pairs.values())).tolist() == [1, 5]


def test_the_null_is_log_uniform_over_the_spectrum_and_the_p_value_one_sided():
    omega = np.array([[1e-3, 1.0], [0.1, 0.01]])
    draws = resonance.random_spectra(omega, 500, np.random.default_rng(0))
    assert draws.shape == (500, 4) and draws.min() >= 1e-3 and draws.max() <= 1.0
    assert abs(np.median(np.log10(draws)) + 1.5) < 0.1  # log-uniform over [−3, 0]
    assert resonance.one_sided_p(0.5, np.array([0.1, 0.2, 0.6, np.nan])) == pytest.approx(2 / 4)
    # a spectrum of exact harmonics of the one distance: every counted pair resonates, far above random spectra
    harmonics = 2 * math.pi * np.arange(1, 17) / 100
    null = resonance.null_shares(harmonics, np.array([100.0]), np.array([1.0]), 200, seed=0)
    assert resonance.resonance_share(harmonics, np.array([100.0]), np.array([1.0])) == 1.0
    assert resonance.one_sided_p(1.0, null) < 0.05


def test_the_command_on_a_tiny_trained_spectral_run(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for pos in ("spectral", "rope"):
        done = train_here(*TINY, "task=dyck3", "task.len_max=16", f"pos={pos}", "trainer.max_steps=4",
                          "trainer.val_every=2", run_dir=sweep / f"pos={pos}")
        assert done["status"] == "completed", done
    out = tmp_path / "out"
    assert resonance.main([str(sweep), "--out", str(out), "--draws", "50"]) == 0
    printed = capsys.readouterr().out
    rows = pd.read_csv(out / "resonance.csv")
    assert len(rows) == 1 and rows["pairs"][0] == 2 * 8  # spectral: 2 heads × 8 pairs; rope has no Ω
    assert 0 <= rows["share_final"][0] <= 1 and 0 < rows["p_vs_null"][0] <= 1
    records = C.resonance_records(out / "resonance.csv", "resonance", tmp_path)  # the claims' reader
    assert {r.config["moment"]: C.value(r, "resonance/share") for r in records} == pytest.approx(
        {"end": rows["share_final"][0], "init": rows["share_init"][0], "random": rows["null_mean"][0]})
    assert "sweep · dyck3 · spectral" in printed and "1 × no learned Ω in positional_trace.npz (pos=rope)" in printed
    assert (out / "resonance.png").stat().st_size > 1000


def test_the_command_refuses_folders_without_a_usable_run(tmp_path, capsys):
    assert resonance.main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no completed bio_rotation or dyck3 run with a learned Ω" in capsys.readouterr().err
    assert resonance.main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.slow
def test_the_committed_results_are_what_the_command_writes(tmp_path, monkeypatch):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # the tables name the runs as the README's command types them
    command = (root / "results" / "resonance" / "README.md").read_text().split("```bash\n")[1].split("\n")[0]
    args = command.split()[3:]
    args[args.index("--out") + 1] = str(tmp_path)
    assert resonance.main(args) == 0
    for name in ("resonance.md", "resonance.csv"):
        assert (tmp_path / name).read_text() == (root / "results" / "resonance" / name).read_text(), name
