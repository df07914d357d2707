"""The one pluggable part of the backbone: a positional scheme.

The attention block asks every scheme the same questions, so the backbone never branches on names:

* ``prepare(seq_len, device)`` — once per model forward: whatever the scheme needs for these positions
  (cos/sin tables, an additive bias). Learnable rotations are computed here once, not once per layer.
* ``embed(x, ctx)`` — add something to the token embeddings (absolute schemes); identity otherwise.
* ``transform_qk(q, k, ctx)`` — rotate / map q and k, shape (B, H, T, D) → (B, H, T, D') with D' = D
  for rotary schemes and 2D for PoPE; ``qk_width(head_dim)`` says which.
* ``attn_bias(ctx)`` — an additive (H, T, T) score bias (ALiBi) or None.

A scheme knows nothing of what wraps every scheme: momentum (``pos.momentum.gamma``) is applied by the
attention after ``transform_qk`` (``ropelab.core.positional.momentum``).

One scheme module is shared by all layers; its learnable parameters (Ω, A, Φ, δ) are ordinary
``nn.Parameter``s, and ``positional_parameters()`` names them for the optimiser, report and loggers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class PositionalScheme(nn.Module):
    name: str = ""  # the module's name: a scheme is its file, positional/<name>.py
    # True when a learned parameter is a table over positions (learned_abs): a trained model has no position
    # past its max_len, so it cannot be evaluated longer (ropelab.experiments.extrapolate says so instead of clamping)
    length_limited: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.name = cls.__module__.rpartition(".")[2]

    def __init__(self, head_dim: int, n_heads: int, max_len: int):
        super().__init__()
        self.head_dim, self.n_heads, self.max_len = head_dim, n_heads, max_len

    def qk_width(self, head_dim: int) -> int:
        return head_dim

    def prepare(self, seq_len: int, device: torch.device) -> Any:
        return None

    def embed(self, x: torch.Tensor, ctx: Any) -> torch.Tensor:
        return x

    def transform_qk(self, q: torch.Tensor, k: torch.Tensor, ctx: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k

    def attn_bias(self, ctx: Any) -> torch.Tensor | None:
        return None

    @torch.no_grad()
    def project_(self) -> None:
        """Called after every optimiser step: put constrained parameters back into their range."""

    def positional_parameters(self) -> dict[str, nn.Parameter]:
        """Learnable positional parameters by name (empty for fixed schemes)."""
        return dict(self.named_parameters())
