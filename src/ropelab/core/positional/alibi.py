"""alibi — attention with linear biases (Press et al. 2022, arXiv 2108.12409); no rotation, no embedding.

score(t, s) += −m_h · (t − s) for key s ≤ t (the model folds the causal mask into the bias). Slopes:
for H a power of two m_h = 2^(−8h/H), h = 1…H; otherwise the reference implementation's interpolation
(the slopes of the nearest lower power of two P, then every other slope of 2P, the first H − P of them).

``heads_fraction`` < 1 is PoPE's "ALiBi half-heads" row: the first round-half-up(fraction · H) heads get
the standard slopes *for that many heads* (so they span the usual range), the remaining heads get
slope 0 (no positional information). ``slopes`` is a buffer, shape (H,).
"""

from __future__ import annotations

import math

import torch

from ropelab.core.errors import require
from ropelab.core.positional.base import PositionalScheme


def alibi_slopes(n_heads: int) -> list[float]:
    """Standard ALiBi slopes for ``n_heads`` heads (as in the paper's reference code)."""
    def power_of_two(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if n_heads <= 0:
        return []
    if math.log2(n_heads).is_integer():
        return power_of_two(n_heads)
    closest = 2 ** math.floor(math.log2(n_heads))
    return power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: n_heads - closest]


class ALiBi(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len, heads_fraction: float = 1.0):
        super().__init__(head_dim, n_heads, max_len)
        ok = isinstance(heads_fraction, (int, float)) and not isinstance(heads_fraction, bool)
        require(ok and 0 < heads_fraction <= 1, "pos.heads_fraction", heads_fraction, "a number in (0, 1]")
        self.n_alibi = math.floor(heads_fraction * n_heads + 0.5)
        require(self.n_alibi >= 1, "pos.heads_fraction", heads_fraction,
                f"rounds to no ALiBi head out of model.n_heads={n_heads}")
        slopes = alibi_slopes(self.n_alibi) + [0.0] * (n_heads - self.n_alibi)
        self.register_buffer("slopes", torch.tensor(slopes, dtype=torch.float32), persistent=False)
        self.register_buffer("positions", torch.arange(max_len, dtype=torch.float32), persistent=False)

    def prepare(self, seq_len, device):
        pos = self.positions[:seq_len]
        return self.slopes[:, None, None] * (pos[None, :] - pos[:, None])  # (H, T, T): −m (t − s)

    def attn_bias(self, ctx):
        return ctx
