"""How local a trained model's attention is: the mass each query puts on its k most recent tokens.

The momentum paper's "attention sharpens along the diagonal as γ grows" is read as this number rising with γ.
A completed run keeps it in ``summary.json`` (``attention``: ``local_mass`` over the first ``examples``
validation examples, and ``uniform``, what uniform causal attention gives on the same examples), so a report
rebuilds it from the committed record, which keeps no checkpoint.

Weights come from the model's own attention blocks (``need_weights=True``: explicit scores · 1/√head_dim + the
scheme's mask → softmax, after the scheme's transform and momentum; ``ropelab.core.model.Attention``), layer by layer.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np
import torch

K = 3          # tokens counted as recent, the query's own included
EXAMPLES = 16  # validation examples a run is measured on


def local_mass(weights: np.ndarray, k: int = K) -> float:
    """Attention mass on the k most recent keys (i−k < j ≤ i), averaged over queries i ≥ k and every leading
    axis (layers, heads, examples of one length). ``weights``: (..., T, T), rows summing to 1."""
    w = np.asarray(weights, dtype=float)
    T = w.shape[-1]
    if T <= k:
        return math.nan
    i, j = np.indices((T, T))
    band = ((i - j) >= 0) & ((i - j) < k)
    mass = (w * band).sum(axis=-1)[..., k:]
    return float(mass.mean())


def uniform_local_mass(T: int, k: int = K) -> float:
    """``local_mass`` of uniform causal attention over a length-T sequence: mean of k/(i+1), i = k … T−1."""
    return float(np.mean([k / (i + 1) for i in range(k, T)])) if T > k else math.nan


def sharpening(maps: Iterable[np.ndarray], k: int = K) -> tuple[float, float]:
    """(mean local mass, mean uniform reference) over examples of different lengths, each map (..., T, T)."""
    pairs = [(local_mass(m, k), uniform_local_mass(m.shape[-1], k)) for m in maps]
    pairs = [p for p in pairs if not math.isnan(p[0])]
    if not pairs:
        return math.nan, math.nan
    return float(np.mean([p[0] for p in pairs])), float(np.mean([p[1] for p in pairs]))


@torch.no_grad()
def attention_weights(model, idx: torch.Tensor) -> torch.Tensor:
    """idx (B, T) → softmax attention weights (B, layers, heads, T, T), query on dim −2, key on dim −1."""
    x, ctx, mask = model.inputs(idx)
    maps = []
    for block in model.blocks:
        x, weights = block(x, model.pos, ctx, mask, need_weights=True)
        maps.append(weights)
    return torch.stack(maps, dim=1)


def first_validation_batch(cfg: Mapping[str, Any]) -> int:
    """How many examples the run's first validation batch holds (the examples read here)."""
    data = cfg.get("data", {})
    return min(int(data.get("eval_batch_size", 128)), int(data.get("val_size", 256)))


def validation_example(cfg: Mapping[str, Any], task, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Example ``index`` of the run's validation set (the same draw as TaskDataModule.fixed_set), cropped
    after its last answer token."""
    from ropelab.core.data import draw

    n = first_validation_batch(cfg)
    inputs, targets, _ = draw(task.for_split("val"), int(cfg.get("seed", 0)), "val", n, index=0, grouped=True)
    answer = np.flatnonzero(targets[index] != -100)
    end = int(answer[-1]) + 1 if len(answer) else inputs.shape[1]
    return inputs[index, :end], targets[index, :end]


def run_maps(model, task, cfg: Mapping[str, Any], n_examples: int = EXAMPLES) -> list[np.ndarray]:
    """Attention weights (layers, heads, T, T) of a model on the first ``n_examples`` validation examples."""
    device = next(model.parameters()).device
    maps = []
    for index in range(n_examples):
        inputs, _ = validation_example(cfg, task, index)
        maps.append(attention_weights(model, torch.as_tensor(inputs, device=device)[None])[0].float().cpu().numpy())
    return maps


def measure(model, task, cfg: Mapping[str, Any], k: int = K, n_examples: int = EXAMPLES) -> dict[str, Any]:
    """The record's ``attention`` entry of a trained model (in eval mode, fp32, no autocast)."""
    n_examples = min(n_examples, first_validation_batch(cfg))
    was_training = model.training
    model.eval()
    try:
        with torch.autocast(device_type=next(model.parameters()).device.type, enabled=False):
            mass, uniform = sharpening(run_maps(model, task, cfg, n_examples), k)
    finally:
        model.train(was_training)
    return {"k": k, "examples": n_examples, "local_mass": mass, "uniform": uniform}
