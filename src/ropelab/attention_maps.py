"""Attention weights of a trained run, recomputed from the model's own modules (for the report's maps).

``Llama`` calls fused SDPA, which never materialises the weights, so this module repeats the attention math
of ``ropelab.model`` step by step — ``attn_norm`` → ``attn.qkv`` → ``pos.prepare`` / ``pos.qk`` (the scheme's
transform and momentum) → scores · 1/√head_dim + the scheme's bias → causal mask → softmax — while the
residual stream between layers is advanced by the model's own blocks. ``attention_output`` rebuilds a
block's attention output from these weights, so a test can check that the two agree.

    weights, tokens = run_attention("runs/momentum_gamma/pos.momentum.gamma=0.5,pos=rope,seed=0,task=assoc_recall")
    weights.shape  # (layers, heads, T, T), first validation example, padding cropped
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
import yaml

from ropelab.model import Llama, LlamaConfig, build_model, causal_mask


@torch.no_grad()
def attention_weights(model: Llama, idx: torch.Tensor) -> torch.Tensor:
    """idx (B, T) → softmax attention weights (B, layers, heads, T, T), query on dim −2, key on dim −1."""
    B, T = idx.shape
    pos = model.pos
    x, ctx, mask = model.inputs(idx)
    causal = causal_mask(T, idx.device)
    maps = []
    for block in model.blocks:
        attn = block.attn
        h = block.attn_norm(x)
        q, k, _ = attn.qkv(h).view(B, T, 3, attn.n_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        q, k = pos.qk(q, k, ctx)
        scores = (q.float() @ k.float().transpose(-2, -1)) * (1.0 / math.sqrt(attn.head_dim))
        if mask is not None:  # the scheme's bias (−inf above the diagonal, masked again below anyway)
            scores = scores + mask.float()
        maps.append(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1))
        x = block(x, pos, ctx, mask)
    return torch.stack(maps, dim=1)


@torch.no_grad()
def attention_output(model: Llama, idx: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(output rebuilt from ``attention_weights``, the block's own attention output) for one layer."""
    B, T = idx.shape
    pos = model.pos
    x, ctx, mask = model.inputs(idx)
    for block in model.blocks[:layer]:
        x = block(x, pos, ctx, mask)
    block = model.blocks[layer]
    attn = block.attn
    h = block.attn_norm(x)
    v = attn.qkv(h).view(B, T, 3, attn.n_heads, attn.head_dim)[:, :, 2].transpose(1, 2)
    w = attention_weights(model, idx)[:, layer]
    rebuilt = attn.out((w @ v.float()).transpose(1, 2).reshape(B, T, -1))
    return rebuilt, attn(h, pos, ctx, mask)


def model_from_config(cfg: Mapping[str, Any]) -> tuple[Llama, Any]:
    """The untrained model and in-distribution task that ``ropelab.train.run`` builds for a resolved config."""
    from ropelab.data import build_tasks

    task, ood_task = build_tasks(cfg["task"])
    model_cfg = LlamaConfig(vocab_size=len(task.vocab), max_len=max(task.seq_len, ood_task.seq_len), **cfg["model"])
    return build_model(model_cfg, dict(cfg["pos"])), task


def load_run_model(run_dir: str | Path, checkpoint: str = "checkpoints/last.ckpt") -> tuple[Llama, Any, dict]:
    """(model with the checkpoint's weights, task, config) of a run folder."""
    run_dir = Path(run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    model, task = model_from_config(cfg)
    state = torch.load(run_dir / checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})
    return model.eval(), task, cfg


def validation_example(cfg: Mapping[str, Any], task, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Example ``index`` of the run's validation set (the same draw as TaskDataModule.fixed_set), cropped
    after its last answer token."""
    from ropelab.data import draw

    data = cfg.get("data", {})
    n = min(int(data.get("eval_batch_size", 128)), int(data.get("val_size", 256)))
    inputs, targets, _ = draw(task.for_split("val"), int(cfg.get("seed", 0)), "val", n, index=0, grouped=True)
    answer = np.flatnonzero(targets[index] != -100)
    end = int(answer[-1]) + 1 if len(answer) else inputs.shape[1]
    return inputs[index, :end], targets[index, :end]


def run_attention(run_dir: str | Path, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(weights (layers, heads, T, T), input tokens (T,)) of a run's trained model on one validation example."""
    model, task, cfg = load_run_model(run_dir)
    inputs, _ = validation_example(cfg, task, index)
    weights = attention_weights(model, torch.as_tensor(inputs)[None])
    return weights[0].numpy(), inputs
