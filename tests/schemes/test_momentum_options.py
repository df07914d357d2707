"""Momentum's options around every scheme (issue 38, ``ropelab.core.positional.momentum``): γ per layer, warm-up,
the paper's adaptive γ, normalisation of the momentum term; their identities, their rules step by step, their
refusals, and what the packed launcher does with them."""

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from conftest import TINY, train_here
from ropelab.core.build import check_config
from ropelab.core.config import compose
from ropelab.core.errors import ConfigError
from ropelab.core.lit import LitLM
from ropelab.core.model import LlamaConfig, build_model
from ropelab.core.packed import Pack, check_packable
from ropelab.core.positional.momentum import (Adaptive, GammaSchedule, MomentumOptions, momentum, normalized,
                                              options_of)

H, D, T, LAYERS = 2, 16, 10, 4
CFG = LlamaConfig(vocab_size=11, max_len=32, d_model=H * D, n_layers=LAYERS, n_heads=H, mlp_hidden=64)
SCHEMES = ("rope", "spectral", "pope", "alibi", "nope")


def built(pos):
    torch.manual_seed(0)
    return build_model(CFG, pos)


def logits_and_grads(pos, idx):
    model = built(pos)
    out = model(idx)
    F.cross_entropy(out.flatten(0, 1), idx.flatten()).backward()
    return out.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def assert_bit_identical(a, b):
    assert torch.equal(a[0], b[0])
    assert a[1].keys() == b[1].keys() and all(torch.equal(a[1][n], b[1][n]) for n in a[1])


IDX = torch.randint(0, CFG.vocab_size, (2, T), generator=torch.Generator().manual_seed(1))


# --- identities ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SCHEMES)
def test_gamma_zero_in_any_form_is_the_plain_scheme_bit_for_bit(name):
    """γ = 0 as a list, a linear rule, with normalisation or a warm-up: the plain scheme's logits and gradients."""
    plain = logits_and_grads({"name": name}, IDX)
    for momentum_block in ({"gamma": [0.0] * LAYERS}, {"per_layer": "linear", "gamma_shallow": 0, "gamma_deep": 0},
                           {"gamma": 0.0, "normalize": True}, {"gamma": 0.0, "warmup_steps": 5}):
        assert_bit_identical(plain, logits_and_grads({"name": name, "momentum": momentum_block}, IDX))


@pytest.mark.parametrize("name", SCHEMES)
def test_a_constant_gamma_list_or_rule_is_scalar_gamma_bit_for_bit(name):
    scalar = logits_and_grads({"name": name, "momentum": {"gamma": 0.7}}, IDX)
    assert_bit_identical(scalar, logits_and_grads({"name": name, "momentum": {"gamma": [0.7] * LAYERS}}, IDX))
    assert_bit_identical(scalar, logits_and_grads(
        {"name": name, "momentum": {"per_layer": "linear", "gamma_shallow": 0.7, "gamma_deep": 0.7}}, IDX))
    assert not torch.equal(scalar[0], logits_and_grads({"name": name}, IDX)[0])


def block_outputs(pos):
    model = built(pos).eval()
    outputs = []
    hooks = [b.register_forward_hook(lambda m, i, o: outputs.append(o.detach())) for b in model.blocks]
    model(IDX)
    for h in hooks:
        h.remove()
    return model, outputs


@pytest.mark.parametrize("layer", range(LAYERS))
def test_per_layer_gamma_reaches_its_layer_and_no_other(layer):
    """γ > 0 in one layer only: every block before it computes the plain model's stream, that block does not,
    and its attention applies exactly that γ (recomputed by hand from the block's input)."""
    gammas = [0.0] * LAYERS
    gammas[layer] = 0.9
    _, plain = block_outputs({"name": "rope"})
    model, out = block_outputs({"name": "rope", "momentum": {"gamma": gammas}})
    assert [b.attn.momentum_gamma for b in model.blocks] == gammas
    for i in range(layer):
        assert torch.equal(out[i], plain[i])
    assert not torch.allclose(out[layer], plain[layer])
    # the block by hand, from the stream it received: its own γ on q and k after the rotation
    block, x = model.blocks[layer], (plain[layer - 1] if layer else model.inputs(IDX)[0])
    attn, h = block.attn, block.attn_norm(x)
    q, k, v = (t.view(2, T, H, D).transpose(1, 2) for t in attn.qkv(h).split(H * D, dim=-1))
    q, k = model.pos.transform_qk(q, k, model.pos.prepare(T, IDX.device))
    y = F.scaled_dot_product_attention(momentum(q, 0.9), momentum(k, 0.9), v, is_causal=True)
    x = x + attn.out(y.transpose(1, 2).reshape(2, T, H * D))
    torch.testing.assert_close(out[layer], x + block.mlp(block.mlp_norm(x)))


def test_the_linear_rule_runs_from_shallow_to_deep():
    options = options_of({"momentum": {"per_layer": "linear", "gamma_shallow": 2.0, "gamma_deep": 0.5}}, 4)
    assert options.gammas == (2.0, 1.5, 1.0, 0.5)
    model = built({"name": "rope", "momentum": {"per_layer": "linear", "gamma_shallow": 0.0, "gamma_deep": 1.5}})
    assert [b.attn.momentum_gamma for b in model.blocks] == [0.0, 0.5, 1.0, 1.5]
    one_layer = {"momentum": {"per_layer": "linear", "gamma_shallow": 0.3, "gamma_deep": 0.9}}
    assert options_of(one_layer, 1).gammas == (0.3,)


# --- normalisation ---------------------------------------------------------------------------------

def test_normalised_momentum_term_has_the_querys_length_and_the_terms_direction():
    x = torch.randn(2, H, T, D, dtype=torch.float64)
    x[0, 0, 4] = x[0, 0, 3]  # a position where q does not change: its term stays 0
    difference = x - F.pad(x, (0, 0, 1, 0))[..., :-1, :]
    p = normalized(difference, x)
    length = p.norm(dim=-1)
    moving = difference.norm(dim=-1) > 0
    torch.testing.assert_close(length[moving], x.norm(dim=-1)[moving])
    assert torch.equal(p[0, 0, 4], torch.zeros(D, dtype=torch.float64))
    cosine = F.cosine_similarity(p, difference, dim=-1)[moving]
    torch.testing.assert_close(cosine, torch.ones_like(cosine))
    for gamma in (0.5, 2.0):
        step = (momentum(x, gamma, normalize=True) - x).norm(dim=-1)
        torch.testing.assert_close(step[moving], gamma * x.norm(dim=-1)[moving])
    torch.testing.assert_close(momentum(x, 0.5, normalize=True)[..., 0, :], x[..., 0, :] * 1.5)  # q_{−1} = 0: p_0 = q_0


def test_normalisation_keeps_the_dtype_and_changes_the_model():
    x = torch.randn(1, H, T, D).bfloat16()
    assert momentum(x, 0.5, normalize=True).dtype == torch.bfloat16
    model = built({"name": "rope", "momentum": {"gamma": 1.0, "normalize": True}})
    assert all(b.attn.momentum_normalize for b in model.blocks)
    assert not torch.equal(model(IDX), built({"name": "rope", "momentum": {"gamma": 1.0}})(IDX))


# --- warm-up and adaptive γ: the rules step by step -----------------------------------------------

def test_warmup_ramps_every_layer_linearly_and_ends_at_its_gamma():
    model = built({"name": "rope", "momentum": {"gamma": [1.0, 0.5, 0.2, 0.0], "warmup_steps": 4}})
    schedule = model.gamma_schedule
    assert schedule.gammas() == [1.0, 0.5, 0.2, 0.0]  # built: the full γ, what a checkpoint is evaluated with
    for step in range(7):
        mean = schedule.start_step(step)
        ramp = min(1.0, (step + 1) / 4)
        assert schedule.gammas() == [g * ramp for g in (1.0, 0.5, 0.2, 0.0)]
        assert mean == pytest.approx(1.7 * ramp / 4)
        schedule.after_gradient(123.0)  # a warm-up ignores the gradient
    # the warm-up follows from the step: no state in the checkpoint, the keys of a constant-γ model
    assert model.state_dict().keys() == built({"name": "rope", "momentum": {"gamma": 0.5}}).state_dict().keys()


class PaperAdaptiveGamma:
    """The paper's §5.2 listing, verbatim but for its names."""

    def __init__(self, init=0.5, max_gamma=1.0):
        self.gamma = init
        self.max = max_gamma

    def update(self, gradient_norm):
        adjust = 0.01 * (1 - gradient_norm / 10.0)
        self.gamma = np.clip(self.gamma + adjust, 0, self.max)
        return self.gamma


SCRIPTED_NORMS = [0.0, 5.0, 10.0, 20.0, 0.5] + [0.0] * 55 + [400.0, 0.0, 13.0, 7.5, 1e4, 2.0, 30.0, 0.0]


def test_adaptive_gamma_follows_the_papers_rule_step_by_step():
    """A scripted gradient norm: every step's γ is the paper's class's, in every layer, clipped at 0 and at max."""
    model = built({"name": "rope", "momentum": {"adaptive": {"enabled": True}}})
    schedule, paper = model.gamma_schedule, PaperAdaptiveGamma()
    seen = []
    for step, norm in enumerate(SCRIPTED_NORMS):
        assert schedule.start_step(step) == pytest.approx(paper.gamma, abs=1e-15)
        assert schedule.gammas() == [paper.gamma] * LAYERS
        seen.append(paper.gamma)
        schedule.after_gradient(torch.tensor(norm))
        paper.update(norm)
    assert min(seen) == 0.0 and max(seen) == 1.0  # the script reaches both clips


def test_adaptive_constants_are_configurable_and_its_gamma_is_saved():
    rule = Adaptive(init=0.2, max=0.3, rate=0.05, grad_norm_ref=2.0)
    assert rule.update(0.2, 1.0) == pytest.approx(0.225) and rule.update(0.29, 0.0) == 0.3
    assert rule.update(0.02, 10.0) == 0.0
    pos = {"name": "rope", "momentum": {"adaptive": {"enabled": True, "init": 0.2, "max": 0.3, "rate": 0.05,
                                                     "grad_norm_ref": 2.0}}}
    model = built(pos)
    model.gamma_schedule.after_gradient(1.0)
    restored = built(pos)
    assert restored.gamma_schedule.gammas() == [0.2] * LAYERS
    restored.load_state_dict(model.state_dict())  # a checkpoint carries the adaptive γ: resume and evaluation
    assert restored.gamma_schedule.gammas() == [pytest.approx(0.225)] * LAYERS


def test_a_constant_gamma_needs_no_schedule():
    assert built({"name": "rope", "momentum": {"gamma": [0.1, 0.2, 0.3, 0.4]}}).gamma_schedule is None
    with pytest.raises(ConfigError):
        GammaSchedule(MomentumOptions.constant(0.5, 2), [])


@pytest.mark.parametrize("momentum_overrides, expected", [
    (["pos.momentum.adaptive.enabled=true"], "adaptive"),
    (["pos.momentum.gamma=0.8", "pos.momentum.warmup_steps=4"], "warmup"),
])
def test_a_run_logs_its_gamma_every_step_and_follows_the_rule(tmp_path, momentum_overrides, expected):
    """Through training (LitLM's hooks): metrics.csv's pos/gamma is each step's γ, and the next step's adaptive γ
    is the rule applied to this step's train/grad_norm."""
    summary = train_here(*TINY, "task=mod_arith", "trainer.max_steps=6", "trainer.val_every=6", "trainer.progress=off",
                         "trainer.accelerator=cpu", *momentum_overrides, run_dir=tmp_path)
    assert summary["status"] == "completed"
    rows = pd.read_csv(tmp_path / "metrics.csv").dropna(subset=["train/loss"]).sort_values("step")
    gamma, norms = rows["pos/gamma"].to_numpy(), rows["train/grad_norm"].to_numpy()
    assert len(gamma) == 6
    if expected == "adaptive":
        rule = Adaptive()
        assert gamma[0] == pytest.approx(0.5)
        for t in range(5):
            assert gamma[t + 1] == pytest.approx(rule.update(gamma[t], norms[t]), abs=1e-6)
    else:
        np.testing.assert_allclose(gamma, [0.8 * min(1.0, (t + 1) / 4) for t in range(6)], rtol=1e-6)


# --- refusals: one line naming the key, before training -------------------------------------------

BAD = [
    (["pos.momentum.gamma=[0.5,0.5]"], "pos.momentum.gamma"),  # TINY has one layer
    (["pos.momentum.gamma=-0.1"], "pos.momentum.gamma"),
    (["model.n_layers=2", "pos.momentum.gamma=[0.5,-0.5]"], "pos.momentum.gamma[1]"),
    (["pos.momentum.warmup_steps=401"], "pos.momentum.warmup_steps"),  # the default run is 400 steps
    (["pos.momentum.warmup_steps=-1"], "pos.momentum.warmup_steps"),
    (["pos.momentum.per_layer=cubic"], "pos.momentum.per_layer"),
    (["pos.momentum.per_layer=linear", "pos.momentum.gamma_shallow=1"], "pos.momentum.gamma_deep"),
    (["pos.momentum.per_layer=linear", "pos.momentum.gamma_shallow=-1", "pos.momentum.gamma_deep=0"],
     "pos.momentum.gamma_shallow"),
    (["pos.momentum.per_layer=linear", "pos.momentum.gamma=0.5", "pos.momentum.gamma_shallow=1",
      "pos.momentum.gamma_deep=0"], "pos.momentum.gamma"),
    (["pos.momentum.gamma_deep=0.2"], "pos.momentum.gamma_deep"),
    (["pos.momentum.normalize=maybe"], "pos.momentum.normalize"),
    (["pos.momentum.adaptive.enabled=true", "pos.momentum.adaptive.init=1.5"], "pos.momentum.adaptive.init"),
    (["pos.momentum.adaptive.enabled=true", "pos.momentum.adaptive.init=-0.1"], "pos.momentum.adaptive.init"),
    (["pos.momentum.adaptive.enabled=true", "pos.momentum.adaptive.max=0"], "pos.momentum.adaptive.max"),
    (["pos.momentum.adaptive.enabled=true", "pos.momentum.adaptive.rate=0"], "pos.momentum.adaptive.rate"),
    (["pos.momentum.adaptive.grad_norm_ref=-10"], "pos.momentum.adaptive.grad_norm_ref"),
    (["pos.momentum.adaptive.enabled=yes"], "pos.momentum.adaptive.enabled"),
    (["+pos.momentum.adaptive.speed=2"], "pos.momentum.adaptive.speed"),
    (["pos.momentum.adaptive.enabled=true", "pos.momentum.gamma=0.5"], "pos.momentum.gamma"),
    (["pos.momentum.adaptive.enabled=true", "pos.momentum.warmup_steps=10"], "pos.momentum.warmup_steps"),
    (["pos.momentum.adaptive.enabled=true", "pos.momentum.per_layer=linear", "pos.momentum.gamma_shallow=1",
      "pos.momentum.gamma_deep=0"], "pos.momentum.per_layer"),
]


@pytest.mark.parametrize("overrides, key", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_momentum_options_fail_before_training_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        check_config(compose([*TINY, *overrides]))
    message = str(err.value)
    assert message.startswith(key + "=") or message.startswith(key + " ")
    assert "\n" not in message


def test_a_warmup_as_long_as_the_run_is_accepted():
    check_config(compose([*TINY, "trainer.max_steps=50", "pos.momentum.gamma=1", "pos.momentum.warmup_steps=50"]))


# --- the packed launcher ---------------------------------------------------------------------------

PACKED = ["task=mod_arith", "model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.mlp_hidden=64",
          "data.batch_size=4", "data.val_size=8", "data.test_size=8", "data.ood_size=8", "trainer.precision=32-true",
          "trainer.accelerator=cpu", "trainer.max_steps=20"]


@pytest.mark.parametrize("dynamic, key", [(["pos.momentum.gamma=0.5", "pos.momentum.warmup_steps=5"],
                                           "pos.momentum.warmup_steps"),
                                          (["pos.momentum.adaptive.enabled=true"], "pos.momentum.adaptive.enabled")])
def test_a_gamma_that_moves_is_refused_for_packing_in_one_line(dynamic, key):
    with pytest.raises(ConfigError) as err:
        check_packable([compose(PACKED), compose([*PACKED, *dynamic])])
    assert str(err.value).startswith(key + "=") and "\n" not in str(err.value)


def test_packed_members_keep_their_own_gamma_per_layer():
    """Members that differ in γ per layer share a pack: each member's loss is its own model's."""
    members = [["pos.momentum.gamma=[1.5,0.0]"], ["pos.momentum.per_layer=linear", "pos.momentum.gamma_shallow=0",
                                                   "pos.momentum.gamma_deep=2", "seed=1"], ["pos.momentum.gamma=0.3"]]
    pack = Pack([compose([*PACKED, *m]) for m in members])
    assert torch.equal(pack.gammas, torch.tensor([[1.5, 0.0], [0.0, 2.0], [0.3, 0.3]]))
    inputs, targets = pack.batch(0)
    packed = pack.losses(inputs, targets)
    for k, model in enumerate(pack.models):
        assert [b.attn.momentum_gamma for b in model.blocks] == pytest.approx(pack.gammas[k].tolist())
        torch.testing.assert_close(packed[k], LitLM.loss(model(inputs[k]), targets[k]), rtol=1e-5, atol=0)
