"""ropelab.analysis.depth_manifold: Dyck-3 states per bracket depth, adjacent-depth cosines, a linear depth probe."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import TINY, train_here
from ropelab.analysis import claims as C
from ropelab.analysis import depth_manifold as dm
from ropelab.core.data import draw
from ropelab.core.model import LlamaConfig, build_model
from tasks.dyck3 import CLOSE, OPEN, Dyck3

TWO_LAYERS = [o for o in TINY if not o.startswith("model.n_layers")] + ["model.n_layers=2"]


def bracket_ids(task):
    ids = {t: i for i, t in enumerate(task.vocab)}
    return [ids[c] for c in OPEN], [ids[c] for c in CLOSE], ids


def test_open_depths_by_hand():
    opens, closes, ids = bracket_ids(Dyck3())
    row = [1] + [ids[c] for c in "([]{("] + [ids[">"], ids[")"], ids["}"]]
    assert dm.open_depths(np.array([row]), opens, closes).tolist() == [[0, 1, 2, 0, 2, 3, 0, 0, 0]]


@pytest.mark.parametrize("split", ["val", "ood"])
def test_open_depths_stay_within_the_generators_nesting(split):
    task = Dyck3(depth_min=1, depth_max=4, len_min=4, len_max=16)
    if split == "ood":
        task = Dyck3(depth_min=5, depth_max=7, len_min=4, len_max=16)
    inputs, _, group = task.sample_grouped(np.random.default_rng(0), 64)
    opens, closes, _ = bracket_ids(task)
    depth = dm.open_depths(inputs, opens, closes)
    assert depth.max() <= task.depth_max and (depth > 0).sum() == np.isin(inputs, opens).sum()
    assert np.all(depth.max(axis=1) >= group)  # the prefix reached at least the depth it leaves open


def test_centred_cosines_of_a_circle_of_means_are_its_angle():
    means = {d + 1: np.array([math.cos(d * math.pi / 2), math.sin(d * math.pi / 2), 5.0]) for d in range(4)}
    assert dm.adjacent_cosines(means, centred=True) == pytest.approx({1: 0.0, 2: 0.0, 3: 0.0}, abs=1e-12)
    assert all(c == pytest.approx(25 / 26) for c in dm.adjacent_cosines(means, centred=False).values())


def test_the_probe_reads_a_linear_code_and_not_noise():
    rng = np.random.default_rng(0)
    depth = rng.integers(1, 6, size=600)
    code = rng.normal(size=(6, 12))
    states = code[depth] + 0.05 * rng.normal(size=(600, 12))
    example = np.arange(600)
    fit, held = dm.halves(example)
    assert dm.DepthProbe(states[fit], depth[fit]).accuracy(states[held], depth[held]) == 1.0
    noise = rng.normal(size=(600, 12))
    assert dm.DepthProbe(noise[fit], depth[fit]).accuracy(noise[held], depth[held]) < 0.35  # 5 depths: chance 0.2
    assert dm.chance(np.array([1, 1, 2]), np.array([1, 2, 2, 2])) == 0.25


def test_the_last_layer_state_is_what_the_head_reads():
    model = build_model(LlamaConfig(vocab_size=9, d_model=32, n_layers=2, n_heads=2, mlp_hidden=64, max_len=24),
                        {"name": "spectral"}).eval()
    inputs, _ = draw(Dyck3(depth_max=4, len_max=12), 0, "val", 5)
    idx = torch.as_tensor(inputs)
    states = dm.layer_states(model, idx)
    assert states.shape == (3, 5, inputs.shape[1], 32)
    with torch.no_grad():
        assert torch.allclose(model.lm_head(model.norm(states[-1])), model(idx), atol=1e-5)


def test_the_command_on_tiny_trained_runs(tmp_path, capsys):
    runs = []
    for pos in ("rope", "spectral"):
        run_dir = tmp_path / f"pos={pos}"
        done = train_here(*TWO_LAYERS, "task=dyck3", "task.len_max=16", f"pos={pos}", "trainer.max_steps=2",
                          "trainer.val_every=2", run_dir=run_dir)
        assert done["status"] == "completed", done
        runs.append(str(run_dir))
    out = tmp_path / "out"
    assert dm.main([*runs, "--out", str(out), "--examples", "16"]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "depth_manifold.csv")
    assert len(table) == 2 * 3 * 2  # runs × (embedding + 2 blocks) × splits
    ood = table[table["split"] == "ood"]
    assert ood["depths"].str.split("–").str[1].astype(int).max() > 8  # deeper than trained
    assert table[table["split"] == "id"]["probe"].between(0, 1).all() and ood["transfer"].between(0, 1).all()
    per_depth = pd.read_csv(out / "depth_manifold_per_depth.csv")
    assert per_depth["cos_next"].between(-1, 1).all()
    assert "spectral − rope" in printed and "| rope | 2 |" in printed
    records = C.depth_manifold_records(out / "depth_manifold.csv", "depth_manifold", tmp_path)  # the claims' reader
    assert len(records) == len(table)
    assert [C.value(r, "depth/probe") for r in records] == pytest.approx(table["probe"].tolist(), nan_ok=True)
    assert (out / "depth_pca_rope.png").stat().st_size > 1000 and (out / "depth_pca_spectral.png").is_file()


def test_the_command_refuses_what_it_cannot_read(tmp_path, capsys):
    assert dm.main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no completed run with checkpoints/last.ckpt under" in capsys.readouterr().err
    assert dm.main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    run_dir = tmp_path / "gc"
    train_here(*TINY, "task=global_counting", "trainer.max_steps=1", "trainer.val_every=1", run_dir=run_dir)
    assert dm.main([str(run_dir), "--out", str(tmp_path / "o")]) == 2
    assert "task=global_counting; depth_manifold reads dyck3 runs" in capsys.readouterr().err
