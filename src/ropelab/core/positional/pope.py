"""pope — Polar Coordinate Position Embeddings (Gopalakrishnan et al. 2025, arXiv 2509.10534).

Per head, query position t, key position s and component c = 0…d−1 (d = head_dim):
  μq = softplus(q_c), μk = softplus(k_c)                 magnitudes: content only ("what")
  q̃_tc = μq e^{i tθ_c},  k̃_sc = μk e^{i(sθ_c + δ_c)}      phases: position only ("where")
  score = Re Σ_c conj(q̃_tc) k̃_sc = Σ_c μq μk cos((s − t)θ_c + δ_c)
with θ_c = base^(−c/d) (d frequencies, not d/2 pairs) and a learnable key-side bias ``delta`` (H, d),
clamped to [−2π, 0] in the forward, initialised 0 (``delta_init: zero``) or Uniform(−2π, 0) (``uniform``).

Computed as one real dot product of width 2d that any SDPA kernel takes:
  q = [μq cos tθ, μq sin tθ],  k = [μk cos(sθ + δ), μk sin(sθ + δ)]  →  q·k = Σ μq μk cos((s−t)θ + δ).
The model keeps the 1/√head_dim score scale (d products, as for RoPE) and pads v to 2d.
The clamp passes no gradient to a δ outside [−2π, 0]: a δ pushed past a bound stays at it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ropelab.core.errors import require
from ropelab.core.positional.base import PositionalScheme

DELTA_INITS = ("zero", "uniform")


class PoPE(PositionalScheme):
    def __init__(self, head_dim, n_heads, max_len, base: float = 10000.0, delta_init: str = "zero",):
        super().__init__(head_dim, n_heads, max_len)
        require(isinstance(base, (int, float)) and base > 1, "pos.base", base, "a number > 1")
        require(delta_init in DELTA_INITS, "pos.delta_init", delta_init, f"one of {', '.join(DELTA_INITS)}")
        theta = float(base) ** (-torch.arange(head_dim, dtype=torch.float64) / head_dim)
        self.register_buffer("theta", theta.float(), persistent=False)
        angles = torch.arange(max_len, dtype=torch.float32)[:, None] * self.theta  # (max_len, d)
        self.register_buffer("angles", angles, persistent=False)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        delta = torch.zeros(n_heads, head_dim)
        if delta_init == "uniform":
            delta.uniform_(-2 * math.pi, 0.0)
        self.delta = nn.Parameter(delta)

    def qk_width(self, head_dim):
        return 2 * head_dim

    def clamped_delta(self) -> torch.Tensor:
        return self.delta.clamp(-2 * math.pi, 0.0)

    @torch.no_grad()
    def project_(self):
        # the forward clamp passes no gradient past a bound; projecting keeps δ where it can move again
        self.delta.clamp_(-2 * math.pi, 0.0)

    def prepare(self, seq_len, device):
        key_angles = self.angles[:seq_len] + self.clamped_delta()[:, None, :]  # (H, T, d)
        return self.cos[:seq_len], self.sin[:seq_len], key_angles.cos(), key_angles.sin()

    def transform_qk(self, q, k, ctx):
        q_cos, q_sin, k_cos, k_sin = ctx
        mq, mk = F.softplus(q), F.softplus(k)
        return torch.cat((mq * q_cos, mq * q_sin), dim=-1), torch.cat((mk * k_cos, mk * k_sin), dim=-1)
