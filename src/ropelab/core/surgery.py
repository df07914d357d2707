"""Spectral surgery: swap a trained model's fixed rotary embedding for a learnable Spectral RoPE, outputs unchanged.

The Bifocal paper's drop-in upgrade (arXiv 2601.22402, the "Δ = 0" protocol): read the model's own inverse
frequencies, replace its static rotary module by f(x, m) = A ⊙ (x · e^{i(mΩ + Φ)}) with Ω = inv_freq, A = 1,
Φ = 0, so the model computes exactly what it computed before; then fine-tune so Ω, A, Φ move.

    from ropelab.core.surgery import spectralize, spectral_parameters
    spectralize(model)                              # ours (ropelab.core.model.Llama) or HF LlamaForCausalLM
    spectralize(model, freeze=True)                 # only Ω, A, Φ train
    spectralize(model, spectral_fraction=0.5)       # bifocal: the first half of the heads spectral, the rest fixed

**Φ starts at 0 here** (``phase_std=0``), not at the paper's N(0, 1e-3): a random Φ would change the outputs
at the swap. The layout (rotate_half: channel i paired with i + D/2) and the attention scaling are the
model's own.

Our ``Llama``: ``model.pos`` (``rope``) is replaced by ``spectral`` (or ``bifocal``) whose Ω is a copy of
the rope module's ``inv_freq`` and whose fixed heads reuse exactly those frequencies; the attention's
1/√D scaling is untouched. Exact: logits are bit-identical before and after (tested).

Hugging Face ``LlamaForCausalLM`` (transformers pinned in the ``hf`` extra): its ``LlamaRotaryEmbedding``
returns one (cos, sin) of shape (B, T, D) for every head and layer, and ``apply_rotary_pos_emb`` rotates q
and k with the same tables — neither can carry a per-head Ω, A, Φ nor a query-only Φ. The simplest exact
hook: ``model.model.rotary_emb`` becomes ``HFSpectralRotary`` (returns the scheme and its per-head tables
for the given ``position_ids``, times the model's ``attention_scaling``), and each ``LlamaAttention``'s
``forward`` is replaced on the instance by ``_hf_attention_forward`` — HF's own forward line for line
(projections, cache update, the configured attention interface with ``self.scaling``) except that the
rotation is the scheme's. Nothing global is patched. The scheme module is registered once, under
``model.model.rotary_emb.scheme``. Tolerance: the tests require max |Δ logits| ≤ 1e-6 at the swap and
observe 0 (same float operations); HF and our model on the same weights agree to ≤ 1e-5 (different RMSNorm
kernels). Grouped-query attention (fewer k/v heads) works only with ``share=True`` (one Ω, A, Φ for all
heads) and all heads spectral; dynamic rope types (inv_freq changing with length) are refused.

``to_hf(model)`` builds the HF ``LlamaForCausalLM`` with our model's weights (fused qkv and gate_up split
into q/k/v and gate/up; the same rotate_half pairing), for the tests and for anyone who wants our weights
in transformers. ``load_weights(model, path)`` loads a ``train.py`` run folder or Lightning checkpoint.

``ropelab surgery`` runs the surgery experiment (``ropelab.experiments.surgery``, ``make surgery``), which
uses this transform; the transform is core (``init_from`` and ``surgery=spectral`` of any run use it).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from ropelab.core.errors import ConfigError
from ropelab.core.positional.bifocal import Bifocal
from ropelab.core.positional.rope import RoPE
from ropelab.core.positional.rotary import cos_sin, signed_sin
from ropelab.core.positional.spectral import SIDES, SpectralRoPE
from ropelab.core.runs import checkpoint_path

TRAINABLE = ("all", "spectral")


# ----------------------------------------------------------------------------------------------- the scheme


def _check_options(spectral_fraction, phase_std, phase_on, amplitude_on, share) -> None:
    ok = isinstance(spectral_fraction, (int, float)) and not isinstance(spectral_fraction, bool)
    if not (ok and 0 < spectral_fraction <= 1):
        raise ValueError(f"spectral_fraction={spectral_fraction!r} is invalid: a number in (0, 1]")
    if not (isinstance(phase_std, (int, float)) and phase_std >= 0):
        raise ValueError(f"phase_std={phase_std!r} is invalid: a number >= 0 (0 keeps the outputs unchanged)")
    for key, side in (("phase_on", phase_on), ("amplitude_on", amplitude_on)):
        if side not in SIDES:
            raise ValueError(f"{key}={side!r} is invalid: one of {', '.join(SIDES)}")
    if not isinstance(share, bool):
        raise ValueError(f"share={share!r} is invalid: true or false")


@torch.no_grad()
def _set_rope_frequencies(rope: RoPE, inv_freq: torch.Tensor) -> None:
    """Make a ``RoPE`` module use ``inv_freq``: its tables computed exactly as ``RoPE.__init__`` computes them."""
    rope.inv_freq.copy_(inv_freq)
    cos, sin = cos_sin(torch.arange(rope.max_len, dtype=torch.float32)[:, None] * inv_freq)
    rope.cos.copy_(cos)
    rope.sin.copy_(sin)
    rope.sin_signed.copy_(signed_sin(sin))


@torch.no_grad()
def _set_spectral_frequencies(spectral: SpectralRoPE, inv_freq: torch.Tensor) -> None:
    spectral.omega.copy_(inv_freq.expand_as(spectral.omega))
    spectral.omega_init.copy_(inv_freq.expand_as(spectral.omega_init))


def spectral_scheme(inv_freq: torch.Tensor, head_dim: int, n_heads: int, max_len: int, spectral_fraction: float = 1.0,
                    phase_std: float = 0.0, phase_on: str = "query", amplitude_on: str = "both",
                    share: bool = False) -> SpectralRoPE | Bifocal:
    """A learnable scheme whose rotation at init is the fixed rotary of ``inv_freq`` (D/2,): ``spectral`` when
    ``spectral_fraction`` is 1, else ``bifocal`` with round-half-up(fraction · H) spectral heads (the first
    ones) and the rest fixed at ``inv_freq``. Φ ~ N(0, ``phase_std``) drawn from a forked RNG (the caller's
    random stream is untouched); ``phase_std=0`` makes it equal the fixed rotary bit for bit."""
    _check_options(spectral_fraction, phase_std, phase_on, amplitude_on, share)
    inv_freq = inv_freq.detach().to(torch.float32).cpu()
    if inv_freq.shape != (head_dim // 2,):
        raise ValueError(f"inv_freq has shape {tuple(inv_freq.shape)}, expected ({head_dim // 2},) for head dim {head_dim}")
    options = dict(phase_std=phase_std, phase_on=phase_on, amplitude_on=amplitude_on, share=share)
    with torch.random.fork_rng(devices=[]):
        if spectral_fraction == 1:
            scheme = SpectralRoPE(head_dim, n_heads, max_len, **options)
            _set_spectral_frequencies(scheme, inv_freq)
            return scheme
        scheme = Bifocal(head_dim, n_heads, max_len, spectral_fraction=spectral_fraction, **options)
    _set_spectral_frequencies(scheme.spectral, inv_freq)
    _set_rope_frequencies(scheme.geometric, inv_freq)
    return scheme


# ----------------------------------------------------------------------------------------------- spectralize


def _is_hf_llama(model: nn.Module) -> bool:
    return type(model).__module__.startswith("transformers.") and hasattr(getattr(model, "model", model), "rotary_emb")


def spectralize(model: nn.Module, *, freeze: bool = False, spectral_fraction: float = 1.0, phase_std: float = 0.0,
                phase_on: str = "query", amplitude_on: str = "both", share: bool = False) -> nn.Module:
    """Replace ``model``'s fixed rotary embedding, in place, by a learnable spectral one initialised from the
    model's own inverse frequencies (outputs unchanged while ``phase_std=0``); returns ``model``.

    ``model``: our ``ropelab.core.model.Llama`` with ``pos=rope``, or a Hugging Face ``LlamaForCausalLM`` /
    ``LlamaModel``. ``freeze``: every other parameter gets ``requires_grad=False`` (only Ω, A, Φ train).
    ``spectral_fraction`` < 1: bifocal, the first round-half-up(fraction · H) heads spectral, the rest fixed.
    ``phase_on`` / ``amplitude_on`` / ``share``: as in ``pos=spectral`` (Φ on the query by default: on both
    sides it cancels in q·kᵀ)."""
    from ropelab.core.model import Llama

    options = dict(spectral_fraction=spectral_fraction, phase_std=phase_std, phase_on=phase_on,
                   amplitude_on=amplitude_on, share=share)
    if isinstance(model, Llama):
        _spectralize_ours(model, **options)
    elif _is_hf_llama(model):
        _spectralize_hf(model, **options)
    else:
        raise TypeError(f"spectralize: {type(model).__name__} is neither ropelab's Llama nor transformers' Llama")
    if freeze:
        freeze_all_but_spectral(model)
    return model


def _spectralize_ours(model, **options) -> None:
    old = model.pos
    if type(old) is not RoPE:
        raise ValueError(f"spectralize: the model's scheme is pos={old.name!r}; surgery replaces fixed full-width "
                         "rotary (pos=rope)")
    device = old.inv_freq.device
    model.pos = spectral_scheme(old.inv_freq, old.head_dim, old.n_heads, old.max_len, **options).to(device)


def spectral_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The learnable positional parameters (Ω ``omega``, A ``amplitude``, Φ ``phase``) of a spectralized model."""
    from ropelab.core.model import Llama

    if isinstance(model, Llama):
        return model.pos.positional_parameters()
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if isinstance(rotary, HFSpectralRotary):
        return rotary.scheme.positional_parameters()
    raise ValueError("spectral_parameters: the model has not been spectralized")


def freeze_all_but_spectral(model: nn.Module) -> None:
    keep = {id(p) for p in spectral_parameters(model).values()}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)


# ----------------------------------------------------------------------------------------------- Hugging Face


def _map_tables(ctx: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(ctx, torch.Tensor):
        return fn(ctx)
    return tuple(_map_tables(c, fn) for c in ctx)


def _gather_positions(table: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """A (P, D) or (H, P, D) table at ``position_ids`` (B, T) → (B, 1, T, D) or (B, H, T, D)."""
    rows = table[..., position_ids, :]  # (B, T, D) or (H, B, T, D)
    return rows.unsqueeze(1) if table.dim() == 2 else rows.movedim(0, 1)


class HFSpectralRotary(nn.Module):
    """Stands in for transformers' ``LlamaRotaryEmbedding``: ``forward(x, position_ids)`` returns
    ``(scheme, tables)`` — the learnable scheme and its per-head (cos, signed sin) tables at these positions,
    times the model's ``attention_scaling`` — which ``_hf_attention_forward`` applies per head."""

    def __init__(self, scheme: SpectralRoPE | Bifocal, inv_freq: torch.Tensor, attention_scaling: float):
        super().__init__()
        self.scheme = scheme
        self.attention_scaling = float(attention_scaling)
        self.register_buffer("inv_freq", inv_freq.detach().clone(), persistent=False)  # the frequencies it came from

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        T = position_ids.shape[-1]
        if position_ids.shape[0] == 1 and torch.equal(position_ids[0], torch.arange(T, device=position_ids.device)):
            ctx = self.scheme.prepare(T, x.device)  # (H or 1, T, D) tables, broadcast over the batch
        else:  # offsets (a cache, left padding): the tables up to the largest position, gathered per row
            P = int(position_ids.max()) + 1
            if P > self.scheme.max_len:
                raise ValueError(f"position {P - 1} is beyond max_position_embeddings={self.scheme.max_len}")
            ctx = _map_tables(self.scheme.prepare(P, x.device), lambda t: _gather_positions(t, position_ids))
        if self.attention_scaling != 1.0:  # as HF: cos and sin both scaled, so q·k by its square
            ctx = _map_tables(ctx, lambda t: t * self.attention_scaling)
        if x.dtype != torch.float32:
            ctx = _map_tables(ctx, lambda t: t.to(x.dtype))
        return self.scheme, ctx


def _hf_attention_forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None, **kwargs):
    """``LlamaAttention.forward`` of transformers 5.24 with the rotation made per head by the spectral scheme."""
    from transformers.models.llama import modeling_llama as hf

    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

    scheme, ctx = position_embeddings
    query_states, key_states = scheme.transform_qk(query_states, key_states, ctx)

    if cache is None:
        cache = kwargs.pop("past_key_values", None)  # the name HF still accepts (deprecated)
    if cache is not None:
        key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)

    attention_interface = hf.ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                                   hf.eager_attention_forward)
    attn_output, attn_weights = attention_interface(
        self, query_states, key_states, value_states, attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling, **kwargs)
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    return self.o_proj(attn_output), attn_weights


def _spectralize_hf(model, **options) -> None:
    base = getattr(model, "model", model)  # LlamaForCausalLM.model is the LlamaModel
    rotary, config = base.rotary_emb, base.config
    if isinstance(rotary, HFSpectralRotary):
        raise ValueError("spectralize: this model is already spectral")
    rope_type = getattr(rotary, "rope_type", "default")
    if "dynamic" in str(rope_type):
        raise ValueError(f"spectralize: rope_type={rope_type!r} changes inv_freq with the length; not supported")
    n_heads, n_kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    if n_kv != n_heads and not (options["share"] and options["spectral_fraction"] == 1):
        raise ValueError(f"spectralize: grouped-query attention ({n_heads} query, {n_kv} key/value heads) needs "
                         "share=True and spectral_fraction=1 (one Ω, A, Φ for all heads)")
    inv_freq = rotary.inv_freq
    scheme = spectral_scheme(inv_freq, head_dim, n_heads, config.max_position_embeddings, **options)
    base.rotary_emb = HFSpectralRotary(scheme, inv_freq.float().cpu(), rotary.attention_scaling).to(inv_freq.device)
    for layer in base.layers:
        attn = layer.self_attn
        if type(attn).__name__ != "LlamaAttention":
            raise TypeError(f"spectralize: {type(attn).__name__} is not transformers' LlamaAttention")
        attn.forward = types.MethodType(_hf_attention_forward, attn)


# ----------------------------------------------------------------------------------------------- weights


def hf_config(cfg, base: float = 10000.0):
    """transformers' ``LlamaConfig`` of the same shape as our ``ropelab.core.model.LlamaConfig``."""
    from transformers import LlamaConfig as HFConfig

    return HFConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.mlp_hidden,
                    num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads,
                    max_position_embeddings=cfg.max_len, rms_norm_eps=cfg.norm_eps, tie_word_embeddings=False,
                    use_cache=False, attention_bias=False, mlp_bias=False, initializer_range=cfg.init_std,
                    rope_parameters={"rope_type": "default", "rope_theta": float(base)})


def hf_state_dict(model) -> dict[str, torch.Tensor]:
    """Our Llama's weights under HF Llama names: the fused qkv splits into q/k/v_proj, gate_up into
    gate_proj/up_proj; the rotate_half pairing is the same, so q and k need no permutation."""
    C, out = model.cfg.d_model, {"model.embed_tokens.weight": model.embed.weight,
                                 "model.norm.weight": model.norm.weight, "lm_head.weight": model.lm_head.weight}
    for i, block in enumerate(model.blocks):
        p = f"model.layers.{i}."
        q, k, v = block.attn.qkv.weight.split(C, dim=0)
        gate, up = block.mlp.gate_up.weight.chunk(2, dim=0)
        out.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                    p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": block.attn.out.weight,
                    p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                    p + "mlp.down_proj.weight": block.mlp.down.weight,
                    p + "input_layernorm.weight": block.attn_norm.weight,
                    p + "post_attention_layernorm.weight": block.mlp_norm.weight})
    return {k: v.detach().clone() for k, v in out.items()}


def to_hf(model, attn_implementation: str = "sdpa"):
    """transformers' ``LlamaForCausalLM`` with our (``pos=rope``) model's weights and rope base."""
    from transformers import LlamaForCausalLM

    if type(model.pos) is not RoPE:
        raise ValueError(f"to_hf: pos={model.pos.name!r}; only rope has an HF Llama counterpart")
    inv_freq = model.pos.inv_freq
    base = 1.0 / float(inv_freq[1]) ** (model.cfg.head_dim / 2) if inv_freq.numel() > 1 else 10000.0
    hf_model = LlamaForCausalLM._from_config(hf_config(model.cfg, round(base, 6)), attn_implementation=attn_implementation,
                                             dtype=torch.float32)
    hf_model.load_state_dict(hf_state_dict(model), strict=True)
    with torch.no_grad():  # the exact frequencies, not a recomputation from the base
        hf_model.model.rotary_emb.inv_freq.copy_(inv_freq)
        hf_model.model.rotary_emb.original_inv_freq.copy_(inv_freq)
    return hf_model.eval()


def load_weights(model: nn.Module, path: str | Path) -> Path:
    """Load a run folder's / checkpoint's model weights into ``model`` (strict; optimizer state and step are
    not used: the run that loads them starts at step 0). Returns the checkpoint file."""
    file = checkpoint_path(path)
    state = torch.load(file, map_location="cpu", weights_only=True)
    state = state.get("state_dict", state)
    weights = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")} or state
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as err:  # a shape mismatch (another d_model, vocabulary, …)
        detail = " ".join(str(err).split("\n")[1:2]).strip()
        raise ConfigError(f"init_from={path}: the checkpoint does not fit this model ({detail}); use the model, task "
                         "and pos settings it was trained with") from None
    if missing or unexpected:
        what = "; ".join(x for x in (f"missing {', '.join(missing[:4])}" if missing else "",
                                     f"unexpected {', '.join(unexpected[:4])}" if unexpected else "") if x)
        raise ConfigError(f"init_from={path}: the checkpoint does not fit this model ({what}); use the model and "
                         "pos settings it was trained with")
    return file
