"""A small Llama-style decoder whose positional scheme is the one pluggable part.

Pre-norm RMSNorm, SwiGLU MLP, no biases, causal ``F.scaled_dot_product_attention``; the positional
scheme (``ropelab.core.positional``) decides how q and k see positions, whether scores get a bias and whether
embeddings get an absolute signal. One scheme module is shared by all layers and prepared once per forward.

References:
  Touvron et al. 2023, Llama 2 (arXiv 2307.09288) — the block.
  Su et al. 2021, RoFormer (arXiv 2104.09864) — rotary positions.
  Karpathy, nanoGPT ``model.py`` — the shape of this file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ropelab.core import positional
from ropelab.core.positional import PositionalScheme
from ropelab.core.positional.momentum import GammaSchedule, MomentumOptions, momentum, options_of
from ropelab.core.schema import ModelSchema


@dataclass
class LlamaConfig(ModelSchema):
    """The model's shape: the config's ``model`` section (``ropelab.core.schema.ModelSchema``, every field with a
    ``spec`` is a key there, conf/model/llama.yaml), and vocab_size and max_len from the task."""
    vocab_size: int = 16
    max_len: int = 512

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig, qk_width: int, momentum_gamma: float = 0.0, momentum_normalize: bool = False):
        super().__init__()
        self.n_heads, self.head_dim, self.qk_width, self.attn_fp32 = cfg.n_heads, cfg.head_dim, qk_width, cfg.attn_fp32
        self.momentum_gamma, self.momentum_normalize = momentum_gamma, momentum_normalize
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, scheme: PositionalScheme, ctx, mask, need_weights: bool = False):
        """The attention output (B, T, C); with ``need_weights``, (output, softmax weights (B, H, T, T)) computed
        from explicit scores instead of fused SDPA (the same up to float rounding)."""
        B, T, C = x.shape
        # split (not unbind) the fused projection: its backward is one cat straight into the (B, T, 3C) grad
        qkv = self.qkv(x)
        q, k, v = (t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in qkv.split(C, dim=-1))
        q, k = scheme.transform_qk(q, k, ctx)
        # momentum attention wraps whatever the scheme did (positional/momentum.py); a tensor γ: one per packed
        # member, or a γ that changes during training (GammaSchedule's buffer)
        if isinstance(self.momentum_gamma, torch.Tensor) or self.momentum_gamma:
            q = momentum(q, self.momentum_gamma, self.momentum_normalize)
            k = momentum(k, self.momentum_gamma, self.momentum_normalize)
        if _frees_projection(qkv, q, scheme):  # SDPA saves v: a copy of it lets the (B, T, 3C) projection go
            v = v.contiguous()
        if self.qk_width != self.head_dim:  # SDPA's fast CPU kernels want v as wide as q and k
            v = F.pad(v, (0, self.qk_width - self.head_dim))
        scale = 1.0 / math.sqrt(self.head_dim)
        if need_weights:
            weights = attention_weights(q, k, mask, scale)
            y = (weights @ v.float()).to(v.dtype)
        elif self.attn_fp32 and torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                y = causal_attention(q.float(), k.float(), v.float(), mask, scale)
        else:
            y = causal_attention(q, k, v, mask, scale)
        y = self.out(y[..., : self.head_dim].transpose(1, 2).reshape(B, T, C))
        return (y, weights) if need_weights else y


def causal_mask(T: int, device) -> torch.Tensor:
    """(T, T) bool, True where a query (row) may attend to a key (column)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def causal_attention(q, k, v, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Causal SDPA; ``mask`` (H or 1, T, T) is an additive bias with causality already folded in (−inf above
    the diagonal), or None.

    Public SDPA takes a mask *or* ``is_causal``, so with a mask it computes all T×T scores and cannot skip the
    blocks above the diagonal: on CPU ≈ 2.5× the attention time of the causal kernel. The CPU flash kernel
    itself takes both, so a biased scheme (ALiBi) gets the causal block skipping too; the −inf entries it would
    add lie in the masked region anyway, so the result is the same up to float rounding. Elsewhere (another
    device, a mask dtype the kernel would refuse, torch.compile tracing) this is plain SDPA."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if (q.device.type == "cpu" and mask.dtype == q.dtype == k.dtype == v.dtype and mask.dim() == 3
            and _CPU_FLASH is not None and not torch.compiler.is_compiling()):
        return _CPU_FLASH(q, k, v, 0.0, True, attn_mask=mask[None], scale=scale)[0]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def attention_weights(q, k, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """The softmax weights (B, H, T, T) that ``causal_attention`` applies, in fp32: ``mask`` as there (the
    scheme's bias with causality folded in), else the causal mask."""
    scores = (q.float() @ k.float().transpose(-2, -1)) * scale
    if mask is None:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], q.device), float("-inf"))
    else:
        scores = scores + mask.float()
    return scores.softmax(dim=-1)


def _frees_projection(qkv: torch.Tensor, q: torch.Tensor, scheme: PositionalScheme) -> bool:
    """True when nothing but v would keep the fused projection alive for backward: the scheme made new q and k
    and, having no learnable parameters, saved none of the originals (rope, rope_half: −2C floats per token and
    layer of activation memory). Learnable rotations save q for their own gradients, and nope/alibi pass q, k
    through as views, so a copy of v would only add memory there."""
    # under torch.func transforms (vmap of packed members) a tensor has no storage to compare
    if torch.compiler.is_compiling() or not torch.is_grad_enabled() or _functorch_wrapped(q):
        return False
    return (q.untyped_storage().data_ptr() != qkv.untyped_storage().data_ptr()
            and not any(p.requires_grad for p in scheme.parameters()))


def _functorch_wrapped(t: torch.Tensor) -> bool:
    return torch._C._functorch.is_functorch_wrapped_tensor(t)


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.mlp_hidden, bias=False)
        self.down = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x):
        h = self.gate_up(x)
        if torch.is_grad_enabled() and _functorch_wrapped(h):  # vmap (packed members): autograd's own, same values
            gate, up = h.chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        if torch.is_grad_enabled():
            return self.down(SwiGLU.apply(h))
        gate, up = h.chunk(2, dim=-1)  # evaluation: in place, the same values without two more (B, T, mlp) tensors
        return self.down(F.silu(gate, inplace=True).mul_(up))


class SwiGLU(torch.autograd.Function):
    """silu(gate) · up of the fused ``gate_up`` output h = [gate, up], with the same forward and gradient
    values as autograd through ``F.silu(gate) * up``, but cheaper on CPU: the backward writes both halves of
    dL/dh into one buffer (autograd would ``cat`` two (B, T, mlp) grads) and only h is saved (silu(gate) is
    recomputed), which also saves activation memory."""

    @staticmethod
    def forward(ctx, h):
        gate, up = h.chunk(2, dim=-1)
        ctx.save_for_backward(h)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad):
        (h,) = ctx.saved_tensors
        gate, up = h.chunk(2, dim=-1)
        grad_h = torch.empty_like(h)
        grad_gate, grad_up = grad_h.chunk(2, dim=-1)
        torch.mul(grad, F.silu(gate), out=grad_up)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=grad_gate)
        return grad_h


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig, qk_width: int, momentum_gamma: float = 0.0, momentum_normalize: bool = False):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, qk_width, momentum_gamma, momentum_normalize)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, scheme, ctx, mask, need_weights: bool = False):
        """The next residual stream; with ``need_weights``, (stream, this block's attention weights)."""
        attended = self.attn(self.attn_norm(x), scheme, ctx, mask, need_weights)
        attended, weights = attended if need_weights else (attended, None)
        x = x + attended
        x = x + self.mlp(self.mlp_norm(x))
        return (x, weights) if need_weights else x


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig, scheme: PositionalScheme, momentum: MomentumOptions | float = 0.0):
        """``momentum``: its options (``pos.momentum``, per layer), or one constant γ for every layer."""
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = scheme
        qk_width = scheme.qk_width(cfg.head_dim)
        if not isinstance(momentum, MomentumOptions):
            momentum = MomentumOptions.constant(momentum, cfg.n_layers)
        self.blocks = nn.ModuleList(Block(cfg, qk_width, gamma, momentum.normalize) for gamma in momentum.gammas)
        # warm-up or adaptive γ: the training loop moves it (LitLM); None: every layer's γ stays as built
        self.gamma_schedule = GammaSchedule(momentum, [b.attn for b in self.blocks]) if momentum.dynamic else None
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        for name, module in self.named_modules():  # the scheme initialises its own parameters
            if not name.startswith("pos"):
                self._init_weights(module)
        for name, p in self.named_parameters():  # GPT-2 style: shrink residual projections with depth
            if name.endswith(("attn.out.weight", "mlp.down.weight")):
                nn.init.normal_(p, std=cfg.init_std / math.sqrt(2 * cfg.n_layers))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.cfg.init_std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) token ids → logits (B, T, vocab)."""
        T = idx.shape[1]
        if T > self.cfg.max_len:
            raise ValueError(f"sequence length {T} exceeds model.max_len={self.cfg.max_len}")
        x, ctx, mask = self.inputs(idx)
        for block in self.blocks:
            x = block(x, self.pos, ctx, mask)
        return self.lm_head(self.norm(x))

    def inputs(self, idx: torch.Tensor) -> tuple[torch.Tensor, object, torch.Tensor | None]:
        """What every block of a forward shares: the embedded input, the scheme's context for these positions and
        the score mask for SDPA (the scheme's bias with causality folded in; None for unbiased schemes)."""
        T = idx.shape[1]
        ctx = self.pos.prepare(T, idx.device)
        bias = self.pos.attn_bias(ctx)
        # SDPA takes either is_causal or a mask: fold causality into the bias once
        mask = None if bias is None else bias.masked_fill(~causal_mask(T, idx.device), float("-inf"))
        return self.pos.embed(self.embed(idx), ctx), ctx, mask

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build_model(cfg: LlamaConfig, pos: Mapping[str, Any]) -> Llama:
    """Llama with the scheme described by ``pos`` and its momentum (``pos.momentum``: γ per layer, warm-up,
    adaptive, normalisation) in the attention blocks; the scheme draws its random init from a forked RNG, so the
    same seed gives the same backbone weights whatever the scheme."""
    options = options_of(pos, cfg.n_layers)
    with torch.random.fork_rng():
        scheme = positional.build(pos, cfg.head_dim, cfg.n_heads, cfg.max_len)
    return Llama(cfg, scheme, options)
