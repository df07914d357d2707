"""rope — rotary position embedding (Su et al. 2021, arXiv 2104.09864), fixed frequencies.

f(x, m) = x · e^{imθ}; scores depend only on m − n. Frequencies come from a profile (``freqs``:
geometric base^(−2i/D), single, bandpass — see ``rotary.inverse_frequencies``). cos/sin are cached
once for ``max_len`` positions and sliced per forward.

Length scalings (``scaling``, README "Length extrapolation"), at training or overridden at evaluation:
``linear`` (position interpolation), ``ntk`` (NTK-aware base scaling), ``yarn`` (ramp + attention temperature),
each by ``scaling_factor`` s; ``rotary.scaled_inverse_frequencies`` follows transformers' rope-init functions.
YaRN's attention factor multiplies cos and sin, as transformers does (the scores by its square). Factor 1 is
plain rope, bit for bit.
"""

from __future__ import annotations

import torch

from ropelab.core.errors import require
from ropelab.core.positional.base import PositionalScheme
from ropelab.core.positional.rotary import (SCALINGS, cos_sin, inverse_frequencies, parse_profile, rotate_signed,
                                       scaled_inverse_frequencies, signed_sin)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class RoPE(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len, base: float = 10000.0, freqs: str = "geometric",
                 single_freq: float | None = None, band: tuple[float, float] | None = None,
                 scaling: str | None = None, scaling_factor: float = 1.0, original_max_len: int | None = None,
                 beta_fast: float = 32.0, beta_slow: float = 1.0, attention_factor: float | None = None):
        super().__init__(head_dim, n_heads, max_len)
        require(head_dim % 2 == 0, "model.d_model/model.n_heads", head_dim, "rotary schemes need an even head dim")
        require(scaling is None or scaling in SCALINGS, "pos.scaling", scaling, f"null, {', '.join(SCALINGS)}")
        require(_number(scaling_factor) and scaling_factor >= 1 and (scaling is not None or scaling_factor == 1),
                "pos.scaling_factor", scaling_factor, "a number >= 1 (1 unless pos.scaling is linear, ntk or yarn)")
        require(scaling in (None, "linear") or parse_profile(freqs)[0] == "geometric", "pos.scaling", scaling,
                f"linear with pos.freqs={freqs} (ntk and yarn rescale the geometric spectrum's base)")
        require(scaling != "yarn" or (isinstance(original_max_len, int) and not isinstance(original_max_len, bool)
                                      and original_max_len >= 1), "pos.original_max_len", original_max_len,
                "the training length in tokens (an integer >= 1), needed by pos.scaling=yarn")
        require(_number(beta_fast) and _number(beta_slow) and beta_fast > beta_slow > 0, "pos.beta_fast", beta_fast,
                f"a number > pos.beta_slow ({beta_slow}) > 0")
        require(attention_factor is None or (_number(attention_factor) and attention_factor > 0),
                "pos.attention_factor", attention_factor, "null (yarn: 0.1 ln s + 1) or a number > 0")
        self.scaling, self.scaling_factor = scaling, scaling_factor
        inv_freq = inverse_frequencies(head_dim // 2, freqs, base, single_freq, band)
        inv_freq, self.attention_scaling = scaled_inverse_frequencies(
            inv_freq, scaling, scaling_factor, float(base), original_max_len, beta_fast, beta_slow, attention_factor)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        cos, sin = cos_sin(torch.arange(max_len, dtype=torch.float32)[:, None] * inv_freq)
        if self.attention_scaling != 1.0:  # YaRN's temperature, on cos and sin as in transformers
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.register_buffer("sin_signed", signed_sin(sin), persistent=False)  # for rotate_signed

    def prepare(self, seq_len, device):
        return self.cos[:seq_len], self.sin_signed[:seq_len]

    def transform_qk(self, q, k, ctx):
        cos, sin_signed = ctx
        return rotate_signed(q, cos, sin_signed), rotate_signed(k, cos, sin_signed)
