"""Rotary helpers shared by every rotary scheme: frequency profiles and the rotation itself.

Layout follows Hugging Face Llama ("rotate_half"): channel i is paired with channel i + D/2, so a
pretrained HF checkpoint's q/k projections keep their meaning when its rotary module is swapped.
"""

from __future__ import annotations

import math

import torch

from ropelab.core.errors import require

FREQ_PROFILES = ("geometric", "single", "bandpass")
BANDS = ("low", "mid", "high")  # thirds of the geometric spectrum's log range, lowest frequencies first


def parse_profile(profile: str) -> tuple[str, str | None]:
    """``"single@0.1"`` → ("single", "0.1"), ``"bandpass@low"`` → ("bandpass", "low"), ``"geometric"`` →
    ("geometric", None): the family and the option written after ``@`` (one sweepable value per profile)."""
    family, sep, option = str(profile).partition("@")
    require(family in FREQ_PROFILES and (not sep or (family != "geometric" and option)), "pos.freqs", profile,
            "geometric, single, single@<rad/token> (e.g. single@0.1), bandpass or bandpass@low|mid|high")
    return family, option if sep else None


def band_edges(n_pairs: int, base: float, band: str) -> tuple[float, float]:
    """(low, high) of one third of the geometric spectrum base^(−2i/D), i = 0 … D/2−1, split in log frequency:
    ``high`` = [θ_max · r^(1/3), θ_max], ``mid`` = [θ_max · r^(2/3), θ_max · r^(1/3)], ``low`` = [θ_min, θ_max ·
    r^(2/3)], with θ_max = 1, θ_min = base^(−(D/2−1)/(D/2)) and r = θ_min / θ_max (float64)."""
    require(band in BANDS, "pos.band", band, "low, mid, high or two numbers [low, high]")
    log_min = -math.log(float(base)) * (n_pairs - 1) / n_pairs  # log θ_min; log θ_max = 0
    k = {"high": 0, "mid": 1, "low": 2}[band]
    return math.exp(log_min * (k + 1) / 3), math.exp(log_min * k / 3)


def inverse_frequencies(n_pairs: int, profile: str = "geometric", base: float = 10000.0,
                        single_freq: float | None = None, band=None) -> torch.Tensor:
    """Angular frequency per channel pair in rad/token (float32, shape (n_pairs,)).

    geometric:        base^(-2i/D) for i = 0 … D/2-1 (RoPE; D = 2 * n_pairs).
    single@F:         F for every pair (also ``single`` with ``single_freq=F``; plain ``single``: the geometric
                      spectrum's median, base^(−1/2) = 0.01 at base 10000 and D/2 = 16).
    bandpass@third:   n_pairs frequencies log-spaced over one third (low | mid | high) of the geometric spectrum's
                      log range (``band_edges``); also ``bandpass`` with ``band=low|mid|high`` or ``band=[low, high]``;
                      plain ``bandpass`` is the middle third.
    """
    family, option = parse_profile(profile)
    require(isinstance(base, (int, float)) and not isinstance(base, bool) and base > 1, "pos.base", base,
            "a number > 1")
    geometric = 1.0 / (float(base) ** (torch.arange(0, 2 * n_pairs, 2, dtype=torch.int64).float() / (2 * n_pairs)))
    if family == "geometric":
        return geometric
    if family == "single":
        require(option is None or single_freq is None, "pos.single_freq", single_freq,
                f"null when pos.freqs={profile} names the frequency")
        if option is not None:
            try:
                single_freq = float(option)
            except ValueError:
                require(False, "pos.freqs", profile, "single@<a number > 0 in rad/token>, e.g. single@0.1")
        freq = float(geometric.median()) if single_freq is None else single_freq
        require(isinstance(freq, (int, float)) and not isinstance(freq, bool) and freq > 0,
                "pos.freqs" if option is not None else "pos.single_freq", profile if option is not None else freq,
                "a frequency > 0 in rad/token")
        return torch.full((n_pairs,), float(freq))
    require(option is None or band is None, "pos.band", band, f"null when pos.freqs={profile} names the band")
    band = option if option is not None else ("mid" if band is None else band)
    if isinstance(band, str):
        require(band in BANDS, "pos.freqs" if option is not None else "pos.band", profile if option is not None
                else band, "bandpass@low|mid|high (thirds of the geometric spectrum)")
        low, high = band_edges(n_pairs, base, band)
    else:
        ok = isinstance(band, (list, tuple)) and len(band) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in band)
        require(ok and 0 < band[0] <= band[1], "pos.band", band,
                "low, mid, high or two numbers [low, high] with 0 < low <= high")
        low, high = float(band[0]), float(band[1])
    exponents = torch.linspace(0.0, 1.0, n_pairs, dtype=torch.float64)
    return torch.exp(math.log(high) + exponents * (math.log(low) - math.log(high))).float()


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


# ---- RoPE's length scalings (rope's pos.scaling), after transformers.modeling_rope_utils ----------------------------
SCALINGS = ("linear", "ntk", "yarn")


def yarn_mscale(factor: float) -> float:
    """YaRN's default attention factor √(1/t) = 0.1 ln s + 1 (1 for s <= 1), as transformers' ``get_mscale``."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def yarn_correction_range(beta_fast: float, beta_slow: float, dim: int, base: float,
                          original_max_len: int) -> tuple[float, float]:
    """The pair indices (low, high) between which YaRN ramps from extrapolation to interpolation: the pairs that
    turn beta_fast and beta_slow times over ``original_max_len`` tokens, floored / ceiled, clipped to [0, dim − 1]
    (transformers' ``find_correction_range`` with ``truncate=True``)."""
    def correction_dim(rotations):
        return (dim * math.log(original_max_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

    return max(math.floor(correction_dim(beta_fast)), 0), min(math.ceil(correction_dim(beta_slow)), dim - 1)


def scaled_inverse_frequencies(inv_freq: torch.Tensor, scaling: str | None, factor: float, base: float,
                               original_max_len: int | None = None, beta_fast: float = 32.0,
                               beta_slow: float = 1.0, attention_factor: float | None = None
                               ) -> tuple[torch.Tensor, float]:
    """(inverse frequencies, attention factor) of a RoPE scaling applied to ``inv_freq`` (D/2 pairs, the geometric
    base^(−2i/D) for ntk and yarn), computed with the float operations of transformers' rope-init functions:

    linear (position interpolation, Chen et al. 2023): θ_i / s.
    ntk (NTK-aware, bloc97): the geometric spectrum of base · s^(D/(D−2)) — transformers has it only in its dynamic
        form, whose base at sequence length L is base · (s·L/L₀ − (s − 1))^(D/(D−2)), the static one at L = L₀(2s−1)/s.
    yarn (Peng et al. 2023): per pair, θ_i/s and θ_i blended by a ramp in the pair index between the pairs that turn
        beta_fast and beta_slow times over ``original_max_len`` tokens (fast pairs keep θ_i, slow ones get θ_i/s);
        attention factor (multiplies cos and sin, so the scores by its square) ``attention_factor`` or 0.1 ln s + 1.

    ``scaling=None`` or ``factor == 1`` returns ``inv_freq`` itself and 1.0, unless a yarn ``attention_factor`` is
    given: the identity, bit for bit (YaRN's float blend θ(1 − e) + θe would not always round back to θ)."""
    attention = 1.0
    if scaling == "yarn" and attention_factor is not None:
        attention = float(attention_factor)
    if scaling is None or factor == 1:
        return inv_freq, attention
    dim = 2 * inv_freq.shape[0]
    if scaling == "linear":
        return inv_freq / factor, attention
    if scaling == "ntk":
        scaled_base = base * factor ** (dim / (dim - 2))
        return 1.0 / (scaled_base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), attention
    # yarn
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    low, high = yarn_correction_range(beta_fast, beta_slow, dim, base, original_max_len)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp  # 1: the pair keeps θ_i (extrapolates), 0: θ_i / s (interpolates)
    inv_freq = interpolation * (1 - keep) + extrapolation * keep
    return inv_freq, (yarn_mscale(factor) if attention_factor is None else float(attention_factor))
