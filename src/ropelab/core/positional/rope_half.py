"""rope_half — RoPE on part of each head's channels, the rest unrotated (PoPE's "RoPE half-channels" row).

Partial rotary as in GPT-NeoX (``rotary_pct``) and x-transformers (``rotary_emb_dim``): the first
R = 2 · round-half-up(``rotary_fraction`` · D/2) channels of every head are rotated exactly like ``rope``
with head dim R (rotate_half pairing inside those R channels; frequency profile ``freqs`` over R/2 pairs,
so geometric is base^(−2i/R)); channels R…D−1 pass through untouched and carry content only.
``rotary_fraction: 1`` is ``rope`` exactly (a ``rope`` module rotates the R channels). No learnable parameters.
"""

from __future__ import annotations

import math

import torch

from ropelab.core.errors import require
from ropelab.core.positional.base import PositionalScheme
from ropelab.core.positional.rope import RoPE


class RoPEHalf(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len, rotary_fraction: float = 0.5, base: float = 10000.0,
                 freqs: str = "geometric", single_freq: float | None = None,
                 band: tuple[float, float] | None = None):
        super().__init__(head_dim, n_heads, max_len)
        require(head_dim % 2 == 0, "model.d_model/model.n_heads", head_dim, "rotary schemes need an even head dim")
        ok = isinstance(rotary_fraction, (int, float)) and not isinstance(rotary_fraction, bool)
        require(ok and 0 < rotary_fraction <= 1, "pos.rotary_fraction", rotary_fraction, "a number in (0, 1]")
        rotary_dim = 2 * math.floor(rotary_fraction * head_dim / 2 + 0.5)
        require(rotary_dim >= 2, "pos.rotary_fraction", rotary_fraction,
                f"rotates no channel pair of a head dim of {head_dim}")
        self.rotary_dim = rotary_dim
        self.rotary = RoPE(rotary_dim, n_heads, max_len, base=base, freqs=freqs, single_freq=single_freq, band=band)

    def prepare(self, seq_len, device):
        return self.rotary.prepare(seq_len, device)

    def transform_qk(self, q, k, ctx):
        r = self.rotary_dim
        if r == self.head_dim:
            return self.rotary.transform_qk(q, k, ctx)
        q_rot, k_rot = self.rotary.transform_qk(q[..., :r], k[..., :r], ctx)
        return torch.cat((q_rot, q[..., r:]), dim=-1), torch.cat((k_rot, k[..., r:]), dim=-1)
