"""rope — rotary position embedding (Su et al. 2021, arXiv 2104.09864), fixed frequencies.

f(x, m) = x · e^{imθ}; scores depend only on m − n. Frequencies come from a profile (``freqs``:
geometric base^(−2i/D), single, bandpass — see ``rotary.inverse_frequencies``). cos/sin are cached
once for ``max_len`` positions and sliced per forward.
"""

from __future__ import annotations

import torch

from ropelab.errors import require
from ropelab.positional.base import PositionalScheme
from ropelab.positional.rotary import cos_sin, inverse_frequencies, rotate_signed, signed_sin


class RoPE(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len, base: float = 10000.0, freqs: str = "geometric",
                 single_freq: float | None = None, band: tuple[float, float] | None = None):
        super().__init__(head_dim, n_heads, max_len)
        require(head_dim % 2 == 0, "model.d_model/model.n_heads", head_dim, "rotary schemes need an even head dim")
        inv_freq = inverse_frequencies(head_dim // 2, freqs, base, single_freq, band)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        cos, sin = cos_sin(torch.arange(max_len, dtype=torch.float32)[:, None] * inv_freq)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("sin_signed", signed_sin(sin), persistent=False)  # for rotate_signed

    def prepare(self, seq_len, device):
        return self.cos[:seq_len], self.sin_signed[:seq_len]

    def transform_qk(self, q, k, ctx):
        cos, sin_signed = ctx
        return rotate_signed(q, cos, sin_signed), rotate_signed(k, cos, sin_signed)
