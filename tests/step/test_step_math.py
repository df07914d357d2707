"""The core math against its definitions, with no optional extra (issue 27: the survivors of mutation testing,
results/mutation/). Each test checks a known value, an identity the math gives or a hand-computed example."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ropelab.core import positional
from ropelab.core.lit import AnswerLoss, LitLM
from tasks.base import IGNORE


# --- the loss counts the answer tokens only ---------------------------------------------------------

def test_training_loss_is_the_mean_over_answer_tokens_only():
    logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]]])
    targets = torch.tensor([[IGNORE, 1, 2, IGNORE]])
    lse = torch.logsumexp(logits[0], dim=-1)
    expected = ((lse[1] - 1.5) + (lse[2] - 3.0)) / 2  # − log softmax at the two answer tokens, averaged
    torch.testing.assert_close(LitLM.loss(logits, targets), expected)
    # an ignored position's logits do not matter
    moved = logits.clone()
    moved[0, 0] = torch.tensor([9.0, -9.0, 4.0])
    torch.testing.assert_close(LitLM.loss(moved, targets), expected)


def test_answer_loss_averages_over_every_answer_token_of_every_batch():
    metric = AnswerLoss()
    a, b = torch.randn(2, 5, 7), torch.randn(1, 5, 7)
    ta = torch.full((2, 5), IGNORE)
    ta[0, 3], ta[1, 1], ta[1, 4] = 2, 6, 0
    tb = torch.full((1, 5), IGNORE)
    tb[0, 0] = 5
    metric.update(a, ta)
    metric.update(b, tb)
    per_token = [F.cross_entropy(a[0, 3], torch.tensor(2)), F.cross_entropy(a[1, 1], torch.tensor(6)),
                 F.cross_entropy(a[1, 4], torch.tensor(0)), F.cross_entropy(b[0, 0], torch.tensor(5))]
    torch.testing.assert_close(metric.compute(), torch.stack(per_token).mean())  # 4 tokens, not 2 batches
    with warnings.catch_warnings():  # torchmetrics warns of a compute before any update
        warnings.simplefilter("ignore")
        assert AnswerLoss().compute() == 0  # no answer token yet: 0, not a division by zero


# --- the metrics ------------------------------------------------------------------------------------

def test_answer_metrics_by_hand():
    from ropelab.core.lit import AnswerMetrics

    V = 5
    targets = torch.tensor([[IGNORE, 2, 3, IGNORE], [IGNORE, IGNORE, 4, 4], [IGNORE, 0, IGNORE, IGNORE]])
    preds = torch.tensor([[0, 2, 3, 0], [1, 1, 4, 2], [3, 0, 1, 1]])  # answers: right; half right; right
    # (micro accuracy 4/5; per class 1, 1, 1/2, 1: a macro average would say 7/8)
    logits = F.one_hot(preds, V).float() * 4.0
    m = AnswerMetrics(V)
    m.update(logits[:2], targets[:2], torch.tensor([7, 9]))
    m.update(logits[2:], targets[2:], torch.tensor([7]))
    out = m.compute("val")
    assert set(out) == {"val/loss", "val/acc", "val/exact"}
    assert float(out["val/acc"]) == pytest.approx(4 / 5)    # answer tokens right / answer tokens
    assert float(out["val/exact"]) == pytest.approx(2 / 3)  # whole answers right / examples
    ce_right, ce_wrong = -F.log_softmax(torch.tensor([4.0, 0, 0, 0, 0]), 0)[[0, 1]]
    assert float(out["val/loss"]) == pytest.approx(float(4 * ce_right + ce_wrong) / 5, rel=1e-5)
    assert m.per_group() == {7: {"exact": 1.0, "examples": 2}, 9: {"exact": 0.0, "examples": 1}}
    m.reset()
    with warnings.catch_warnings():  # torchmetrics warns of a compute before any update
        warnings.simplefilter("ignore")
        assert m.per_group() == {}


def test_answer_loss_of_a_single_answer_token_is_its_cross_entropy():
    metric = AnswerLoss()
    logits, targets = torch.randn(1, 3, 4), torch.tensor([[IGNORE, IGNORE, 3]])
    metric.update(logits, targets)
    torch.testing.assert_close(metric.compute(), F.cross_entropy(logits[0, 2], torch.tensor(3)))


def test_warmup_then_cosine_by_hand():
    from ropelab.core.lit import warmup_cosine

    values = [warmup_cosine(s, warmup=10, total=110, min_ratio=0.1) for s in (0, 4, 9, 10, 60, 110, 500)]
    assert values == pytest.approx([0.1, 0.5, 1.0, 1.0, 0.55, 0.1, 0.1])
    assert warmup_cosine(5, warmup=5, total=5, min_ratio=0.0) == 1.0  # no cosine phase: no division by zero
    assert warmup_cosine(11, warmup=10, total=11, min_ratio=0.0) == 0.0  # a one-step cosine phase ends at the floor
    assert warmup_cosine(35, warmup=10, total=110, min_ratio=0.0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


# --- statistics over seeds and the loss-curve landmarks ---------------------------------------------

def test_estimates_and_paired_differences_by_hand():
    from ropelab.analysis.stats import Estimate, estimate, paired_difference, t975

    e = estimate([1.0, None, 2.0, math.nan, 3.0])  # None and NaN are left out
    assert (e.mean, e.sd, e.n) == (2.0, 1.0, 3)
    assert e.half_width == pytest.approx(t975(2) / math.sqrt(3)) and t975(2) == pytest.approx(4.302653, rel=1e-6)
    two = estimate([1.0, 3.0])
    assert two.sd == pytest.approx(math.sqrt(2)) and two.n == 2
    one = estimate([5.0])
    assert one.mean == 5.0 and math.isnan(one.sd) and one.n == 1 and math.isnan(one.half_width)
    empty = estimate([None, math.nan])
    assert math.isnan(empty.mean) and math.isnan(empty.sd) and empty.n == 0
    assert math.isnan(t975(0))
    d = paired_difference({0: 3.0, 1: 5.0, 2: None, 3: 1.0, 4: math.nan}, {0: 1.0, 1: 2.0, 2: 7.0, 4: 1.0, 5: 0.0})
    assert (d.mean, d.n) == (2.5, 2)  # seeds 0 and 1 only
    # excludes_zero: strictly, and only with n > 1
    hw = t975(2) * 1.0 / math.sqrt(3)
    assert not Estimate(hw, 1.0, 3).excludes_zero()  # low is exactly 0
    assert not Estimate(-hw, 1.0, 3).excludes_zero()  # high is exactly 0
    assert Estimate(hw + 0.01, 1.0, 3).excludes_zero() and Estimate(-hw - 0.01, 1.0, 3).excludes_zero()
    assert not Estimate(0.2, 1.0, 3).excludes_zero()  # the interval spans 0 (its high is below 1)
    assert Estimate(10.0, 1.0, 2).excludes_zero() and not Estimate(10.0, math.nan, 1).excludes_zero()
    assert Estimate(2.0, 1.0, 4).text() == "2 [0.409, 3.59] (n=4)"
    assert Estimate(2.0, math.nan, 1).text() == "2 (n=1)" and Estimate(math.nan, math.nan, 0).text() == "–"
    assert Estimate(2.0, 1.0, 4).text("{:.1f}") == "2.0 [0.4, 3.6] (n=4)"


def test_stays_below_from_by_hand():
    import pandas as pd
    from ropelab.analysis.stats import stays_below_from

    #                  0   1   2   3  4  5    6  7  8  9
    s = pd.Series([20, 20, 10, 6, 4, 9, 3.0, 2, 1, 1], dtype=float)
    # plateau window = steps 2..4 inclusive: median(10, 6, 4) = 6, threshold 0.5 × 6 = 3; step 6 is exactly 3
    # (not below), so the loss stays below from step 7 on
    assert stays_below_from(s, 0.5, (2, 4)) == 7.0
    assert stays_below_from(s, 0.9, (2, 4)) == 6.0  # threshold 5.4: last at or above it is step 5
    assert stays_below_from(s, 2.0, (2, 4)) == 2.0  # below from the window's start on
    assert math.isnan(stays_below_from(pd.Series([5.0] * 10), 0.5, (2, 4)))  # never gets there
    assert stays_below_from(s[:5], 0.5, (2, 4)) is None  # ends at the window's end
    assert stays_below_from(s[:6], 0.5, (2, 4)) is not None


def test_onset_uses_a_centred_mean_and_lockin_the_series_it_is_given():
    import pandas as pd
    from ropelab.analysis.stats import Landmarks, lockin_step, onset_step

    loss = pd.Series([10.0] * 8 + [1.0] * 8)
    rule = Landmarks(smooth=3, plateau=(0, 4), lockin_frac=0.5, onset_drop=0.1)
    # centred mean over 3 steps: step 7 = (10 + 10 + 1) / 3 = 7 < 9, step 6 = 10: the loss leaves at step 7
    # (a trailing mean would say step 8, with the first value its own mean)
    assert onset_step(loss, rule) == 7.0
    assert lockin_step(loss, rule) == 8.0
    # min_periods=1: with a centred window of 2, step 0 is its own mean (1), so the plateau is median(1, 5.5, 10)
    # = 5.5 and the loss stays below 4.95 from step 9 (without step 0 the plateau would be 7.75, the answer 8)
    first = pd.Series([1.0] + [10.0] * 7 + [1.0] * 8)
    assert onset_step(first, Landmarks(smooth=2, plateau=(0, 2))) == 9.0


def test_curves_keep_the_last_value_of_each_step():
    import pandas as pd
    from ropelab.analysis.stats import first_step_at, metric_curve, train_loss

    metrics = pd.DataFrame({"step": [0, 0, 1, 2, 2, 3], "train/loss": [5.0, 4.0, 3.0, math.nan, 2.0, 1.0],
                            "val/acc": [math.nan, 0.2, math.nan, 0.9, 0.95, math.nan]})
    assert train_loss(metrics).to_dict() == {0: 4.0, 1: 3.0, 2: 2.0, 3: 1.0}
    assert metric_curve(metrics).to_dict() == {0: 0.2, 2: 0.95}
    assert train_loss(None).empty and metric_curve(metrics, "val/exact").empty
    assert train_loss(metrics.drop(columns="step")).empty
    curve = pd.Series([0.1, 0.5, 0.9, 0.95], index=[10, 20, 30, 40])
    assert first_step_at(curve, 0.9) == 30.0 and first_step_at(curve, 0.5) == 20.0
    assert math.isnan(first_step_at(curve, 0.99))


def test_sawtooth_statistics_by_hand():
    from ropelab.analysis.stats import binomial_two_sided, sawtooth

    assert binomial_two_sided(3, 10) == pytest.approx(2 * (1 + 10 + 45 + 120) / 1024)  # P(X ≤ 3) + P(X ≥ 7)
    assert binomial_two_sided(5, 10) == 1.0
    phase = np.array([[0.5, -1.0] * 4, [-1.0, 0.5] * 4])  # a perfect saw-tooth on both heads
    s = sawtooth(phase, permutations=2000)
    assert (s["alternation"], s["neighbours"], s["alternating"]) == (1.0, 14, 14)
    assert s["binomial_p"] == pytest.approx(2 * 0.5 ** 14)
    # a row of four + and four − alternates perfectly in 2 of its C(8, 4) = 70 orders: both rows, (2/70)² ≈ 0.0008
    assert s["permutation_p"] < 0.01 and s["permutation_p"] >= 1 / 2001
    assert s["lag1_autocorrelation"] == pytest.approx(-7 / 8)  # centred ±0.75: 7 products of −0.5625 over 8 squares
    assert (s["mean_abs_phase"], s["mean_abs_neighbour_step"], s["max_abs_phase"], s["positive_fraction"]) == \
        pytest.approx((0.75, 1.5, 1.0, 0.5))
    flat = sawtooth(np.ones((2, 6)), permutations=50)
    assert flat["alternation"] == 0.0 and flat["permutation_p"] == 1.0 and flat["lag1_autocorrelation"] is None


# --- the model's SwiGLU: its hand-written backward is autograd's -----------------------------------

def test_swiglu_backward_is_autograds():
    from ropelab.core.model import SwiGLU

    h = torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(2, 5, 6, dtype=torch.float64)
    (ours,) = torch.autograd.grad(SwiGLU.apply(h), h, grad)
    gate, up = h.chunk(2, dim=-1)
    (theirs,) = torch.autograd.grad(F.silu(gate) * up, h, grad)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(SwiGLU.apply(h), F.silu(gate) * up)


# --- the model against a forward written out by hand ------------------------------------------------

def reference_forward(model, idx):
    """Llama by its definition, in float64: RMSNorm, causal softmax attention over the scheme's q and k (plus its
    bias), 1/√head_dim, SwiGLU MLP, residuals; the scheme's own transform (tested against its definition above)."""
    cfg, s = model.cfg, model.pos
    Tn, Hn, hd = idx.shape[1], cfg.n_heads, cfg.head_dim

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.norm_eps) * w

    ctx = s.prepare(Tn, None)
    bias = s.attn_bias(ctx)
    x = s.embed(model.embed.weight[idx], ctx)
    future = torch.ones(Tn, Tn, dtype=torch.bool).triu(1)
    for block in model.blocks:
        h = rms(x, block.attn_norm.weight)
        q, k, v = (t.view(*idx.shape, Hn, hd).transpose(1, 2) for t in (h @ block.attn.qkv.weight.T).split(cfg.d_model, -1))
        q, k = s.transform_qk(q, k, ctx)
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + (0 if bias is None else bias)
        weights = scores.masked_fill(future, -math.inf).softmax(-1)
        y = (weights @ v).transpose(1, 2).reshape(*idx.shape, cfg.d_model)
        x = x + y @ block.attn.out.weight.T
        gate, up = (rms(x, block.mlp_norm.weight) @ block.mlp.gate_up.weight.T).chunk(2, -1)
        x = x + (F.silu(gate) * up) @ block.mlp.down.weight.T
    return rms(x, model.norm.weight) @ model.lm_head.weight.T


@pytest.mark.parametrize("name", ["rope", "alibi", "pope", "sinusoidal"])
def test_the_model_is_its_definition(name):
    from ropelab.core.model import LlamaConfig, build_model

    cfg = LlamaConfig(vocab_size=11, max_len=16, d_model=32, n_layers=2, n_heads=2, mlp_hidden=48, init_std=0.3)
    torch.manual_seed(0)
    model = build_model(cfg, {"name": name}).double()
    idx = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        expected = reference_forward(model, idx)
        torch.testing.assert_close(model(idx), expected, rtol=1e-9, atol=1e-9)  # evaluation: the in-place MLP
    torch.testing.assert_close(model(idx), expected, rtol=1e-9, atol=1e-9)      # training: SwiGLU's autograd path
    # the explicit-weights path (attention maps, locality; its scores in float32) gives the same stream, causal rows
    x, ctx, mask = model.inputs(idx)
    with torch.no_grad():
        y, w = model.blocks[0](x, model.pos, ctx, mask, need_weights=True)
        torch.testing.assert_close(y, model.blocks[0](x, model.pos, ctx, mask), rtol=1e-4, atol=1e-5)
        attn = model.blocks[0].attn  # called as attention maps call it: the output alone unless weights are asked for
        h = model.blocks[0].attn_norm(x)
        torch.testing.assert_close(attn(h, model.pos, ctx, mask), attn(h, model.pos, ctx, mask, need_weights=True)[0],
                                   rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 9, dtype=w.dtype))
    assert torch.equal(w.triu(1), torch.zeros_like(w))


def test_causal_attention_on_every_path():
    from ropelab.core.model import causal_attention

    q, k, v = torch.randn(3, 2, 7, 4, dtype=torch.float64).unbind(0)
    q, k, v = q[None], k[None], v[None]
    bias = torch.randn(2, 7, 7, dtype=torch.float64).masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), -math.inf)
    future = torch.ones(7, 7, dtype=torch.bool).triu(1)

    def explicit(b, scale):
        return ((q @ k.transpose(-1, -2)) * scale + b).masked_fill(future, -math.inf).softmax(-1) @ v

    torch.testing.assert_close(causal_attention(q, k, v, None, 0.3), explicit(0, 0.3))
    torch.testing.assert_close(causal_attention(q, k, v, bias, 0.3), explicit(bias, 0.3))          # CPU flash path
    torch.testing.assert_close(causal_attention(q, k, v, bias[None], 0.3), explicit(bias, 0.3))    # plain SDPA path


def test_the_backbone_initialisation_and_defaults():
    from ropelab.core.model import Attention, Block, Llama, LlamaConfig, build_model

    cfg = LlamaConfig(vocab_size=64, max_len=16, d_model=64, n_layers=2, n_heads=2, mlp_hidden=128, init_std=0.1)
    torch.manual_seed(0)
    model = build_model(cfg, {"name": "spectral"})
    std = {n: float(p.detach().std()) for n, p in model.named_parameters()}
    for name in ("embed.weight", "blocks.0.attn.qkv.weight", "blocks.1.mlp.gate_up.weight", "lm_head.weight"):
        assert 0.09 < std[name] < 0.11, name
    for name in ("blocks.0.attn.out.weight", "blocks.1.mlp.down.weight"):  # GPT-2: residual outputs / √(2 · layers)
        assert 0.045 < std[name] < 0.055, name
    assert torch.equal(model.pos.omega.detach()[0], model.pos.omega_init[0])  # the scheme keeps its own init
    assert all(m.bias is None for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert Llama(cfg, positional.build({"name": "rope"}, 32, 2, 16)).blocks[0].attn.momentum_gamma == 0.0
    assert Block(cfg, 32).attn.momentum_gamma == 0.0 and Attention(cfg, 32).momentum_gamma == 0.0


def test_attention_under_bf16_autocast_stays_in_float32():
    """attn_fp32: under CPU bf16 autocast the attention itself runs in float32 (its bias and scale as without)."""
    from ropelab.core.model import LlamaConfig, build_model

    cfg = LlamaConfig(vocab_size=11, max_len=16, d_model=32, n_layers=1, n_heads=2, mlp_hidden=48, init_std=0.3)
    for name in ("alibi", "pope"):
        torch.manual_seed(0)
        model = build_model(cfg, {"name": name})
        block = model.blocks[0]
        x, ctx, mask = model.inputs(torch.randint(0, 11, (2, 9)))
        h = block.attn_norm(x)
        with torch.no_grad():
            expected = block.attn(h, model.pos, ctx, mask, need_weights=True)[0]  # explicit float32 softmax
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = block.attn(h, model.pos, ctx, mask)
        # the projections run in bf16 (≈ 3 significant digits); the attention does not drop to it, nor lose its bias
        torch.testing.assert_close(got.float(), expected, atol=0.03, rtol=0.03)


# --- tasks: the papers' defaults, exact sequence lengths, decoding ----------------------------------

PAPER_DEFAULTS = {  # each task's documented defaults (its module docstring; the papers' settings)
    "assoc_recall": dict(n_keys=64, n_values=64, pairs_min=4, pairs_max=16, n_queries=4),
    "bio_rotation": dict(motif_len=8, gap_min=100, gap_max=200, noise="lower", group_bin=25),
    "dyck3": dict(depth_min=1, depth_max=8, len_min=8, len_max=48),
    "global_counting": dict(len_min=16, len_max=64, n_symbols=4, max_count=128, group_bin=8),
    "indirect_indexing": dict(len_min=20, len_max=40, shift_max=15, group_bin=5, format="paper", n_letters=52),
    "mean_pooling": dict(len_min=8, len_max=64, n_values=10, dist="mixed", group_bin=8),
    "mod_arith": dict(modulus=7, terms_min=3, terms_max=3, operand_min=0, operand_max=6),
    "variable_tracking": dict(chain_min=1, chain_max=4, n_distractors=3, n_vars=52, n_values=10, format="equals"),
}


@pytest.mark.parametrize("name", sorted(PAPER_DEFAULTS))
def test_a_bare_task_has_the_papers_defaults(name):
    import tasks

    task = tasks.build(name)
    assert {k: getattr(task, k) for k in PAPER_DEFAULTS[name]} == PAPER_DEFAULTS[name]


# options that fix every example's length: the longest sequence then fills seq_len exactly
FIXED_LENGTH = {"bio_rotation": dict(gap_min=20, gap_max=20), "assoc_recall": dict(pairs_min=8, pairs_max=8),
                "global_counting": dict(len_min=16, len_max=16), "mod_arith": dict(terms_min=4, terms_max=4)}


@pytest.mark.parametrize("name", sorted(FIXED_LENGTH))
def test_every_example_fills_seq_len_exactly_when_lengths_are_fixed(name):
    import tasks

    task = tasks.build(name, **FIXED_LENGTH[name])
    inputs, targets = task.sample(np.random.default_rng(0), 16)
    assert inputs.shape == targets.shape == (16, task.seq_len)
    # the last position predicts the last answer token (bio_rotation keeps one pad column past it: its seq_len is
    # 1 + 2 · motif_len + gap_max + 1, one more than its inputs use)
    last = task.seq_len - (2 if name == "bio_rotation" else 1)
    assert (targets[:, last] != IGNORE).all() and (targets[:, last + 1:] == IGNORE).all()
    used = set(inputs.ravel().tolist()) | set(targets[targets != IGNORE].tolist())
    assert max(used) < len(task.vocab)


def test_bio_rotation_draws_every_base_and_every_noise_letter():
    import tasks

    task = tasks.build("bio_rotation", gap_min=30, gap_max=30)
    inputs, _ = task.sample(np.random.default_rng(0), 32)
    motif, noise = inputs[:, 1:9], inputs[:, 9:39]
    assert set(np.unique(motif).tolist()) == {2, 3, 4, 5}   # A C G T
    assert set(np.unique(noise).tolist()) == {6, 7, 8, 9}   # a c g t (noise: lower)
    same = tasks.build("bio_rotation", gap_min=30, gap_max=30, noise="same").sample(np.random.default_rng(0), 32)[0]
    assert set(np.unique(same[:, 9:39]).tolist()) == {2, 3, 4, 5}


def test_mod_arith_numbers_cover_operands_and_residues():
    import tasks

    assert tasks.build("mod_arith").n_numbers == 7  # 0..6: operands and residues mod 7
    assert tasks.build("mod_arith", modulus=5, operand_max=9).n_numbers == 10
    assert tasks.build("mod_arith", modulus=12, operand_max=3).n_numbers == 12
    assert tasks.build("global_counting", len_min=2, len_max=4, max_count=5).vocab[-1] == "#5"


def test_decode_and_decode_example_by_hand():
    import tasks

    task = tasks.build("mod_arith")
    vocab = task.vocab
    ids = [vocab.index(t) for t in ("<bos>", "3", "+", "4", "+", "5", "=", "5")]
    inputs = np.array(ids[:-1] + [0, 0])  # right-padded
    targets = np.full(len(inputs), IGNORE)
    targets[6] = ids[-1]
    assert task.decode(ids) == "<bos> 3 + 4 + 5 = 5" and task.decode([0, ids[1], IGNORE], sep="") == "3"
    assert task.decode([ids[1]], sep="") == "3"
    assert task.decode_example(inputs, targets) == ("<bos> 3 + 4 + 5 = 5", "5")
    assert task.decode_example(inputs, np.full(len(inputs), IGNORE)) == ("<bos> 3 + 4 + 5 =", "")


def test_pack_refuses_a_sequence_longer_than_seq_len_plus_one():
    from tasks.base import pack

    inputs, targets = pack([[1, 2, 3]], [2], seq_len=2)  # fits exactly: inputs drop the last token
    assert inputs.tolist() == [[1, 2]] and targets.tolist() == [[IGNORE, 3]]
    with pytest.raises(ValueError, match="does not fit"):
        pack([[1, 2, 3, 4]], [2], seq_len=2)
