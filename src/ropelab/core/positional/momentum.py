"""Momentum attention (arXiv 2602.04902): q̂_t = q_t + γ(q_t − q_{t−1}), the same for keys.

Applied around any scheme, after its positional transform, values untouched: configured once as
``pos.momentum.gamma`` (default in conf/config.yaml, 0 = off), read by ``gamma_of`` and applied by the attention
block (``ropelab.core.model.Attention``); no scheme knows of it. As a filter on the sequence axis its gain is
|H(ω)|² = 1 + 4γ(1+γ)sin²(ω/2): low frequencies pass, the highest are amplified (1 + 2γ)×.
Following the paper's reference code, q_{−1} = 0, so q̂_0 = (1 + γ) q_0.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F

from ropelab.core.errors import ConfigError, require

KEY = "momentum"  # its block in the pos node: pos.momentum.gamma
OPTIONS = ("gamma",)


def gamma_of(pos: Mapping[str, Any]) -> float:
    """γ of the ``pos`` node's momentum block (0 when there is none), checked: one-line ConfigError otherwise."""
    block = dict(pos.get(KEY) or {})
    for key in block:
        if key not in OPTIONS:
            raise ConfigError(f"pos.{KEY}.{key} is not a known key: valid keys are {', '.join(OPTIONS)}")
    value = block.get("gamma", 0.0)
    require(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0, f"pos.{KEY}.gamma",
            value, "a number >= 0")
    return float(value)


def momentum(x: torch.Tensor, gamma: float) -> torch.Tensor:
    """x: (B, H, T, D); returns x + γ(x_t − x_{t−1}) along T."""
    previous = F.pad(x, (0, 0, 1, 0))[..., :-1, :]
    return x + gamma * (x - previous)


def gain_squared(omega: torch.Tensor, gamma: float) -> torch.Tensor:
    """|H(ω)|² of the momentum filter, for checking the formula."""
    return 1 + 4 * gamma * (1 + gamma) * torch.sin(omega / 2) ** 2
