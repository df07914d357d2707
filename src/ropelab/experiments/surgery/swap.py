"""The swap at the surgery experiment's checkpoint: logits and loss before and after ``spectralize`` (ours, and
HF's Llama on the same weights when the hf extra is installed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from ropelab.experiments.surgery.training import ROOT


def swap_check(pre_cfg, pretrain_dir: Path, finetune_seed: int) -> dict[str, Any]:
    """Logits and loss of the pretrained model on the fine-tuning validation set and first training batch,
    before and after ``spectralize``; and the same for transformers' Llama with these weights when the hf
    extra is installed."""
    import copy

    from ropelab.core.build import build
    from ropelab.core.lit import LitLM
    from ropelab.core.surgery import load_weights, spectralize

    cfg = pre_cfg.copy()
    cfg.seed = finetune_seed  # the fine-tuning runs' data
    built = build(cfg)
    model = built.model
    load_weights(model, pretrain_dir)
    model.eval()
    pretrained = copy.deepcopy(model)
    val_in, val_tg, _ = built.datamodule.fixed_set("val").tensors
    tr_in, tr_tg = next(iter(built.datamodule.train_dataloader()))

    def evaluate(m):
        with torch.no_grad():
            val = torch.cat([m(x) for x in val_in.split(pre_cfg.data.eval_batch_size)])
            first = m(tr_in)
        return val, float(LitLM.loss(val, val_tg)), first, float(LitLM.loss(first, tr_tg))

    v0, l0, f0, b0 = evaluate(model)
    spectralize(model)
    v1, l1, f1, b1 = evaluate(model)
    out: dict[str, Any] = {
        "val_loss_before": l0, "val_loss_after": l1, "first_batch_loss_before": b0, "first_batch_loss_after": b1,
        "max_abs_logit_diff": float(max((v1 - v0).abs().max(), (f1 - f0).abs().max())),
        "bit_identical": bool(torch.equal(v0, v1) and torch.equal(f0, f1)), "val_examples": int(len(val_in))}
    out["hf"] = hf_swap_check(pretrained, val_in[:32])
    return out


def hf_swap_check(ours, idx) -> dict[str, Any]:
    """The same swap on transformers' Llama with the pretrained weights of ``ours`` (our model, not swapped)."""
    hf_dir = ROOT / ".venv" / "hf"
    if hf_dir.is_dir() and str(hf_dir) not in sys.path:
        sys.path.append(str(hf_dir))
    try:
        import transformers
    except ImportError:
        return {"skipped": "transformers is not installed (make surgery installs the hf extra into .venv/hf)"}
    from ropelab.core.surgery import spectralize, to_hf

    transformers.logging.set_verbosity_error()
    hf = to_hf(ours)
    with torch.no_grad():
        mine, before = ours(idx), hf(input_ids=idx).logits
        spectralize(hf)
        after = hf(input_ids=idx).logits
    return {"transformers": transformers.__version__, "examples": int(len(idx)),
            "max_abs_diff_hf_vs_ours": float((before - mine).abs().max()),
            "max_abs_diff_hf_swap": float((after - before).abs().max())}
