"""Exact properties of the rotary schemes: Δ = 0 at init, relative invariance, Φ's effect."""

import pytest
import torch

from ropelab.core import positional
from ropelab.core.model import LlamaConfig, build_model

H, D, T = 4, 32, 24


def scheme(**pos):
    return positional.build(pos, head_dim=D, n_heads=H, max_len=64)


def scores(s, q, k):
    ctx = s.prepare(q.shape[-2], q.device)
    q, k = s.transform_qk(q, k, ctx)
    return q @ k.transpose(-1, -2)


def test_spectral_with_zero_phase_equals_rope_exactly():
    q, k = torch.randn(2, H, T, D), torch.randn(2, H, T, D)
    for side in ("query", "key", "both"):
        spectral = scheme(name="spectral", phase_std=0.0, phase_on=side)
        assert torch.equal(scores(scheme(name="rope"), q, k), scores(spectral, q, k))


def test_spectral_model_equals_rope_model_at_init():
    cfg = LlamaConfig(vocab_size=11, max_len=40, d_model=64, n_layers=2, n_heads=4)
    idx = torch.randint(0, 11, (3, 40))
    outs = []
    for pos in ({"name": "rope"}, {"name": "spectral", "phase_std": 0.0}):
        torch.manual_seed(0)
        outs.append(build_model(cfg, pos)(idx))
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("name", ["rope", "spectral"])
def test_rotary_scores_depend_only_on_relative_position(name):
    s = scheme(name=name)
    qv, kv = torch.randn(H, 1, D), torch.randn(H, 1, D)
    ctx = s.prepare(64, None)

    def score(m, n):
        q = torch.zeros(1, H, 64, D)
        k = torch.zeros(1, H, 64, D)
        q[0, :, m], k[0, :, n] = qv[:, 0], kv[:, 0]
        rq, rk = s.transform_qk(q, k, ctx)
        return (rq[0, :, m] * rk[0, :, n]).sum(-1)

    for m, n in [(5, 2), (9, 0), (20, 20)]:
        for shift in (1, 7, 30):
            torch.testing.assert_close(score(m, n), score(m + shift, n + shift), atol=1e-4, rtol=1e-4)


def test_phase_changes_scores_only_when_one_sided():
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    base = scores(scheme(name="spectral", phase_std=0.0), q, k)
    for side, changes in (("query", True), ("key", True), ("both", False)):
        s = scheme(name="spectral", phase_std=0.0, phase_on=side)
        with torch.no_grad():
            s.phase.fill_(0.3)
        moved = not torch.allclose(scores(s, q, k), base, atol=1e-5)
        assert moved == changes, side


def test_spectral_parameters_are_named_and_per_head():
    s = scheme(name="spectral")
    params = s.positional_parameters()
    assert set(params) == {"omega", "amplitude", "phase"}
    assert all(p.shape == (H, D // 2) for p in params.values())
    torch.testing.assert_close(params["omega"][0], 10000.0 ** (-torch.arange(0, D, 2).float() / D))
    assert torch.equal(params["amplitude"], torch.ones(H, D // 2))
