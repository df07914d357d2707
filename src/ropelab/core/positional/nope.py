"""nope — no positional information at all (PoPE's table; Kazemnejad et al. 2023, arXiv 2305.19466).

Only the causal mask breaks the permutation symmetry. No options, no parameters.
"""

from __future__ import annotations

from ropelab.core.positional.base import PositionalScheme


class NoPE(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len):
        super().__init__(head_dim, n_heads, max_len)
