"""Attention weights of a trained run, from the model's own attention blocks (for the report's maps).

``Llama`` calls fused SDPA, which never materialises the weights; each attention block can return them
instead (``need_weights=True``: explicit scores · 1/√head_dim + the scheme's mask → softmax, after the
scheme's transform and momentum, ``ropelab.core.model.Attention``), and here the blocks are run that way, layer by
layer. ``attention_output`` sets a block's output from those weights beside its fused output, so a test can
check that the two agree. The model comes from the run's own config through ``ropelab.core.build``.

    weights, tokens = run_attention("runs/momentum_gamma/pos.momentum.gamma=0.5,pos=rope,seed=0,task=assoc_recall")
    weights.shape  # (layers, heads, T, T), first validation example, padding cropped
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from ropelab.core import record
from ropelab.core.locality import attention_weights, validation_example
from ropelab.core.model import Llama


@torch.no_grad()
def attention_output(model: Llama, idx: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(a layer's attention output computed from its weights, the same block's fused-SDPA output)."""
    x, ctx, mask = model.inputs(idx)
    for block in model.blocks[:layer]:
        x = block(x, model.pos, ctx, mask)
    block = model.blocks[layer]
    h = block.attn_norm(x)
    return block.attn(h, model.pos, ctx, mask, need_weights=True)[0], block.attn(h, model.pos, ctx, mask)


def model_from_config(cfg: Mapping[str, Any]) -> tuple[Llama, Any]:
    """The untrained model and in-distribution task that ``ropelab.core.train.run`` builds for a run's saved config
    (``init_from``'s weights left out: a checkpoint goes over them)."""
    from ropelab.core.build import build
    from ropelab.core.config import record_config

    built = build(record_config(cfg), for_checkpoint=True)
    return built.model, built.task


class RunFolderError(FileNotFoundError):
    """A path given as a trained run lacks what one holds: said in one line by the command that read it."""


def load_run_model(run_dir: str | Path, checkpoint: str = "checkpoints/last.ckpt") -> tuple[Llama, Any, dict]:
    """(model with the checkpoint's weights, task, config) of a run folder."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise RunFolderError(f"{run_dir} is not a run folder (no config.yaml)")
    if not (run_dir / checkpoint).is_file():
        raise RunFolderError(f"{run_dir / checkpoint} does not exist: the run never reached a validation")
    cfg = record.read(run_dir).saved_config
    if cfg is None:
        raise RunFolderError(f"{run_dir / 'config.yaml'} is not a run's config (unreadable)")
    model, task = model_from_config(cfg)
    try:
        model.load_state_dict(record.checkpoint_weights(run_dir / checkpoint))
    except record.UnsafeCheckpoint as err:
        raise RunFolderError(str(err)) from None
    return model.eval(), task, cfg


def run_attention(run_dir: str | Path, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(weights (layers, heads, T, T), input tokens (T,)) of a run's trained model on one validation example."""
    model, task, cfg = load_run_model(run_dir)
    inputs, _ = validation_example(cfg, task, index)
    weights = attention_weights(model, torch.as_tensor(inputs)[None])
    return weights[0].numpy(), inputs
