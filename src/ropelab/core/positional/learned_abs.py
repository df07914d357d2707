"""learned_abs — a learned absolute position embedding added to the token embeddings (GPT-2 style).

``embedding`` (max_len, d_model), d_model = n_heads · head_dim, initialised N(0, ``init_std``) like the
backbone's token embedding (0.02). Positions beyond the model's max_len do not exist.
"""

from __future__ import annotations

import torch
from torch import nn

from ropelab.core.errors import require
from ropelab.core.positional.base import PositionalScheme


class LearnedAbsolute(PositionalScheme):
    length_limited = True  # a table of max_len rows: no position past it exists
    def __init__(self, head_dim, n_heads, max_len, init_std: float = 0.02):
        super().__init__(head_dim, n_heads, max_len)
        require(isinstance(init_std, (int, float)) and init_std >= 0, "pos.init_std", init_std, "a number >= 0")
        self.embedding = nn.Parameter(torch.randn(max_len, head_dim * n_heads) * float(init_std))

    def embed(self, x, ctx):
        return x + self.embedding[: x.shape[-2]]
