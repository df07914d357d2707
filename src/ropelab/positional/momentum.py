"""Momentum attention (arXiv 2602.04902): q̂_t = q_t + γ(q_t − q_{t−1}), the same for keys.

Applied after the positional transform, values untouched. As a filter on the sequence axis its gain is
|H(ω)|² = 1 + 4γ(1+γ)sin²(ω/2): low frequencies pass, the highest are amplified (1 + 2γ)×.
Following the paper's reference code, q_{−1} = 0, so q̂_0 = (1 + γ) q_0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def momentum(x: torch.Tensor, gamma: float) -> torch.Tensor:
    """x: (B, H, T, D); returns x + γ(x_t − x_{t−1}) along T."""
    previous = F.pad(x, (0, 0, 1, 0))[..., :-1, :]
    return x + gamma * (x - previous)


def gain_squared(omega: torch.Tensor, gamma: float) -> torch.Tensor:
    """|H(ω)|² of the momentum filter, for checking the formula."""
    return 1 + 4 * gamma * (1 + gamma) * torch.sin(omega / 2) ** 2
