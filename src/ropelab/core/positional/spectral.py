"""spectral — Spectral RoPE from Bifocal Attention (arXiv 2601.22402): f(x, m) = A ⊙ (x · e^{i(mΩ + Φ)}).

Learnable per head and channel pair (shape (H, D/2)), or with ``share=true`` one set for all heads (shape
(1, D/2), Ω ∈ R^{d/2} as in the paper's formula); shared by all layers like HF Llama's rotary module:
  Ω ``omega``     frequencies, initialised exactly to the geometric RoPE frequencies (profile ``freqs``);
  A ``amplitude`` initialised to 1;
  Φ ``phase``     initialised N(0, ``phase_std``) (paper: 1e-3).

If Φ and A act on both q and k, Φ cancels in q·kᵀ (⟨f(q,m), f(k,n)⟩ = Re Σ A² q k̄ e^{i(m−n)Ω}) and only
Ω and A² matter. ``phase_on`` / ``amplitude_on`` choose the side(s); the default puts Φ on the query only
(so it shifts the relative phase, like PoPE's key-side δ) and A on both. With ``phase_std=0`` the scheme
equals ``rope`` bit for bit at init (the paper's Δ = 0 condition).
"""

from __future__ import annotations

import torch
from torch import nn

from ropelab.core.errors import require
from ropelab.core.positional.base import PositionalScheme
from ropelab.core.positional.rotary import cos_sin, inverse_frequencies, rotate_signed, signed_sin

SIDES = ("query", "key", "both")


class SpectralRoPE(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len, base: float = 10000.0, freqs: str = "geometric",
                 single_freq: float | None = None, band: tuple[float, float] | None = None,
                 phase_std: float = 1e-3, phase_on: str = "query", amplitude_on: str = "both",
                 share: bool = False):
        super().__init__(head_dim, n_heads, max_len)
        require(head_dim % 2 == 0, "model.d_model/model.n_heads", head_dim, "rotary schemes need an even head dim")
        require(isinstance(phase_std, (int, float)) and phase_std >= 0, "pos.phase_std", phase_std, "a number >= 0")
        require(phase_on in SIDES, "pos.phase_on", phase_on, f"one of {', '.join(SIDES)}")
        require(amplitude_on in SIDES, "pos.amplitude_on", amplitude_on, f"one of {', '.join(SIDES)}")
        require(isinstance(share, bool), "pos.share", share, "true or false")
        self.phase_on, self.amplitude_on = phase_on, amplitude_on
        rows = 1 if share else n_heads  # a (1, D/2) set broadcasts over the heads
        inv_freq = inverse_frequencies(head_dim // 2, freqs, base, single_freq, band)
        self.register_buffer("omega_init", inv_freq.expand(rows, -1).clone(), persistent=False)
        self.omega = nn.Parameter(inv_freq.expand(rows, -1).clone())
        self.amplitude = nn.Parameter(torch.ones(rows, head_dim // 2))
        self.phase = nn.Parameter(torch.randn(rows, head_dim // 2) * phase_std)
        self.register_buffer("positions", torch.arange(max_len, dtype=torch.float32), persistent=False)

    def prepare(self, seq_len, device):
        angles = self.positions[:seq_len, None] * self.omega[:, None, :]  # (H, T, D/2)
        cos, sin = cos_sin(angles)
        plain = cos, signed_sin(sin)
        cos, sin = cos_sin(angles + self.phase[:, None, :])
        shifted = cos, signed_sin(sin)
        amplitude = torch.cat((self.amplitude, self.amplitude), dim=-1)[:, None, :]  # (H, 1, D)
        q_rot = shifted if self.phase_on in ("query", "both") else plain
        k_rot = shifted if self.phase_on in ("key", "both") else plain
        # A folded into the (H, T, D) tables: A ⊙ (x·cos + x̃·sin) = x·(A cos) + x̃·(A sin) up to float rounding
        # (exact for A = 1), without a full-size multiply per q and k and its backward
        if self.amplitude_on in ("query", "both"):
            q_rot = tuple(t * amplitude for t in q_rot)
        if self.amplitude_on in ("key", "both"):
            k_rot = tuple(t * amplitude for t in k_rot)
        return q_rot, k_rot

    def transform_qk(self, q, k, ctx):
        (q_cos, q_sin), (k_cos, k_sin) = ctx
        return rotate_signed(q, q_cos, q_sin), rotate_signed(k, k_cos, k_sin)
