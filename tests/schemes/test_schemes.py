"""Every positional scheme: builds, trains a step, meets its definition where it is built (at head counts and widths
its helpers are not tested at), and has the exact properties it claims."""

import copy
import inspect
import math
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from ropelab.core import positional
from ropelab.core.errors import ConfigError
from ropelab.core.model import LlamaConfig, build_model
from ropelab.core.positional.base import PositionalScheme
from ropelab.core.positional.alibi import alibi_slopes
from ropelab.core.positional.momentum import gain_squared, momentum
from ropelab.core.positional.rotary import inverse_frequencies

H, D, T = 4, 16, 12
CFG = LlamaConfig(vocab_size=11, max_len=32, d_model=H * D, n_layers=2, n_heads=H, mlp_hidden=64)
BUILT_IN = {"rope", "spectral", "bifocal", "pope", "rope_half", "alibi", "nope", "learned_abs", "sinusoidal"}
# the learnable parameters of the built-in schemes (the rest have none); a scheme added later is held only to
# "every learnable parameter gets a gradient", so adding one needs no edit here
LEARNABLE = {"spectral": {"omega", "amplitude", "phase"}, "bifocal": {"omega", "amplitude", "phase"},
             "pope": {"delta"}, "learned_abs": {"embedding"}}


def scheme(**pos):
    return positional.build(pos, head_dim=D, n_heads=H, max_len=32)


def qk(s, q, k):
    return s.transform_qk(q, k, s.prepare(q.shape[-2], q.device))


def scores(s, q, k):
    q, k = qk(s, q, k)
    return q @ k.transpose(-1, -2)


def logits(pos, idx, cfg=CFG):
    torch.manual_seed(0)
    return build_model(cfg, pos)(idx)


def test_a_scheme_is_a_module_and_a_yaml_of_one_name():
    from conftest import ROOT
    assert BUILT_IN <= set(positional.names())
    assert {p.stem for p in (ROOT / "conf" / "pos").glob("*.yaml")} == set(positional.names())
    assert all(cls.name == name for name, cls in positional.registry().items())


@pytest.mark.parametrize("name", positional.names())
def test_every_scheme_trains_a_step(name):
    torch.manual_seed(0)
    model = build_model(CFG, {"name": name})
    idx = torch.randint(0, CFG.vocab_size, (2, T))
    out = model(idx)
    assert out.shape == (2, T, CFG.vocab_size) and torch.isfinite(out).all()
    F.cross_entropy(out.flatten(0, 1), idx.flatten()).backward()
    params = model.pos.positional_parameters()
    if name in BUILT_IN:
        assert set(params) == LEARNABLE.get(name, set())
    for pname, p in params.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_every_yaml_builds_and_names_nothing_twice():
    """A yaml holds the scheme's options only: its name is the file's, momentum is configured once for all."""
    from conftest import ROOT
    from omegaconf import OmegaConf
    for path in (ROOT / "conf" / "pos").glob("*.yaml"):
        pos = OmegaConf.to_container(OmegaConf.load(path), resolve=True) or {}
        assert "name" not in pos and "momentum" not in pos, path.name
        positional.build({"name": path.stem, **pos}, head_dim=D, n_heads=H, max_len=32)


# --- bifocal ---------------------------------------------------------------------------------------

def test_bifocal_with_zero_phase_equals_rope_exactly():
    idx = torch.randint(0, CFG.vocab_size, (3, 20))
    rope = logits({"name": "rope"}, idx)
    for fraction in (0.0, 0.25, 0.5, 1.0):
        assert torch.equal(rope, logits({"name": "bifocal", "phase_std": 0.0, "spectral_fraction": fraction}, idx))


def test_bifocal_parameters_cover_only_the_spectral_heads():
    for fraction, n_spectral in ((0.5, 2), (0.25, 1), (0.375, 2), (0.125, 1), (0.1, 0), (1.0, 4), (0.0, 0)):
        s = scheme(name="bifocal", spectral_fraction=fraction)
        assert s.n_spectral == n_spectral, fraction  # round half up: 0.375·4 = 1.5 → 2, 0.125·4 = 0.5 → 1
        params = s.positional_parameters()
        assert set(params) == {"omega", "amplitude", "phase"}
        assert all(p.shape == (n_spectral, D // 2) for p in params.values())


def test_bifocal_phase_moves_only_the_spectral_heads():
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    s = scheme(name="bifocal", phase_std=0.0)
    before = scores(s, q, k)
    with torch.no_grad():
        s.positional_parameters()["phase"].fill_(0.3)
    after = scores(s, q, k)
    assert not torch.allclose(before[:, :2], after[:, :2], atol=1e-4)
    assert torch.equal(before[:, 2:], after[:, 2:])
    assert torch.equal(before[:, 2:], scores(scheme(name="rope"), q, k)[:, 2:])


def test_bifocal_and_rope_half_accept_frequency_profiles():
    for profile in ("geometric", "single", "bandpass"):
        b = scheme(name="bifocal", freqs=profile)
        expected = inverse_frequencies(D // 2, profile)
        assert torch.equal(b.positional_parameters()["omega"][0].detach(), expected)
        assert torch.equal(b.geometric.inv_freq, expected)
        r = scheme(name="rope_half", freqs=profile)
        assert torch.equal(r.rotary.inv_freq, inverse_frequencies(D // 4, profile))
    b = scheme(name="bifocal", freqs="single", single_freq=0.25)
    assert torch.equal(b.geometric.inv_freq, torch.full((D // 2,), 0.25))


# --- pope ------------------------------------------------------------------------------------------

def pope_complex_scores(s, q, k):
    """Re[q̃ conj(k̃)]-style definition with complex tensors: Σ_c μq μk cos((s − t)θ_c + δ_c)."""
    t = torch.arange(q.shape[-2], dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(D, dtype=torch.float64) / D)
    delta = s.delta.detach().double().clamp(-2 * math.pi, 0)
    mq, mk = F.softplus(q.double()), F.softplus(k.double())
    q_c = torch.polar(mq, (t[:, None] * theta).expand_as(mq))                       # μq e^{i tθ}
    k_c = torch.polar(mk, (t[:, None] * theta + delta[:, None, :]).expand_as(mk))   # μk e^{i(sθ + δ)}
    return torch.einsum("bhtc,bhsc->bhts", q_c.conj(), k_c).real  # Re Σ_c conj(q̃_tc) k̃_sc


@pytest.mark.parametrize("delta_init", ["zero", "uniform"])
def test_pope_equals_its_complex_definition(delta_init):
    torch.manual_seed(1)
    s = scheme(name="pope", delta_init=delta_init)
    if delta_init == "zero":
        with torch.no_grad():
            s.delta.uniform_(-7.0, 1.0)  # also outside the clamp range
    q, k = torch.randn(2, H, T, D), torch.randn(2, H, T, D)
    assert s.qk_width(D) == 2 * D and qk(s, q, k)[0].shape[-1] == 2 * D
    torch.testing.assert_close(scores(s, q, k).double(), pope_complex_scores(s, q, k), atol=1e-4, rtol=1e-5)
    # sign convention: a delta on component c alone shifts the phase of cos((s − t)θ_c + δ_c)
    with torch.no_grad():
        s.delta.zero_()
        s.delta[:, 0] = -1.0
    q, k = torch.zeros(1, H, T, D), torch.zeros(1, H, T, D)
    q[..., 0], k[..., 0] = 5.0, 5.0
    got = scores(s, q, k)[0, 0]
    tq, sk = 7, 3
    expected = F.softplus(torch.tensor(5.0)) ** 2 * math.cos((sk - tq) * 1.0 - 1.0) + sum(
        F.softplus(torch.tensor(0.0)) ** 2 * math.cos((sk - tq) * 10000.0 ** (-c / D)) for c in range(1, D))
    torch.testing.assert_close(got[tq, sk], torch.as_tensor(expected, dtype=torch.float32), atol=1e-4, rtol=1e-5)


def test_pope_delta_init_and_clamp():
    assert torch.equal(scheme(name="pope").delta.detach(), torch.zeros(H, D))
    u = scheme(name="pope", delta_init="uniform").delta.detach()
    assert u.shape == (H, D) and u.min() >= -2 * math.pi and u.max() <= 0 and u.std() > 0.5
    s = scheme(name="pope")
    with torch.no_grad():
        s.delta.copy_(torch.linspace(-20, 20, H * D).view(H, D))
    d = s.clamped_delta()
    assert d.min() >= -2 * math.pi and d.max() <= 0
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    clamped = scheme(name="pope")
    with torch.no_grad():
        clamped.delta.copy_(d)
    assert torch.equal(scores(s, q, k), scores(clamped, q, k))


def test_pope_scores_are_relative_and_content_free_in_phase():
    s = scheme(name="pope", delta_init="uniform")
    qv, kv = torch.randn(H, D), torch.randn(H, D)

    def score(m, n):
        q, k = torch.zeros(1, H, 32, D), torch.zeros(1, H, 32, D)
        q[0, :, m], k[0, :, n] = qv, kv
        rq, rk = qk(s, q, k)
        return (rq[0, :, m] * rk[0, :, n]).sum(-1)

    for m, n in [(5, 2), (9, 0), (20, 20)]:
        torch.testing.assert_close(score(m, n), score(m + 7, n + 7), atol=1e-4, rtol=1e-4)


# --- rope_half -------------------------------------------------------------------------------------

def test_rope_half_rotates_only_its_channels():
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    s = scheme(name="rope_half")
    assert s.rotary_dim == D // 2
    rq, rk = qk(s, q, k)
    assert torch.equal(rq[..., D // 2:], q[..., D // 2:]) and torch.equal(rk[..., D // 2:], k[..., D // 2:])
    full = positional.build({"name": "rope"}, head_dim=D // 2, n_heads=H, max_len=32)
    assert torch.equal(rq[..., : D // 2], qk(full, q[..., : D // 2], k[..., : D // 2])[0])
    assert torch.equal(scores(scheme(name="rope_half", rotary_fraction=1.0), q, k), scores(scheme(name="rope"), q, k))
    assert scheme(name="rope_half", rotary_fraction=0.25).rotary_dim == 4


# --- alibi -----------------------------------------------------------------------------------------

def test_alibi_slopes_are_the_published_values():
    assert alibi_slopes(4) == [1 / 4, 1 / 16, 1 / 64, 1 / 256]
    assert alibi_slopes(8) == [1 / 2 ** i for i in range(1, 9)]
    for n in (4, 8):
        assert alibi_slopes(n) == [1 / 2 ** (8 / n * i) for i in range(1, n + 1)]
    assert alibi_slopes(6) == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]  # reference interpolation


def test_alibi_bias_and_half_heads():
    s = scheme(name="alibi")
    bias = s.attn_bias(s.prepare(T, None))
    assert bias.shape == (H, T, T)
    t, u = 9, 4
    assert torch.equal(bias[:, t, u], -s.slopes * (t - u))
    assert torch.equal(bias[:, t, t], torch.zeros(H))
    half = scheme(name="alibi", heads_fraction=0.5)
    assert half.slopes.tolist() == [1 / 16, 1 / 256, 0.0, 0.0]
    assert torch.equal(half.attn_bias(half.prepare(T, None))[2:], torch.zeros(2, T, T))
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    assert torch.equal(qk(s, q, k)[0], q)


# --- absolute and none -----------------------------------------------------------------------------

def test_absolute_embeddings():
    x = torch.zeros(2, T, H * D)
    sin = scheme(name="sinusoidal")
    pe = sin.embed(x, sin.prepare(T, None))[0]
    p, i = 5, 3
    torch.testing.assert_close(pe[p, 2 * i], torch.tensor(math.sin(p / 10000 ** (2 * i / (H * D)))))
    torch.testing.assert_close(pe[p, 2 * i + 1], torch.tensor(math.cos(p / 10000 ** (2 * i / (H * D)))))
    learned = scheme(name="learned_abs")
    assert learned.positional_parameters()["embedding"].shape == (32, H * D)
    assert torch.equal(learned.embed(x, None)[1], learned.embedding[:T].detach())
    nope = scheme(name="nope")
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    assert torch.equal(nope.embed(x, None), x) and nope.attn_bias(nope.prepare(T, None)) is None
    assert all(torch.equal(a, b) for a, b in zip(qk(nope, q, k), (q, k)))


@pytest.mark.parametrize("name", ["nope", "learned_abs", "sinusoidal"])
def test_non_relative_schemes_see_where_not_only_how_far(name):
    """Shifting a whole (un-padded) sequence changes absolute schemes' logits; NoPE sees no positions at all
    but the causal mask, so a repeated token gets the same logits wherever its context is identical."""
    torch.manual_seed(0)
    model = build_model(CFG, {"name": name}).eval()
    tokens = torch.full((1, 16), 3)
    out = model(tokens)[0]
    same = torch.allclose(out[4], out[12], atol=1e-5)
    assert same == (name == "nope")


# --- momentum --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", positional.names())
def test_zero_momentum_is_the_scheme(name):
    idx = torch.randint(0, CFG.vocab_size, (2, T))
    assert torch.equal(logits({"name": name}, idx), logits({"name": name, "momentum": {"gamma": 0.0}}, idx))
    if name in ("rope", "pope"):
        assert not torch.equal(logits({"name": name}, idx), logits({"name": name, "momentum": {"gamma": 0.5}}, idx))


def test_momentum_matches_hand_written_example():
    q = torch.zeros(1, H, 3, D)
    q[..., 0, 0], q[..., 1, 0], q[..., 2, 0] = 1.0, 3.0, 2.0
    # q̂_t = q_t + γ(q_t − q_{t−1}), q_{−1} = 0: 1 + .5·1 = 1.5, 3 + .5·2 = 4, 2 + .5·(−1) = 1.5
    mq = momentum(q, 0.5)
    assert mq[0, 0, :, 0].tolist() == [1.5, 4.0, 1.5] and torch.equal(mq[..., 1:], torch.zeros(1, H, 3, D - 1))


@pytest.mark.parametrize("name, gamma", [("rope", 0.5), ("pope", 2.0), ("spectral", 1.0), ("alibi", 0.5)])
def test_the_attention_applies_momentum_after_any_schemes_transform(name, gamma):
    """The scheme is built without momentum; every attention block filters the scheme's q and k with γ."""
    torch.manual_seed(0)
    model = build_model(CFG, {"name": name, "momentum": {"gamma": gamma}}).eval()
    assert all(block.attn.momentum_gamma == gamma for block in model.blocks)
    idx = torch.randint(0, CFG.vocab_size, (2, T))
    x, ctx, mask = model.inputs(idx)
    block = model.blocks[0]
    h = block.attn_norm(x)
    q, k, _ = block.attn.qkv(h).view(2, T, 3, H, D).permute(2, 0, 3, 1, 4)
    q, k = qk(model.pos, q, k)
    q, k = momentum(q, gamma), momentum(k, gamma)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D) + (0 if mask is None else mask)
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    weights = block.attn(h, model.pos, ctx, mask, need_weights=True)[1]
    torch.testing.assert_close(weights, scores.softmax(-1))


def test_momentum_gain_formula():
    omega = torch.linspace(0, math.pi, 33, dtype=torch.float64)
    for gamma in (0.0, 0.5, 2.0):
        direct = (1 + gamma * (1 - torch.exp(-1j * omega))).abs() ** 2
        torch.testing.assert_close(gain_squared(omega, gamma), direct)


# --- frequency profiles ----------------------------------------------------------------------------

def test_frequency_profiles():
    geometric = inverse_frequencies(8, "geometric", 10000.0)
    torch.testing.assert_close(geometric, torch.tensor([10000.0 ** (-2 * i / 16) for i in range(8)]))
    single = inverse_frequencies(8, "single")
    assert torch.all(single == single[0]) and single[0] > 0
    assert torch.all(inverse_frequencies(8, "single", single_freq=0.1) == 0.1)
    band = inverse_frequencies(8, "bandpass", band=(0.01, 0.2))
    assert band.min() >= 0.01 * (1 - 1e-6) and band.max() <= 0.2 * (1 + 1e-6)
    default_band = inverse_frequencies(8, "bandpass")
    assert geometric.min() < default_band.min() and default_band.max() < geometric.max()


# --- refused combinations --------------------------------------------------------------------------

@pytest.mark.parametrize("pos, key", [
    ({"name": "bifocal", "spectral_fraction": 1.5}, "pos.spectral_fraction"),
    ({"name": "bifocal", "spectral_fraction": -0.1}, "pos.spectral_fraction"),
    ({"name": "bifocal", "phase_on": "value"}, "pos.phase_on"),
    ({"name": "bifocal", "freqs": "linear"}, "pos.freqs"),
    ({"name": "rope", "momentum": {"gamma": -1.0}}, "pos.momentum.gamma"),
    ({"name": "pope", "momentum": {"gamma": -0.5}}, "pos.momentum.gamma"),
    ({"name": "rope", "momentum": {"gama": 0.5}}, "pos.momentum.gama"),
    ({"name": "alibi", "freqs": "single"}, "pos.freqs"),
    ({"name": "pope", "freqs": "single"}, "pos.freqs"),
    ({"name": "nope", "base": 500}, "pos.base"),
    ({"name": "sinusoidal", "phase_std": 0.1}, "pos.phase_std"),
    ({"name": "alibi", "heads_fraction": 1.5}, "pos.heads_fraction"),
    ({"name": "alibi", "heads_fraction": 0.0}, "pos.heads_fraction"),
    ({"name": "alibi", "heads_fraction": 0.1}, "pos.heads_fraction"),
    ({"name": "pope", "delta_init": "normal"}, "pos.delta_init"),
    ({"name": "rope_half", "rotary_fraction": 0.0}, "pos.rotary_fraction"),
    ({"name": "rope_half", "rotary_fraction": 1.2}, "pos.rotary_fraction"),
    ({"name": "rope_half", "freqs": "bandpass", "band": [0.5, 0.1]}, "pos.band"),
])
def test_bad_combinations_are_refused_naming_the_key(pos, key):
    with pytest.raises(ConfigError) as err:
        build_model(CFG, pos)
    message = str(err.value)
    assert key in message and "\n" not in message


@pytest.mark.parametrize("name", ["rope", "spectral", "bifocal", "rope_half"])
def test_rotary_schemes_refuse_an_odd_head_dim(name):
    with pytest.raises(ConfigError, match="model.d_model/model.n_heads"):
        positional.build({"name": name}, head_dim=7, n_heads=2, max_len=8)


# --- each scheme's transform and tables against their formulas, at the helpers' shape -------------------

def as_complex(x):
    """rotate_half layout: channel i and i + D/2 are the real and imaginary parts of pair i."""
    return torch.complex(*x.double().chunk(2, dim=-1))


def test_rope_is_complex_multiplication_by_e_i_m_theta():
    s = scheme(name="rope")
    q, k = torch.randn(2, H, T, D), torch.randn(2, H, T, D)
    rq, rk = qk(s, q, k)
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    turn = torch.polar(torch.ones(T, D // 2, dtype=torch.float64), torch.arange(T)[:, None] * theta)
    torch.testing.assert_close(as_complex(rq), as_complex(q) * turn, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(as_complex(rk), as_complex(k) * turn, atol=1e-5, rtol=1e-5)


def test_spectral_is_amplitude_times_e_i_m_omega_plus_phase():
    s = scheme(name="spectral", phase_on="query", amplitude_on="both")
    with torch.no_grad():
        s.omega.mul_(torch.linspace(0.5, 2.0, D // 2))
        s.amplitude.copy_(torch.linspace(0.5, 1.5, H * D // 2).view(H, D // 2))
        s.phase.copy_(torch.linspace(-1.0, 1.0, H * D // 2).view(H, D // 2))
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    rq, rk = qk(s, q, k)
    omega, amp, phase = (p.detach().double()[:, None, :] for p in (s.omega, s.amplitude, s.phase))
    m = torch.arange(T, dtype=torch.float64)[:, None]
    torch.testing.assert_close(as_complex(rq), amp * as_complex(q) * torch.polar(torch.ones_like(amp * m), m * omega
                                                                                  + phase), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(as_complex(rk), amp * as_complex(k) * torch.polar(torch.ones_like(amp * m), m * omega),
                               atol=1e-5, rtol=1e-5)


def reference_slopes(n):
    """get_slopes of the ALiBi paper's code (ofirpress/attention_with_linear_biases)."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + reference_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7, 12, 16])
def test_alibi_slopes_match_the_reference_code_at_any_head_count(n):
    assert alibi_slopes(n) == pytest.approx(reference_slopes(n), rel=1e-12)


def test_rotate_and_rotate_half_are_multiplication_by_e_i_theta_and_by_i():
    from ropelab.core.positional.rotary import cos_sin, rotate, rotate_half, rotate_signed, signed_sin

    x = torch.randn(3, T, D)
    angles = torch.rand(T, D // 2) * 6
    cos, sin = cos_sin(angles)
    torch.testing.assert_close(as_complex(rotate_half(x)), 1j * as_complex(x))
    expected = as_complex(x) * torch.polar(torch.ones_like(angles.double()), angles.double())
    torch.testing.assert_close(as_complex(rotate(x, cos, sin)), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(rotate_signed(x, cos, signed_sin(sin)), rotate(x, cos, sin))


def test_length_scalings_by_their_formulas():
    """linear θ/s; NTK-aware the geometric spectrum of base · s^(D/(D−2)); YaRN per pair θ/s or θ by a ramp in
    the pair index between the pairs that turn 32 and 1 times over the training length, attention 0.1 ln s + 1.
    (tests/analyses/test_extrapolation.py checks the same against transformers when the hf extra is installed.)"""
    from ropelab.core.positional.rotary import (inverse_frequencies, scaled_inverse_frequencies,
                                                yarn_correction_range, yarn_mscale)

    dim, base, s, L = 64, 10000.0, 4.0, 128
    theta = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    inv = inverse_frequencies(dim // 2)
    lin, a = scaled_inverse_frequencies(inv, "linear", s, base)
    torch.testing.assert_close(lin.double(), theta / s)
    assert a == 1.0
    ntk, a = scaled_inverse_frequencies(inv, "ntk", s, base)
    torch.testing.assert_close(ntk.double(), (base * s ** (dim / (dim - 2))) ** (-torch.arange(0, dim, 2).double() / dim))
    assert a == 1.0
    # pair i turns i·θ_i·L/(2π) times over L tokens: 32 turns at pair ≈ −1.57 → 0, one turn at ≈ 10.47 → 11
    assert yarn_correction_range(32, 1, dim, base, L) == (0, 11)
    assert yarn_correction_range(32, 1, 16, base, 64) == (0, 3)
    assert yarn_correction_range(32, 1, 16, base, 10 ** 9) == (13, 15)  # pairs 13.4 and 16.4, clipped to D/2 − 1
    assert yarn_mscale(1.0) == 1.0 and yarn_mscale(0.5) == 1.0
    assert yarn_mscale(1.5) == pytest.approx(0.1 * math.log(1.5) + 1)
    assert yarn_mscale(s) == pytest.approx(0.1 * math.log(s) + 1)
    yarn, a = scaled_inverse_frequencies(inv, "yarn", s, base, original_max_len=L)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - 0) / (11 - 0)).clamp(0, 1)  # 0: keep θ, 1: θ / s
    torch.testing.assert_close(yarn.double(), theta * (1 - ramp) + theta / s * ramp, atol=1e-7, rtol=1e-6)
    assert a == pytest.approx(0.1 * math.log(s) + 1)
    assert scaled_inverse_frequencies(inv, "yarn", s, base, L, attention_factor=0.7)[1] == 0.7
    assert scaled_inverse_frequencies(inv, "yarn", 1.0, base, L, attention_factor=0.7) == (inv, 0.7)
    assert scaled_inverse_frequencies(inv, None, 1.0, base) == (inv, 1.0)
    same, a = scaled_inverse_frequencies(inv, "ntk", 1.0, base)
    assert same is inv and a == 1.0
    # a zero-width ramp (low == high) is widened by 0.001, as transformers does: pairs below low keep θ
    narrow, _ = scaled_inverse_frequencies(inverse_frequencies(2), "yarn", s, base, original_max_len=1)
    assert torch.isfinite(narrow).all()


def test_rope_scaling_reaches_the_tables():
    s = scheme(name="rope", scaling="yarn", scaling_factor=4.0, original_max_len=16)
    cos, _ = s.prepare(T, None)
    assert s.attention_scaling == pytest.approx(0.1 * math.log(4) + 1)
    torch.testing.assert_close(cos[0], torch.full((D,), s.attention_scaling))  # position 0: cos 0 = 1, times the factor
    lin = scheme(name="rope", scaling="linear", scaling_factor=2.0)
    plain = scheme(name="rope")
    torch.testing.assert_close(lin.prepare(T, None)[0][6], plain.prepare(T, None)[0][3])  # position 6 at s = 2 is 3


def test_bandpass_thirds_tile_the_geometric_spectrum():
    from ropelab.core.positional.rotary import band_edges, inverse_frequencies

    n, base = 16, 10000.0
    theta_min = base ** (-(n - 1) / n)  # the geometric spectrum's lowest frequency, base^(−2(D/2−1)/D)
    r = theta_min  # θ_min / θ_max, θ_max = 1
    assert band_edges(n, base, "high") == pytest.approx((r ** (1 / 3), 1.0))
    assert band_edges(n, base, "mid") == pytest.approx((r ** (2 / 3), r ** (1 / 3)))
    assert band_edges(n, base, "low") == pytest.approx((theta_min, r ** (2 / 3)))
    assert float(inverse_frequencies(n)[-1]) == pytest.approx(theta_min, rel=1e-6)
    low = inverse_frequencies(n, "bandpass@low")
    assert float(low[0]) == pytest.approx(r ** (2 / 3), rel=1e-6) and float(low[-1]) == pytest.approx(theta_min, rel=1e-6)


def test_sinusoidal_table_is_the_papers_definition_in_float64():
    from ropelab.core.positional.sinusoidal import sinusoidal_table

    table = sinusoidal_table(2048, 64)  # the default base: 10000, as in the paper
    for p in (0, 1, 777, 2047):
        for i in (0, 1, 13, 31):
            angle = p / 10000 ** (2 * i / 64)
            assert abs(float(table[p, 2 * i]) - math.sin(angle)) < 2e-7  # float64 angles, rounded once to float32
            assert abs(float(table[p, 2 * i + 1]) - math.cos(angle)) < 2e-7
    s = positional.build({"name": "sinusoidal", "base": 100.0, "scale": 2.0}, head_dim=8, n_heads=2, max_len=16)
    torch.testing.assert_close(s.table, 2.0 * sinusoidal_table(16, 16, 100.0))


def test_learned_absolute_starts_at_its_init_std():
    torch.manual_seed(0)
    default = positional.build({"name": "learned_abs"}, head_dim=32, n_heads=4, max_len=64).embedding.detach()
    wide = positional.build({"name": "learned_abs", "init_std": 0.5}, head_dim=32, n_heads=4, max_len=64).embedding.detach()
    assert default.shape == (64, 128)
    assert 0.019 < float(default.std()) < 0.021 and 0.48 < float(wide.std()) < 0.52


NAMES = positional.names()


@pytest.mark.parametrize("name", NAMES)
def test_a_scheme_keeps_its_shape_and_its_name_and_checkpoints_only_its_parameters(name):
    """Every scheme records (head_dim, n_heads, max_len) and is named by its file; its tables are rebuilt from
    the config, so a checkpoint (state_dict) holds its learnable parameters and nothing else."""
    s = scheme(name=name)
    assert (s.head_dim, s.n_heads, s.max_len) == (D, H, 32)
    assert s.name == name == type(s).__module__.rpartition(".")[2]
    assert set(s.state_dict()) == {n for n, _ in s.named_parameters()}


def test_bifocal_passes_its_options_to_both_parts_and_splits_the_heads_where_it_says():
    from ropelab.core.errors import ConfigError

    b = scheme(name="bifocal", base=100.0)
    geometric = 100.0 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    torch.testing.assert_close(b.geometric.inv_freq, geometric)
    torch.testing.assert_close(b.spectral.omega.detach()[0], geometric)
    assert float(b.spectral.phase.detach().abs().max()) < 0.01  # the paper's N(0, 1e-3) by default
    band = scheme(name="bifocal", freqs="bandpass", band=[0.01, 0.1])
    torch.testing.assert_close(band.geometric.inv_freq[[0, -1]], torch.tensor([0.1, 0.01]))
    torch.testing.assert_close(band.spectral.omega.detach()[0, [0, -1]], torch.tensor([0.1, 0.01]))
    opts = scheme(name="bifocal", share=True, amplitude_on="query")
    assert opts.spectral.omega.shape == (1, D // 2) and opts.spectral.amplitude_on == "query"
    with pytest.raises(ConfigError, match="spectral_fraction"):
        scheme(name="bifocal", spectral_fraction=True)
    rope = scheme(name="rope")
    for fraction, seq in ((0.25, T), (0.5, 2)):  # one spectral head; and as many spectral heads as positions
        s = scheme(name="bifocal", spectral_fraction=fraction)
        with torch.no_grad():
            s.spectral.phase.fill_(0.5)
        q, k = torch.randn(1, H, seq, D), torch.randn(1, H, seq, D)
        (bq, _), (rq, _) = qk(s, q, k), qk(rope, q, k)
        n = s.n_spectral
        assert torch.equal(bq[:, n:], rq[:, n:]) and not torch.allclose(bq[:, :n], rq[:, :n])


def test_rope_half_passes_its_frequency_options_on():
    from ropelab.core.errors import ConfigError

    r = scheme(name="rope_half", base=100.0)
    R = D // 2
    torch.testing.assert_close(r.rotary.inv_freq, 100.0 ** (-torch.arange(0, R, 2, dtype=torch.float32) / R))
    single = scheme(name="rope_half", freqs="single", single_freq=0.3)
    assert torch.equal(single.rotary.inv_freq, torch.full((R // 2,), 0.3))
    with pytest.raises(ConfigError, match="rotary_fraction"):
        scheme(name="rope_half", rotary_fraction=True)


def test_alibi_of_no_head_and_a_boolean_fraction():
    from ropelab.core.errors import ConfigError

    assert alibi_slopes(0) == []
    with pytest.raises(ConfigError, match="heads_fraction"):
        scheme(name="alibi", heads_fraction=True)


@pytest.mark.parametrize("scaling,options", [("linear", {}), ("ntk", {}), ("yarn", {}),
                                             ("yarn", {"beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 0.8})])
def test_rope_builds_its_tables_from_the_scaled_frequencies(scaling, options):
    from ropelab.core.positional.rotary import inverse_frequencies, scaled_inverse_frequencies

    s = scheme(name="rope", scaling=scaling, scaling_factor=2.0, original_max_len=8, **options)
    inv, attention = scaled_inverse_frequencies(inverse_frequencies(D // 2), scaling, 2.0, 10000.0, 8,
                                                options.get("beta_fast", 32.0), options.get("beta_slow", 1.0),
                                                options.get("attention_factor"))
    assert torch.equal(s.inv_freq, inv) and s.attention_scaling == attention
    angles = torch.arange(32, dtype=torch.float64)[:, None] * inv.double()
    full = torch.cat((angles, angles), -1)
    torch.testing.assert_close(s.cos.double(), full.cos() * attention, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(s.sin.double(), full.sin() * attention, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("side", ["query", "key"])
def test_spectral_amplitude_on_one_side_and_its_frequency_options(side):
    s = scheme(name="spectral", phase_std=0.0, amplitude_on=side)
    with torch.no_grad():
        s.amplitude.fill_(2.0)
    q, k = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
    rq, rk = qk(s, q, k)
    pq, pk = qk(scheme(name="rope"), q, k)
    torch.testing.assert_close(rq, pq * (2.0 if side == "query" else 1.0))
    torch.testing.assert_close(rk, pk * (2.0 if side == "key" else 1.0))
    single = scheme(name="spectral", freqs="single", single_freq=0.3)
    assert torch.equal(single.omega.detach(), torch.full((H, D // 2), 0.3))
    assert float(single.phase.detach().abs().max()) < 0.01  # N(0, 1e-3) by default


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


# === every scheme where it is built, against its definition written out here ===============================
# The tests above mostly hold a scheme to its helpers at one shape (4 heads, head_dim 16 or 32). Here each scheme
# is built as a run builds it (``build_model`` → ``positional.build``) and the model's logits are compared with a
# float64 forward whose positional part is the scheme's definition in complex numbers, written out below without
# any ropelab helper; at head counts and widths the helpers' tests do not use. Tolerance: the schemes' cos/sin
# tables are float32 (angles up to max_len rad), so they meet the float64 definition to ~1e-6; every wrong call
# shown in the mutant tests at the end moves a logit by > 1e-2.

MAX_LEN = 24
# (n_heads, head_dim, batch, seq_len): odd and even head counts; head_dim not a power of two with an odd number of
# rotary pairs; n_heads == head_dim/2, where a transposed (H, D/2) parameter would broadcast silently; batch 1 and
# more; one token, and every position the model has (seq_len == max_len)
SHAPES = [(3, 10, 1, 7), (4, 8, 2, 13), (5, 12, 3, 11), (2, 4, 3, 1), (1, 6, 2, MAX_LEN), (6, 14, 1, MAX_LEN),
          (8, 16, 2, 9)]
SHAPE_IDS = [f"H{h}-D{d}-B{b}-T{t}" for h, d, b, t in SHAPES]
SETUPS = {
    "rope": {"name": "rope"},
    "rope-base500": {"name": "rope", "base": 500},
    "spectral": {"name": "spectral"},
    "spectral-key-phase-query-amp": {"name": "spectral", "phase_on": "key", "amplitude_on": "query"},
    "spectral-shared-both": {"name": "spectral", "share": True, "phase_on": "both", "amplitude_on": "key"},
    "bifocal": {"name": "bifocal"},
    "bifocal-quarter-key": {"name": "bifocal", "spectral_fraction": 0.25, "phase_on": "key"},
    "bifocal-shared": {"name": "bifocal", "spectral_fraction": 0.7, "share": True},
    "pope": {"name": "pope"},
    "pope-uniform-base100": {"name": "pope", "delta_init": "uniform", "base": 100},
    "rope_half": {"name": "rope_half"},
    "rope_half-0.3": {"name": "rope_half", "rotary_fraction": 0.3},
    "alibi": {"name": "alibi"},
    "alibi-half": {"name": "alibi", "heads_fraction": 0.5},
    "learned_abs": {"name": "learned_abs"},
    "sinusoidal": {"name": "sinusoidal"},
    "sinusoidal-scaled": {"name": "sinusoidal", "base": 100, "scale": 0.5},
    "nope": {"name": "nope"},
    "momentum-rope": {"name": "rope", "momentum": {"gamma": 0.5}},
    "momentum-pope-per-layer": {"name": "pope", "momentum": {"gamma": [1.0, 0.25]}},
    "momentum-bifocal-normalized": {"name": "bifocal", "momentum": {"gamma": 0.7, "normalize": True}},
    "momentum-alibi": {"name": "alibi", "heads_fraction": 0.5, "momentum": {"gamma": 0.3}},
    "momentum-rope_half": {"name": "rope_half", "momentum": {"gamma": 2.0}},
}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tensors here are tiny: a second thread only adds its barrier waits (5x the time on a loaded machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def rope_frequencies(width: int, base: float) -> torch.Tensor:
    """θ_i = base^(−2i/width), i = 0 … width/2 − 1."""
    return float(base) ** (-2 * torch.arange(width // 2, dtype=torch.float64) / width)


def turn(angles: torch.Tensor) -> torch.Tensor:
    return torch.polar(torch.ones_like(angles), angles)


def spectral_reference(q, k, t, omega, amplitude, phase, phase_on="query", amplitude_on="both"):
    """A ⊙ (x · e^{i(tΩ + Φ)}) per head, Φ and A on the configured side(s); Ω, A, Φ of shape (H or 1, D/2)."""
    omega, amplitude, phase = (p.detach().double()[:, None, :] for p in (omega, amplitude, phase))
    plain = turn(t[:, None] * omega)
    shifted = turn(t[:, None] * omega + phase)
    q_turn = shifted if phase_on in ("query", "both") else plain
    k_turn = shifted if phase_on in ("key", "both") else plain
    q_amp = amplitude if amplitude_on in ("query", "both") else 1.0
    k_amp = amplitude if amplitude_on in ("key", "both") else 1.0
    return q_amp * as_complex(q) * q_turn, k_amp * as_complex(k) * k_turn


def reference_qk(pos: dict, s, q, k):
    """(q̃, k̃), complex (B, H, T, ·), whose scores are Re Σ q̃ conj(k̃): each scheme's definition, in float64."""
    name, (_, H, T, D) = pos["name"], q.shape
    t = torch.arange(T, dtype=torch.float64)
    base = pos.get("base", 10000.0)
    if name == "rope":  # q · e^{itθ}
        rotation = turn(t[:, None] * rope_frequencies(D, base))
        return as_complex(q) * rotation, as_complex(k) * rotation
    if name == "spectral":
        p = s.positional_parameters()
        return spectral_reference(q, k, t, p["omega"], p["amplitude"], p["phase"], pos.get("phase_on", "query"),
                                  pos.get("amplitude_on", "both"))
    if name == "bifocal":  # the first round-half-up(fraction · H) heads spectral, the others rope
        n = round_half_up(pos.get("spectral_fraction", 0.5) * H)
        p = s.positional_parameters()
        qs, ks = spectral_reference(q[:, :n], k[:, :n], t, p["omega"], p["amplitude"], p["phase"],
                                    pos.get("phase_on", "query"), pos.get("amplitude_on", "both"))
        qg, kg = reference_qk({"name": "rope"}, s, q[:, n:], k[:, n:])
        return torch.cat((qs, qg), dim=1), torch.cat((ks, kg), dim=1)
    if name == "rope_half":  # rope on the first R = 2 · round-half-up(fraction · D/2) channels, the rest as they are
        R = 2 * round_half_up(pos.get("rotary_fraction", 0.5) * D / 2)
        rotation = turn(t[:, None] * rope_frequencies(R, base))
        return (torch.cat((as_complex(q[..., :R]) * rotation, q[..., R:].to(torch.complex128)), dim=-1),
                torch.cat((as_complex(k[..., :R]) * rotation, k[..., R:].to(torch.complex128)), dim=-1))
    if name == "pope":  # μq e^{itθ}, μk e^{i(sθ + δ)}: Re Σ q̃ conj(k̃) = Σ μq μk cos((s − t)θ + δ)
        theta = float(base) ** (-torch.arange(D, dtype=torch.float64) / D)
        delta = s.delta.detach().double().clamp(-2 * math.pi, 0.0)[:, None, :]
        return (F.softplus(q) * turn(t[:, None] * theta), F.softplus(k) * turn(t[:, None] * theta + delta))
    return q.to(torch.complex128), k.to(torch.complex128)  # alibi, the absolute schemes, nope: q and k untouched


def reference_bias(pos: dict, H: int, T: int):
    """ALiBi's −m_h (t − s): the paper's slopes for the first round-half-up(fraction · H) heads, 0 for the rest."""
    if pos["name"] != "alibi":
        return 0.0
    n = round_half_up(pos.get("heads_fraction", 1.0) * H)
    slopes = torch.tensor(reference_slopes(n) + [0.0] * (H - n), dtype=torch.float64)
    t = torch.arange(T, dtype=torch.float64)
    return -slopes[:, None, None] * (t[:, None] - t[None, :])


def reference_positions(pos: dict, s, T: int, d_model: int):
    """What the scheme adds to the token embeddings: learned rows, Vaswani's sinusoids, or nothing."""
    if pos["name"] == "learned_abs":
        return s.embedding.detach().double()[:T]
    if pos["name"] == "sinusoidal":
        p = torch.arange(T, dtype=torch.float64)[:, None]
        i = torch.arange(d_model, dtype=torch.float64)[None, :]
        angle = p / float(pos.get("base", 10000.0)) ** ((i - i % 2) / d_model)  # channels 2i and 2i+1 share 2i/d
        return pos.get("scale", 1.0) * torch.where(i % 2 == 0, angle.sin(), angle.cos())
    return 0.0


def reference_momentum(x, gamma: float, normalize: bool):
    """x̂_t = x_t + γ(x_t − x_{t−1}), x_{−1} = 0; normalised: the term scaled to ‖x_t‖ (0 stays 0)."""
    term = x - torch.cat((torch.zeros_like(x[..., :1, :]), x[..., :-1, :]), dim=-2)
    if normalize:
        length = term.abs().pow(2).sum(-1, keepdim=True).sqrt()
        term = torch.where(length > 0, term * x.abs().pow(2).sum(-1, keepdim=True).sqrt() / length, term)
    return x + gamma * term


def reference_logits(model, pos: dict, idx):
    """Llama in float64 by its definition (RMSNorm, causal softmax attention at 1/√head_dim, SwiGLU, residuals),
    with the scheme's definition where it acts: the embeddings, q and k, the score bias, then momentum."""
    cfg, s = model.cfg, model.pos
    B, T = idx.shape
    H, D = cfg.n_heads, cfg.head_dim
    block = dict(pos.get("momentum") or {})
    gamma = block.get("gamma", 0.0)
    gammas = gamma if isinstance(gamma, list) else [gamma] * cfg.n_layers

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.norm_eps) * w.double()

    def heads(t):
        return t.view(B, T, H, D).transpose(1, 2)

    x = model.embed.weight.double()[idx] + reference_positions(pos, s, T, cfg.d_model)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for layer, blk in enumerate(model.blocks):
        h = rms(x, blk.attn_norm.weight)
        q, k, v = (heads(t) for t in (h @ blk.attn.qkv.weight.double().T).split(cfg.d_model, -1))
        q, k = reference_qk(pos, s, q, k)
        if gammas[layer]:
            q = reference_momentum(q, gammas[layer], block.get("normalize", False))
            k = reference_momentum(k, gammas[layer], block.get("normalize", False))
        scores = (q @ k.conj().transpose(-1, -2)).real / math.sqrt(D) + reference_bias(pos, H, T)
        weights = scores.masked_fill(future, -math.inf).softmax(-1)
        x = x + (weights @ v).transpose(1, 2).reshape(B, T, cfg.d_model) @ blk.attn.out.weight.double().T
        gate, up = (rms(x, blk.mlp_norm.weight) @ blk.mlp.gate_up.weight.double().T).chunk(2, -1)
        x = x + (F.silu(gate) * up) @ blk.mlp.down.weight.double().T
    return rms(x, model.norm.weight) @ model.lm_head.weight.double().T


@torch.no_grad()
def moved_off_init(s, seed: int = 7):
    """Learnable positional parameters set to distinct values per head and pair (at init Ω's rows are all equal and A
    is 1, so a scheme reading the wrong head or pair would still agree); δ partly outside its clamp range."""
    g = torch.Generator().manual_seed(seed)
    for name, p in s.positional_parameters().items():
        u = torch.rand(p.shape, generator=g, dtype=p.dtype)
        if name == "omega":
            p.mul_(0.5 + 1.5 * u)
        elif name == "amplitude":
            p.copy_(0.5 + u)
        elif name == "phase":
            p.copy_(2 * u - 1)
        elif name == "delta":
            p.copy_(-8 + 10 * u)
        else:
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return s


def built(pos: dict, n_heads: int, head_dim: int, seed: int = 0, moved: bool = True, dtype=torch.float64):
    cfg = LlamaConfig(vocab_size=13, max_len=MAX_LEN, d_model=n_heads * head_dim, n_layers=2, n_heads=n_heads,
                      mlp_hidden=24, init_std=0.3)  # init_std 0.3: peaked attention, so positions matter to logits
    torch.manual_seed(seed)
    model = build_model(cfg, pos).to(dtype)
    if moved:
        moved_off_init(model.pos)
    return model


def tokens(batch: int, seq_len: int, seed: int = 1):
    return torch.randint(0, 13, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


# schemes that read float32 tables (cos/sin or sinusoids computed at build) meet the float64 definition to ~1e-6
# (momentum's (1 + 2γ)× gain on the fastest pairs makes it ~1e-5); the others compute in the model's float64
FLOAT32_TABLES = {"rope", "rope_half", "pope", "bifocal", "sinusoidal"}
ROTARY = {"rope", "spectral", "bifocal", "rope_half"}  # they pair channels: an even head_dim only


def assert_is_its_definition(pos: dict, shape):
    H, D, B, T = shape
    model = built(pos, H, D)
    idx = tokens(B, T)
    with torch.no_grad():
        got = model(idx)
    tolerance = 1e-4 if pos["name"] in FLOAT32_TABLES else 1e-10
    torch.testing.assert_close(got, reference_logits(model, pos, idx), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("setup", SETUPS)
def test_a_built_scheme_is_its_definition(setup, shape):
    assert_is_its_definition(SETUPS[setup], shape)


@pytest.mark.parametrize("setup", [s for s, pos in SETUPS.items() if pos["name"] not in ROTARY])
def test_a_scheme_without_rotary_pairs_is_its_definition_at_an_odd_head_dim(setup):
    assert_is_its_definition(SETUPS[setup], (3, 5, 2, 9))  # d_model 15: odd, and so the sinusoids' last channel


def test_the_definitions_cover_every_scheme():
    assert {pos["name"] for pos in SETUPS.values()} == BUILT_IN


# --- exact identities, at the same shapes ----------------------------------------------------------------------

def logits_of(pos: dict, shape, seed: int = 0, moved: bool = False):
    """The logits of a float32 model (as runs compute), and the model."""
    H, D, B, T = shape
    model = built(pos, H, D, seed, moved, torch.float32)
    with torch.no_grad():
        return model(tokens(B, T)), model


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_spectral_at_init_is_rope(shape):
    """Δ := a scheme's logits − rope's, both built from one seed (the backbone is the same: a scheme draws its init
    from a forked RNG). At init Ω = rope's θ and A = 1 bit for bit, in every head; so with Φ = 0 (phase_std 0) Δ = 0
    bit for bit for spectral on every side and bifocal at every split, and with the paper's Φ ~ N(0, 1e-3) on both
    sides Φ cancels in q·kᵀ: Δ = 0 up to the rounding of tΩ + Φ (1e-5). On one side Φ shifts the phase: Δ ≠ 0."""
    H, D, _, _ = shape
    rope, rope_model = logits_of({"name": "rope"}, shape)
    spectral = logits_of({"name": "spectral"}, shape)[1].pos
    assert torch.equal(spectral.omega, rope_model.pos.inv_freq.expand(H, D // 2))
    assert torch.equal(spectral.amplitude, torch.ones(H, D // 2))
    assert 0 < float(spectral.phase.detach().abs().max()) < 1e-2  # N(0, 1e-3): 10σ at most
    for side in ("query", "key", "both"):
        assert torch.equal(logits_of({"name": "spectral", "phase_std": 0.0, "phase_on": side}, shape)[0], rope), side
    for n_spectral in range(H + 1):
        pos = {"name": "bifocal", "phase_std": 0.0, "spectral_fraction": n_spectral / H}
        assert torch.equal(logits_of(pos, shape)[0], rope), n_spectral
    torch.testing.assert_close(logits_of({"name": "spectral", "phase_on": "both"}, shape)[0], rope, rtol=1e-5,
                               atol=1e-5)
    if shape[3] > 1:  # one token attends to itself only: its phase cannot show
        assert not torch.equal(logits_of({"name": "spectral", "phase_on": "query"}, shape)[0], rope)


RELATIVE = ["rope", "spectral", "bifocal", "rope_half", "pope", "alibi", "nope"]


@pytest.mark.parametrize("shape", [s for s in SHAPES if s[3] > 1], ids=[i for s, i in zip(SHAPES, SHAPE_IDS) if s[3] > 1])
@pytest.mark.parametrize("name", RELATIVE)
def test_relative_schemes_score_only_the_distance(name, shape):
    """One token repeated: every position has the same q and k before the scheme, so a relative scheme's scores
    (q·kᵀ plus its bias) at (t, s) equal those at (t + 1, s + 1), for every pair, with learned parameters off
    their init. Tolerance: the float32 tables' angles round to ~1e-6 rad per position."""
    H, D, B, T = shape
    model = built({"name": name}, H, D)
    x, ctx, _ = model.inputs(torch.full((B, T), 5))
    block = model.blocks[1]
    q, k, _ = block.attn.qkv(block.attn_norm(x)).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
    q, k = model.pos.transform_qk(q, k, ctx)
    bias = model.pos.attn_bias(ctx)
    scores = (q @ k.transpose(-1, -2) + (0 if bias is None else bias)).detach()
    torch.testing.assert_close(scores[..., 1:, 1:], scores[..., :-1, :-1], rtol=1e-5, atol=1e-5)
    assert scores.std() > 1e-2 or name == "nope"  # not vacuous: scores vary with the distance


@pytest.mark.parametrize("shape", SHAPES[:3], ids=SHAPE_IDS[:3])
def test_pope_scores_are_its_complex_definition(shape):
    """Re Σ_c μq μk e^{i((s − t)θ_c + δ_c)}, μ = softplus, θ_c = base^(−c/d), δ clamped to [−2π, 0], per head."""
    H, D, B, T = shape
    s = moved_off_init(positional.build({"name": "pope"}, head_dim=D, n_heads=H, max_len=MAX_LEN))
    q, k = torch.randn(B, H, T, D, dtype=torch.float64), torch.randn(B, H, T, D, dtype=torch.float64)
    rq, rk = s.transform_qk(q, k, s.prepare(T, None))
    t = torch.arange(T, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(D, dtype=torch.float64) / D)
    delta = s.delta.detach().double().clamp(-2 * math.pi, 0)
    phase = (t[None, :, None] - t[:, None, None]) * theta + delta[:, None, None, :]  # (H, t, s, c): (s − t)θ + δ
    expected = torch.einsum("bhtc,bhsc,htsc->bhts", F.softplus(q), F.softplus(k), torch.exp(1j * phase).real)
    torch.testing.assert_close((rq @ rk.transpose(-1, -2)).double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", SHAPES[:3], ids=SHAPE_IDS[:3])
@pytest.mark.parametrize("setup", ["spectral", "bifocal-shared", "pope", "learned_abs", "alibi-half", "rope_half",
                                   "sinusoidal", "momentum-pope-per-layer"])
def test_a_copied_scheme_is_the_original_bit_for_bit(setup, shape):
    """A deep copy, and a model built from another seed loaded with the state_dict, give the original's logits bit
    for bit (learned parameters off their init); so does the model rebuilt at twice the length, as extrapolation
    rebuilds it, on the positions both have (but learned_abs, whose table is max_len long)."""
    pos, (H, D, B, T) = SETUPS[setup], shape
    original, model = logits_of(pos, shape, moved=True)
    idx = tokens(B, T)
    with torch.no_grad():
        assert torch.equal(copy.deepcopy(model)(idx), original)
        other = logits_of(pos, shape, seed=1)[1]
        assert not torch.equal(other(idx), original)
        other.load_state_dict(model.state_dict())
        assert torch.equal(other(idx), original)
        if pos["name"] != "learned_abs":
            longer = build_model(LlamaConfig(**{**vars(model.cfg), "max_len": 2 * MAX_LEN}), pos)
            longer.load_state_dict(model.state_dict())
            assert torch.equal(longer(idx), original)


# --- the class of bug these tests exist for ----------------------------------------------------------------------
# A scheme that calls a correct helper wrongly, in a way visible only at a shape the helpers' tests do not use
# (issue 44). Each mutant is one line of the scheme's real source changed; the shapes where it shows are named.
# ``SHAPE_OF_THE_OLD_TESTS`` is where the helper tests build schemes (4 heads, head_dim 16): there the mutant is
# the scheme exactly, so no test at that shape can see it; the definitions above, at their shapes, fail on it.

SHAPE_OF_THE_OLD_TESTS = (4, 16, 2, 12)
MUTANTS = {
    # Ω's head and pair axes swapped where they broadcast: a (H, D/2) table read as (D/2, H) when H == D/2
    "spectral-omega-transposed": ("spectral", "SpectralRoPE", "prepare",
                                  "self.positions[:seq_len, None] * self.omega[:, None, :]",
                                  "self.positions[:seq_len, None] * (self.omega.mT if self.omega.shape[0] == "
                                  "self.omega.shape[1] else self.omega)[:, None, :]",
                                  ["spectral", "spectral-key-phase-query-amp"], (4, 8, 2, 13)),
    # the default half split as n_heads // 2: rounds down where the scheme promises half up (odd head counts)
    "bifocal-half-split-rounds-down": ("bifocal", "Bifocal", "__init__",
                                       "self.n_spectral = math.floor(spectral_fraction * n_heads + 0.5)",
                                       "self.n_spectral = n_heads // 2 if spectral_fraction == 0.5 else "
                                       "math.floor(spectral_fraction * n_heads + 0.5)",
                                       ["bifocal"], (3, 10, 1, 7)),
    # Python's round (half to even) for ALiBi's heads: 2.5 heads → 2, not 3
    "alibi-heads-round-half-even": ("alibi", "ALiBi", "__init__",
                                    "self.n_alibi = math.floor(heads_fraction * n_heads + 0.5)",
                                    "self.n_alibi = round(heads_fraction * n_heads)",
                                    ["alibi-half", "momentum-alibi"], (5, 12, 3, 11)),
    # the same for rope_half's rotated pairs: 2.5 pairs → 2, not 3
    "rope_half-pairs-round-half-even": ("rope_half", "RoPEHalf", "__init__",
                                        "rotary_dim = 2 * math.floor(rotary_fraction * head_dim / 2 + 0.5)",
                                        "rotary_dim = 2 * round(rotary_fraction * head_dim / 2)",
                                        ["rope_half", "momentum-rope_half"], (3, 10, 1, 7)),
}


def apply_mutant(monkeypatch, name: str) -> None:
    """Replace one method of a scheme by its source with one line changed (``MUTANTS[name]``)."""
    module_name, class_name, method, old, new, *_ = MUTANTS[name]
    module = sys.modules[f"ropelab.core.positional.{module_name}"]
    cls = getattr(module, class_name)
    source = textwrap.dedent(inspect.getsource(getattr(cls, method)))
    assert source.count(old) == 1, f"{name}: the line it mutates is no longer in {class_name}.{method}"
    # zero-argument super() needs the class body; the base class named instead is the same call
    source = source.replace(old, new).replace("super().__init__(", "PositionalScheme.__init__(self, ")
    namespace = {**vars(module), "PositionalScheme": PositionalScheme}
    exec(compile(source, f"<mutant {name}>", "exec"), namespace)
    monkeypatch.setattr(cls, method, namespace[method])


@pytest.mark.parametrize("mutant", MUTANTS)
def test_a_scheme_built_wrongly_on_a_correct_helper_is_caught(mutant, monkeypatch):
    *_, setups, shape = MUTANTS[mutant]
    correct = {setup: logits_of(SETUPS[setup], SHAPE_OF_THE_OLD_TESTS, moved=True)[0] for setup in setups}
    for setup in setups:
        assert_is_its_definition(SETUPS[setup], shape)
    apply_mutant(monkeypatch, mutant)
    for setup in setups:
        assert torch.equal(logits_of(SETUPS[setup], SHAPE_OF_THE_OLD_TESTS, moved=True)[0], correct[setup])
        with pytest.raises((AssertionError, ConfigError)):
            assert_is_its_definition(SETUPS[setup], shape)
