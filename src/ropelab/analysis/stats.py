"""Statistics over seeds: means with n, t confidence intervals, paired scheme differences, and the two
landmarks of a loss curve that the Bifocal paper's lock-in claim is about. The distributions and tests are
scipy's (``scipy.stats``: the t quantile, the binomial test).

Landmarks of a train-loss curve (indexed by step), both measured against the *plateau* — the median of the
smoothed loss over a window of early steps (20–60 by default), where the loss sits after the first fast drop:

* ``onset``     — the step at which the loss leaves the plateau for good: the first step after which the
  smoothed loss stays below ``(1 − onset_drop)`` × plateau (0.9 × plateau by default). This is what "locks
  in near step 150" describes: the start of the fall.
* ``lock-in``   — the half-plateau crossing: the first step after which the smoothed loss stays below
  ``lockin_frac`` × plateau (0.5 by default). Later than the onset by the time the fall takes.

Both are NaN when the curve never gets (and stays) there, and None when the run ends before the plateau
window does. ``onset`` smooths with a centred window so that its step is not delayed by the smoothing;
``lock-in`` keeps the trailing mean it has always used, so earlier reports stay comparable.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd
from scipy.stats import binomtest, t as student_t


@functools.cache
def t975(df: int) -> float:
    """The two-sided 95 % Student t quantile t_{0.975, df}."""
    return float(student_t.ppf(0.975, df)) if df >= 1 else math.nan


@dataclass(frozen=True)
class Estimate:
    """Mean over n values with the SD and the half-width of its 95 % t confidence interval."""

    mean: float
    sd: float
    n: int

    @property
    def half_width(self) -> float:
        return t975(self.n - 1) * self.sd / math.sqrt(self.n) if self.n > 1 else math.nan

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def excludes_zero(self) -> bool:
        return self.n > 1 and (self.low > 0 or self.high < 0)

    def text(self, fmt: str = "{:.3g}") -> str:
        if self.n == 0:
            return "–"
        if self.n == 1:
            return f"{fmt.format(self.mean)} (n=1)"
        return f"{fmt.format(self.mean)} [{fmt.format(self.low)}, {fmt.format(self.high)}] (n={self.n})"


def estimate(values: Iterable[float | None]) -> Estimate:
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if not len(arr):
        return Estimate(math.nan, math.nan, 0)
    return Estimate(float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else math.nan, len(arr))


def paired_difference(a: dict, b: dict) -> Estimate:
    """a − b over the keys (seeds) both have a finite value for: same seed = same data and same backbone
    initialisation, so the pairing removes what the schemes share."""
    keys = [k for k in a if k in b and _finite(a[k]) and _finite(b[k])]
    return estimate(a[k] - b[k] for k in keys)


def _finite(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


# ----------------------------------------------------------------------------------------------- landmarks

@dataclass(frozen=True)
class Landmarks:
    smooth: int = 10
    plateau: tuple[int, int] = (20, 60)
    lockin_frac: float = 0.5
    onset_drop: float = 0.1

    def describe(self) -> str:
        a, b = self.plateau
        return (f"plateau = median of the smoothed train loss over steps {a}–{b}; onset = first step after which "
                f"the loss (centred mean over {self.smooth} steps) stays below {1 - self.onset_drop:g} × plateau "
                f"(it has left the plateau); lock-in = first step after which the loss (trailing mean over "
                f"{self.smooth} steps) stays below {self.lockin_frac:g} × plateau; \"none\" if it never does; "
                f"\"n/a\" if the run ends before step {b + 1}.")


def train_loss(metrics: pd.DataFrame | None) -> pd.Series:
    """train/loss by step (the last value logged at each step)."""
    if metrics is None or "train/loss" not in metrics or "step" not in metrics:
        return pd.Series(dtype=float)
    return metrics[["step", "train/loss"]].dropna().groupby("step")["train/loss"].last().sort_index()


def metric_curve(metrics: pd.DataFrame | None, metric: str = "val/acc") -> pd.Series:
    """``metric`` by step (the last value logged at each step)."""
    if metrics is None or metric not in metrics:
        return pd.Series(dtype=float)
    return metrics[["step", metric]].dropna().groupby("step")[metric].last().sort_index()


def first_step_at(curve: pd.Series, threshold: float) -> float:
    """The first step (index of ``curve``) whose value is at least ``threshold``; NaN when none is."""
    hits = curve.index[curve.to_numpy() >= threshold]
    return float(hits[0]) if len(hits) else math.nan


def stays_below_from(smoothed: pd.Series, threshold_frac: float, plateau: tuple[int, int]) -> float | None:
    """First step ≥ the plateau window's start after which ``smoothed`` stays below ``threshold_frac`` ×
    plateau; NaN if it never does, None if the series ends inside the plateau window."""
    a, b = plateau
    window = smoothed[(smoothed.index >= a) & (smoothed.index <= b)]
    if window.empty or smoothed.index.max() <= b:
        return None
    threshold = threshold_frac * float(window.median())
    after = smoothed[smoothed.index >= a]
    above = np.flatnonzero(after.to_numpy() >= threshold)
    if not len(above):
        return float(after.index[0])
    if above[-1] == len(after) - 1:
        return math.nan
    return float(after.index[above[-1] + 1])


def onset_step(loss: pd.Series, rule: Landmarks = Landmarks()) -> float | None:
    centred = loss.rolling(rule.smooth, min_periods=1, center=True).mean()
    return stays_below_from(centred, 1 - rule.onset_drop, rule.plateau)


def lockin_step(smoothed: pd.Series, rule: Landmarks = Landmarks()) -> float | None:
    """On the trailing-mean series (report.smoothed_train_loss)."""
    return stays_below_from(smoothed, rule.lockin_frac, rule.plateau)


# ----------------------------------------------------------------------------------------------- Φ saw-tooth

def binomial_two_sided(k: int, n: int) -> float:
    """Exact two-sided binomial p-value of k successes in n against p = 1/2."""
    return float(binomtest(k, n, 0.5).pvalue)


def sawtooth(phase: np.ndarray, permutations: int = 20000, seed: int = 0) -> dict[str, Any]:
    """Saw-tooth statistics of a final Φ of shape (H, P): how often neighbouring channel pairs have opposite
    signs (chance: 1/2 for independent signs) with a binomial and a permutation p-value, the lag-1
    autocorrelation over pairs (−1 for a perfect saw-tooth) and the size of Φ."""
    phase = np.asarray(phase, dtype=np.float64)
    signs = np.sign(phase)
    flips = signs[:, 1:] * signs[:, :-1] < 0
    n, k = int(flips.size), int(flips.sum())
    rng = np.random.default_rng(seed)
    count = 0
    for _ in range(permutations):
        s = rng.permuted(signs, axis=1)
        count += int((s[:, 1:] * s[:, :-1] < 0).sum() >= k)
    centred = phase - phase.mean(axis=1, keepdims=True)
    num = (centred[:, 1:] * centred[:, :-1]).sum()
    den = (centred ** 2).sum()
    return {"alternation": k / n, "neighbours": n, "alternating": k, "binomial_p": binomial_two_sided(k, n),
            "permutation_p": (count + 1) / (permutations + 1), "lag1_autocorrelation": float(num / den) if den else None,
            "mean_abs_phase": float(np.abs(phase).mean()), "mean_abs_neighbour_step": float(np.abs(np.diff(phase)).mean()),
            "max_abs_phase": float(np.abs(phase).max()), "positive_fraction": float((phase > 0).mean())}
