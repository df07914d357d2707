"""ropelab.analysis.escape_routes: the attention logits' energy per rotary pair, before and after momentum."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import TINY, train_here
from ropelab.analysis import claims as C
from ropelab.analysis import escape_routes as er
from ropelab.core import model as model_module
from ropelab.core.locality import attention_weights
from ropelab.core.model import LlamaConfig, build_model
from ropelab.core.positional.momentum import momentum

TWO_LAYERS = [o for o in TINY if not o.startswith("model.n_layers")] + ["model.n_layers=2"]


def tiny_rope(gamma=0.0, freqs="geometric"):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=12, d_model=32, n_layers=2, n_heads=2, mlp_hidden=64, max_len=10)
    return build_model(cfg, {"name": "rope", "freqs": freqs, "momentum": {"gamma": gamma}}).eval()


def test_pair_energy_is_the_square_of_each_pairs_part_of_the_logit():
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    expect = torch.zeros(4, dtype=torch.float64)
    for b in range(2):
        for h in range(3):
            for t in range(5):
                for s in range(t + 1):
                    if keep[b, t] and keep[b, s]:
                        parts = [float(q[b, h, t, i] * k[b, h, s, i] + q[b, h, t, i + 4] * k[b, h, s, i + 4])
                                 for i in range(4)]
                        assert sum(parts) == pytest.approx(float(q[b, h, t] @ k[b, h, s]), abs=1e-5)  # Σ c_i = q·k
                        expect += torch.tensor(parts, dtype=torch.float64) ** 2
    assert torch.allclose(er.pair_energy(q, k, keep), expect, rtol=1e-6)  # the reference multiplies in float32


@pytest.mark.parametrize("gamma", [0.0, 2.0])
def test_the_recorded_q_and_k_are_the_rotated_and_the_scored_ones(gamma):
    model = tiny_rope(gamma)
    idx = torch.randint(1, 12, (3, 10))
    with er.recorded_qk(model) as recorded:
        weights = attention_weights(model, idx)
    assert len(recorded["weights"]) == len(recorded["scored"]) == 2
    for layer, ((q, k), (q_hat, k_hat)) in enumerate(zip(recorded["weights"], recorded["scored"])):
        if gamma == 0:
            assert torch.equal(q, q_hat) and torch.equal(k, k_hat)
        else:
            assert torch.equal(momentum(q, gamma), q_hat) and torch.equal(momentum(k, gamma), k_hat)
        scores = (q_hat @ k_hat.transpose(-2, -1)) / math.sqrt(16)
        scores = scores.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
        assert torch.allclose(scores.softmax(-1), weights[:, layer], atol=1e-6)
    # undone on exit: the class's own transform and the module's own function again
    assert "transform_qk" not in vars(model.pos)
    assert model_module.attention_weights is model_module.__dict__["attention_weights"]
    assert model_module.attention_weights.__module__ == "ropelab.core.model"


def test_before_momentum_gamma_changes_nothing_in_the_first_layer_at_init():
    idx = np.random.default_rng(0).integers(1, 12, (4, 10))
    plain, momentary = er.energies(tiny_rope(0.0), idx), er.energies(tiny_rope(2.0), idx)
    assert np.array_equal(plain["weights"][0], momentary["weights"][0])  # same seed: same weights, same rotation
    assert not np.allclose(plain["scored"][0], momentary["scored"][0])
    assert not np.allclose(plain["weights"][1], momentary["weights"][1])  # layer 0's momentum reaches layer 1's input


def test_low_share_and_exposure():
    freq = 10000.0 ** (-np.arange(6) / 6)
    share = np.array([0.1, 0.1, 0.1, 0.1, 0.2, 0.4])
    assert er.low_share(share, freq) == pytest.approx(0.6)  # the two lowest frequencies are the last pairs
    assert er.exposure(np.eye(6)[0], freq) == pytest.approx(2 * math.sin(0.5))
    single = np.full(6, 0.1)
    assert math.isnan(er.low_share(share, single))
    assert er.exposure(share, single) == pytest.approx(2 * math.sin(0.05))  # one frequency: whatever the shares
    energy = np.array([[1.0, 3.0], [2.0, 2.0]])
    assert er.shares(energy).tolist() == [0.375, 0.625]  # per layer, then averaged


def test_the_command_on_tiny_trained_runs(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for gamma in (0, 2):
        for freqs in ("geometric", "single@0.1"):
            done = train_here(*TWO_LAYERS, "task=global_counting", "pos=rope", f"pos.freqs={freqs}",
                              f"pos.momentum.gamma={gamma}", "trainer.max_steps=1", "trainer.val_every=1",
                              run_dir=sweep / f"g={gamma},f={freqs}")
            assert done["status"] == "completed", done
    (sweep / "multirun.yaml").write_text("hydra:\n  sweeper:\n    params:\n      seed: 0,1,2\n")  # planned: 3 seeds
    out = tmp_path / "out"
    assert er.main([str(sweep), "--out", str(out), "--examples", "8"]) == 0
    printed = capsys.readouterr().out
    runs = pd.read_csv(out / "escape_routes_runs.csv")
    assert len(runs) == 4 and runs[runs["profile"] == "single@0.1"]["low_share_weights"].isna().all()
    assert runs[runs["profile"] == "single@0.1"]["exposure_weights"].tolist() == pytest.approx([2 * math.sin(0.05)] * 2)
    pairs = pd.read_csv(out / "escape_routes.csv")
    assert len(pairs) == 4 * 2 * 8  # runs × layers × pairs (head dim 16)
    assert pairs.groupby(["run", "layer"])["share_weights"].sum().to_numpy() == pytest.approx(1.0, abs=1e-5)
    assert "single@0.1 − geometric" in printed and "| geometric | 2 − 0 |" in printed
    records = C.escape_routes_records(out / "escape_routes_runs.csv", "escape_routes", tmp_path)  # the claims' reader
    assert sorted((r.config["pos.freqs"], r.config["pos.momentum.gamma"]) for r in records) == \
        [("geometric", 0.0), ("geometric", 2.0), ("single@0.1", 0.0), ("single@0.1", 2.0)]
    assert [C.value(r, "escape/exposure_weights") for r in records] == pytest.approx(runs["exposure_weights"].tolist())
    assert (out / "escape_routes.png").stat().st_size > 1000


def test_the_command_refuses_what_it_cannot_read(tmp_path, capsys):
    assert er.main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "no completed run with checkpoints/last.ckpt" in capsys.readouterr().err
    assert er.main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    train_here(*TINY, "task=global_counting", "pos=spectral", "trainer.max_steps=1", "trainer.val_every=1",
               run_dir=tmp_path / "spectral")
    assert er.main([str(tmp_path / "spectral"), "--out", str(tmp_path / "o")]) == 2
    assert "pos=spectral; escape_routes reads rope runs" in capsys.readouterr().err


def test_planned_seeds_come_from_the_sweeps_multirun_yaml(tmp_path):
    from ropelab.analysis.run_folders import planned_seeds

    assert planned_seeds(tmp_path) is None
    (tmp_path / "multirun.yaml").write_text("hydra:\n  sweeper:\n    params:\n      seed: 100,101,102,103,104\n")
    assert planned_seeds(tmp_path) == 5
    (tmp_path / "multirun.yaml").write_text("hydra:\n  sweeper:\n    params:\n      seed: range(0,3)\n")
    assert planned_seeds(tmp_path) is None  # not a list: the finished seeds are the plan
