"""LightningModule: next-token loss on answer tokens, AdamW with warmup + cosine, answer metrics.

Metric keys: ``train/loss`` (every step), ``train/lr``, ``val/loss``, ``val/acc`` (answer-token accuracy),
``val/exact`` (whole answer right), the same under ``test/`` and ``ood/`` with per-group exact match kept in
``group_results`` for the run summary, and ``pos/<param>_mean`` for learnable positional parameters.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy, MulticlassExactMatch
from torchmetrics.functional.classification import multiclass_exact_match
from torchmetrics.utilities import dim_zero_cat

from ropelab.core.model import Llama
from tasks.base import IGNORE


class Diverged(RuntimeError):
    """A non-finite loss or gradient; the run stops and is recorded as diverged."""

    def __init__(self, step: int, last_finite_loss: float | None, what: str):
        super().__init__(f"{what} at step {step} (last finite loss {last_finite_loss})")
        self.step, self.last_finite_loss = step, last_finite_loss


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


class AnswerLoss(Metric):
    """Mean cross-entropy over the answer tokens (targets other than ``IGNORE``) of every batch seen."""

    def __init__(self):
        super().__init__()
        self.add_state("loss_sum", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("tokens", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        answer = targets != IGNORE
        self.loss_sum += F.cross_entropy(logits[answer].float(), targets[answer], reduction="sum").double()
        self.tokens += answer.sum()

    def compute(self) -> torch.Tensor:  # summed in float64 across batches, logged as float32
        return (self.loss_sum / self.tokens.clamp(min=1)).float()


class ExactByGroup(Metric):
    """Exact match per group (gap, depth, …): each example's group and whether its whole answer was right."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.add_state("groups", [], dist_reduce_fx="cat")
        self.add_state("whole", [], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor) -> None:
        self.groups.append(groups)
        self.whole.append(multiclass_exact_match(preds, targets, self.vocab_size, multidim_average="samplewise", ignore_index=IGNORE,
                                                 validate_args=False).bool())

    def compute(self) -> dict[int, dict[str, float]]:
        """Per group: ``exact`` (whole answer right) over its ``examples``."""
        if not self.groups:
            return {}
        ids, which = dim_zero_cat(self.groups).unique(return_inverse=True)
        examples = torch.bincount(which, minlength=len(ids))
        right = torch.bincount(which[dim_zero_cat(self.whole)], minlength=len(ids))
        return {g: {"exact": ok / n, "examples": n} for g, ok, n in zip(ids.tolist(), right.tolist(), examples.tolist())}


class AnswerMetrics(nn.Module):
    """One evaluation pass: answer-token loss and accuracy, whole-answer exact match, exact match per group.

    Only positions whose target is not ``IGNORE`` (the answer) count; the states stay on the device and are
    read once, at ``compute``.
    """

    def __init__(self, vocab_size: int):
        super().__init__()
        self.loss = AnswerLoss()
        self.acc = MulticlassAccuracy(vocab_size, average="micro", ignore_index=IGNORE, validate_args=False)
        self.exact = MulticlassExactMatch(vocab_size, ignore_index=IGNORE, validate_args=False)
        self.by_group = ExactByGroup(vocab_size)

    def update(self, logits: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor | None) -> None:
        preds = logits.argmax(-1)
        self.loss.update(logits, targets)
        self.acc.update(preds, targets)
        self.exact.update(preds, targets)
        if groups is not None:
            self.by_group.update(preds, targets, groups)

    def compute(self, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}/loss": self.loss.compute(), f"{prefix}/acc": self.acc.compute(),
                f"{prefix}/exact": self.exact.compute()}

    def per_group(self) -> dict[int, dict[str, float]]:
        return self.by_group.compute()

    def reset(self) -> None:
        for metric in self.children():
            metric.reset()


class LitLM(L.LightningModule):
    def __init__(self, model: Llama, optim: Mapping[str, Any], max_steps: int, diverge_grad_norm: float | None = None):
        super().__init__()
        self.model, self.optim, self.max_steps = model, dict(optim), max_steps
        self.diverge_grad_norm = diverge_grad_norm
        # child modules, so they follow the model to its device; their states are not saved in checkpoints
        self.answer_metrics = nn.ModuleDict({split: AnswerMetrics(model.cfg.vocab_size) for split in ("val", "test", "ood")})
        self.group_results: dict[str, dict[int, dict[str, float]]] = {}
        self.last_finite_loss: float | None = None

    @staticmethod
    def loss(logits, targets):
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = self.loss(self.model(inputs), targets)
        value = loss.detach()
        if not torch.isfinite(value):
            raise Diverged(self.global_step, self.last_finite_loss, "non-finite training loss")
        self.last_finite_loss = float(value)
        self.log("train/loss", value, on_step=True, on_epoch=False, prog_bar=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)
        return loss

    def on_before_optimizer_step(self, optimizer):
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        if not torch.isfinite(norm) or (self.diverge_grad_norm and norm > self.diverge_grad_norm):
            raise Diverged(self.global_step, self.last_finite_loss, f"gradient norm {float(norm):.3g}")
        self.log("train/grad_norm", norm, on_step=True, on_epoch=False)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.model.pos.project_()

    def _eval_step(self, batch, split: str):
        inputs, targets, groups = batch
        self.answer_metrics[split].update(self.model(inputs), targets, groups)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self):
        metrics = self.answer_metrics["val"].compute("val")
        self.answer_metrics["val"].reset()
        for name, p in self.model.pos.positional_parameters().items():
            metrics[f"pos/{name}_mean"] = float(p.detach().float().mean())
        self.log_dict(metrics)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self._eval_step(batch, ("test", "ood")[dataloader_idx])

    def on_test_epoch_end(self):
        for split in ("test", "ood"):
            m = self.answer_metrics[split]
            self.group_results[split] = m.per_group()
            self.log_dict(m.compute(split), add_dataloader_idx=False)
            m.reset()

    def configure_optimizers(self):
        o = self.optim
        positional = set(id(p) for p in self.model.pos.parameters())
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            if id(p) not in positional:
                (decay if p.dim() >= 2 and "embed" not in name else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": o["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
        if positional:  # Ω can move several times its initial value at a rate that suits the weights: own scale
            groups.append({"params": list(self.model.pos.parameters()), "weight_decay": 0.0,
                           "lr": o["lr"] * o.get("pos_lr_scale", 1.0)})
        for g in groups:
            g.setdefault("lr", o["lr"])
        opt = torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o["betas"]), eps=o.get("eps", 1e-8))
        warmup, min_ratio = int(o["warmup_steps"]), float(o["min_lr_ratio"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, warmup, self.max_steps, min_ratio))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
