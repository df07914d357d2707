"""bifocal — Bifocal Attention (arXiv 2601.22402): "geometric eyes" beside "spectral eyes".

The first n_s = round-half-up(``spectral_fraction`` · H) heads are spectral — exactly ``spectral``'s
f(x, m) = A ⊙ (x · e^{i(mΩ + Φ)}) with learnable Ω, A, Φ and the same options (``phase_std``,
``phase_on``, ``amplitude_on``, frequency profile); the other H − n_s heads are fixed ``rope`` with the
same frequency profile. Both parts are the existing modules, composed (``self.spectral`` built for n_s
heads, ``self.geometric``), so the learnable parameters cover only the spectral heads:
``omega``, ``amplitude``, ``phase`` of shape (n_s, D/2), row j = head j (or (1, D/2) with ``share``). With ``phase_std=0`` the scheme
equals ``rope`` bit for bit at init.
"""

from __future__ import annotations

import math

import torch

from ropelab.core.errors import require
from ropelab.core.positional.base import PositionalScheme
from ropelab.core.positional.rope import RoPE
from ropelab.core.positional.spectral import SpectralRoPE


class Bifocal(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len, spectral_fraction: float = 0.5, base: float = 10000.0,
                 freqs: str = "geometric", single_freq: float | None = None,
                 band: tuple[float, float] | None = None, phase_std: float = 1e-3, phase_on: str = "query",
                 amplitude_on: str = "both", share: bool = False):
        super().__init__(head_dim, n_heads, max_len)
        ok = isinstance(spectral_fraction, (int, float)) and not isinstance(spectral_fraction, bool)
        require(ok and 0 <= spectral_fraction <= 1, "pos.spectral_fraction", spectral_fraction, "a number in [0, 1]")
        self.n_spectral = math.floor(spectral_fraction * n_heads + 0.5)
        rotary = dict(base=base, freqs=freqs, single_freq=single_freq, band=band)
        self.spectral = SpectralRoPE(head_dim, self.n_spectral, max_len, phase_std=phase_std, phase_on=phase_on,
                                     amplitude_on=amplitude_on, share=share, **rotary)
        self.geometric = RoPE(head_dim, n_heads - self.n_spectral, max_len, **rotary)

    def positional_parameters(self):
        return dict(self.spectral.named_parameters())  # omega, amplitude, phase: (n_spectral, D/2)

    def prepare(self, seq_len, device):
        return self.spectral.prepare(seq_len, device), self.geometric.prepare(seq_len, device)

    def transform_qk(self, q, k, ctx):
        spectral_ctx, geometric_ctx = ctx
        n = self.n_spectral
        if n == q.shape[1]:
            return self.spectral.transform_qk(q, k, spectral_ctx)
        if n == 0:
            return self.geometric.transform_qk(q, k, geometric_ctx)
        qs, ks = self.spectral.transform_qk(q[:, :n], k[:, :n], spectral_ctx)
        qg, kg = self.geometric.transform_qk(q[:, n:], k[:, n:], geometric_ctx)
        return torch.cat((qs, qg), dim=1), torch.cat((ks, kg), dim=1)
