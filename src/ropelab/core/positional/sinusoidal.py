"""sinusoidal — Vaswani et al. 2017 (arXiv 1706.03762) fixed absolute embedding added to the tokens.

PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(p / base^(2i/d)), d = d_model = n_heads · head_dim.
``scale`` multiplies the table (1 = the paper's definition; the backbone does not scale its token
embeddings by √d, so at init the sinusoids dominate the residual stream — a property of the baseline).
"""

from __future__ import annotations

import torch

from ropelab.core.errors import require
from ropelab.core.positional.base import PositionalScheme


def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(max_len, d_model) float32 table; even channels sin, odd channels cos."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    inv = float(base) ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = position * inv
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = angles.sin()
    table[:, 1::2] = angles[:, : d_model // 2].cos()
    return table.float()


class Sinusoidal(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len, base: float = 10000.0, scale: float = 1.0):
        super().__init__(head_dim, n_heads, max_len)
        require(isinstance(base, (int, float)) and base > 1, "pos.base", base, "a number > 1")
        require(isinstance(scale, (int, float)) and scale >= 0, "pos.scale", scale, "a number >= 0")
        self.register_buffer("table", sinusoidal_table(max_len, head_dim * n_heads, base) * float(scale),
                             persistent=False)

    def embed(self, x, ctx):
        return x + self.table[: x.shape[-2]].to(x.dtype)
