"""Every positional scheme: builds, trains a step, and has the exact properties it claims."""

import math

import pytest
import torch
import torch.nn.functional as F

from ropelab.core import positional
from ropelab.core.errors import ConfigError
from ropelab.core.model import LlamaConfig, build_model
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
