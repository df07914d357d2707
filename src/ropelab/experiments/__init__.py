"""Experiments and tools that compose the core and the analyses (surgery, bench, GPU check, smoke,
calibration, extrapolation, W&B export)."""
