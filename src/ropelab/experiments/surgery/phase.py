"""Φ after fine-tuning: Ω drift, the saw-tooth statistics of the final Φ (``ropelab.analysis.stats.sawtooth``) and
what the paper's init would show if Φ never moved."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ropelab.analysis.stats import sawtooth
from ropelab.core import runs


PAPER_PHASE_OFFSET = 7.6e-4  # Bifocal paper: mean offset of the learned Φ saw-tooth (rad)


def untrained_phase(n: int, sigma: float = 1e-3) -> dict[str, float]:
    """What Φ ~ N(0, σ) — the paper's init — shows if it never moves: E|Φ| = σ·√(2/π) and the SD of the mean of
    n values of |Φ|, σ·√(1 − 2/π)/√n; independent signs alternate between neighbours half the time."""
    mean, sd = sigma * math.sqrt(2 / math.pi), sigma * math.sqrt(1 - 2 / math.pi) / math.sqrt(n)
    return {"sigma": sigma, "n": n, "expected_mean_abs": mean, "sd_of_mean_abs": sd,
            "paper_z": (PAPER_PHASE_OFFSET - mean) / sd}


def analyse_trace(run_dir: Path) -> dict[str, Any]:
    trace = np.load(run_dir / runs.TRACE)
    steps = trace["steps"]
    omega0, omega = trace["omega"][0], trace["omega"][-1]  # (H, P)
    rel = (omega - omega0) / omega0
    return {"steps": steps.tolist(), "omega_init": omega0[0].tolist(), "omega_final": omega.tolist(),
            "omega_rel_drift": rel.tolist(), "omega_rel_drift_mean_per_pair": rel.mean(0).tolist(),
            "omega_rel_drift_max_abs": float(np.abs(rel).max()), "omega_rel_drift_median_abs": float(np.median(np.abs(rel))),
            "amplitude_final": trace["amplitude"][-1].tolist(), "phase_init": trace["phase"][0].tolist(),
            "phase_final": trace["phase"][-1].tolist(), "sawtooth": sawtooth(trace["phase"][-1])}
