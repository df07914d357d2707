"""Rotary helpers shared by every rotary scheme: frequency profiles and the rotation itself.

Layout follows Hugging Face Llama ("rotate_half"): channel i is paired with channel i + D/2, so a
pretrained HF checkpoint's q/k projections keep their meaning when its rotary module is swapped.
"""

from __future__ import annotations

import torch

from tasks.base import require

FREQ_PROFILES = ("geometric", "single", "bandpass")


def inverse_frequencies(n_pairs: int, profile: str = "geometric", base: float = 10000.0,
                        single_freq: float | None = None, band: tuple[float, float] | None = None) -> torch.Tensor:
    """Angular frequency per channel pair (float32, shape (n_pairs,)).

    geometric: base^(-2i/D) for i = 0 … D/2-1 (RoPE; D = 2 * n_pairs).
    single:    one frequency for every pair (default: the geometric spectrum's median).
    bandpass:  geometric spacing restricted to [low, high] (default: the middle third of the geometric band).
    """
    require(profile in FREQ_PROFILES, "pos.freqs", profile, f"one of {', '.join(FREQ_PROFILES)}")
    require(isinstance(base, (int, float)) and base > 1, "pos.base", base, "a number > 1")
    geometric = 1.0 / (float(base) ** (torch.arange(0, 2 * n_pairs, 2, dtype=torch.int64).float() / (2 * n_pairs)))
    if profile == "geometric":
        return geometric
    if profile == "single":
        freq = float(geometric.median()) if single_freq is None else float(single_freq)
        require(freq > 0, "pos.single_freq", single_freq, "a number > 0")
        return torch.full((n_pairs,), freq)
    low, high = band if band is not None else (float(geometric[2 * n_pairs // 3]), float(geometric[n_pairs // 3]))
    require(0 < low <= high, "pos.band", band, "two numbers 0 < low <= high")
    return torch.logspace(torch.log10(torch.tensor(high)), torch.log10(torch.tensor(low)), n_pairs)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x · e^{iθ} in the rotate_half layout; cos/sin have the full width D (each half repeated)."""
    return x * cos + rotate_half(x) * sin


def cos_sin(angles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., T, D/2) angles → (..., T, D) cos and sin in the rotate_half layout."""
    full = torch.cat((angles, angles), dim=-1)
    return full.cos(), full.sin()


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin in the rotate_half layout with its first half negated, for ``rotate_signed``."""
    first, second = sin.chunk(2, dim=-1)
    return torch.cat((-first, second), dim=-1)


def rotate_signed(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """``rotate(x, cos, sin)`` bit for bit (negation is exact, so (−x₂)·s = x₂·(−s)), with the sign folded
    into the table: one ``roll`` instead of chunk + neg + cat per call. ``sin_signed = signed_sin(sin)``."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed
