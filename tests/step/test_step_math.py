"""The training step's math against its definitions (the loss, the metrics, the schedule, the model and its
attention), with no optional extra (issue 27: the survivors of mutation testing, results/mutation/). Each test checks a
known value, an identity the math gives or a hand-computed example. Statistics: tests/records/test_statistics.py;
tasks: tests/task_generators/test_task_math.py."""

import math
import warnings

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
