"""ropelab.analysis.freq_usage: mean q / k norm per frequency channel and layer of a trained run (issue 11)."""

import csv

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import TINY, train_here
from ropelab.analysis import freq_usage
from ropelab.core.model import LlamaConfig, build_model

TWO_LAYERS = [o for o in TINY if not o.startswith("model.n_layers")] + ["model.n_layers=2"]


def tiny_model(name, **pos):
    cfg = LlamaConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=2, mlp_hidden=64, max_len=16)
    return build_model(cfg, {"name": name, **pos}).eval()


def layer0_qk(model, idx):
    attn = model.blocks[0].attn
    B, T = idx.shape
    h = model.blocks[0].attn_norm(model.pos.embed(model.embed(idx), model.pos.prepare(T, idx.device)))
    q, k, _ = attn.qkv(h).view(B, T, 3, attn.n_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    return q, k


@pytest.mark.parametrize("name", ["rope", "pope", "rope_half"])
def test_channel_norms_match_a_direct_computation(name):
    torch.manual_seed(0)
    model = tiny_model(name)
    idx = torch.randint(1, 20, (3, 16))
    idx[0, 10:] = 0  # padding is left out of the mean
    q_norm, k_norm, freq = freq_usage.channel_norms(model, idx)
    q, k = layer0_qk(model, idx)
    keep = idx != 0
    with torch.no_grad():
        if name == "pope":
            expect_q, expect_k = F.softplus(q), F.softplus(k)
            assert q_norm.shape == (2, 2, 16) and np.allclose(freq, 10000.0 ** (-np.arange(16) / 16))
        else:
            r = 16 if name == "rope" else 8
            expect_q = torch.sqrt(q[..., : r // 2] ** 2 + q[..., r // 2: r] ** 2)
            expect_k = torch.sqrt(k[..., : r // 2] ** 2 + k[..., r // 2: r] ** 2)
            assert q_norm.shape == (2, 2, r // 2) and np.allclose(freq, 10000.0 ** (-np.arange(0, r, 2) / r))
        for got, expect in ((q_norm, expect_q), (k_norm, expect_k)):
            manual = expect.permute(1, 0, 2, 3)[:, keep].mean(dim=1)  # (heads, channels) over kept positions
            assert np.allclose(got[0], manual.numpy(), atol=1e-5)
    assert np.all(np.diff(freq) < 0), "channel 0 is the highest frequency"


def test_a_rotation_does_not_change_a_pair_norm():
    model = tiny_model("rope")
    q = torch.randn(1, 2, 16, 16)
    rotated, _ = model.pos.transform_qk(q, q, model.pos.prepare(16, q.device))
    keep = torch.ones(1, 16)
    assert torch.allclose(freq_usage._per_channel(q, model.pos, keep), freq_usage._per_channel(rotated, model.pos, keep),
                          atol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "nope", "spectral"])
def test_schemes_without_fixed_frequencies_are_refused(name):
    with pytest.raises(freq_usage.FreqUsageError, match=f"pos={name} has no fixed frequency channels"):
        freq_usage.channel_norms(tiny_model(name), torch.ones(1, 4, dtype=torch.long))


def test_high_share_is_a_third_for_a_flat_profile():
    freq = 10000.0 ** (-np.arange(12) / 12)
    assert freq_usage.high_share(np.ones(12), freq) == pytest.approx(1 / 3)
    assert freq_usage.high_share(np.r_[np.zeros(4), np.ones(8)], freq) == 0


def test_the_command_on_tiny_trained_runs(tmp_path, capsys):
    runs = {}
    for name in ("rope", "pope"):
        run_dir = tmp_path / name
        done = train_here(*TWO_LAYERS, "task=indirect_indexing", f"pos={name}", "trainer.max_steps=3",
                          "trainer.val_every=3", run_dir=run_dir)
        assert done["status"] == "completed", done
        runs[name] = run_dir
    out = tmp_path / "fig"
    assert freq_usage.main([str(runs["rope"]), str(runs["pope"]), "--out", str(out), "--examples", "16"]) == 0
    printed = capsys.readouterr().out
    assert (out / "freq_usage.png").stat().st_size > 1000 and "wrote" in printed
    rows = list(csv.DictReader((out / "freq_usage.csv").open()))
    means = [r for r in rows if r["head"] == "mean"]
    # rope: 8 pairs of a head dim of 16; pope: 16 components; 2 layers, q and k
    assert sum(r["scheme"] == "rope" for r in means) == 2 * 2 * 8
    assert sum(r["scheme"] == "pope" for r in means) == 2 * 2 * 16
    assert all(float(r["norm"]) > 0 for r in rows)
    md = (out / "freq_usage.md").read_text()
    assert f"| {runs['rope']} | rope | 16 | 0.25 |" in md and f"| {runs['pope']} | pope | 16 | 0.31 |" in md
    assert "layer 1 q / k" in md


def test_the_command_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert freq_usage.main([str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err
