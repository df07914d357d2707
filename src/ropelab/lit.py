"""LightningModule: next-token loss on answer tokens, AdamW with warmup + cosine, answer metrics.

Metric keys: ``train/loss`` (every step), ``train/lr``, ``val/loss``, ``val/acc`` (answer-token accuracy),
``val/exact`` (whole answer right), the same under ``test/`` and ``ood/`` with per-group accuracy kept in
``group_results`` for the run summary, and ``pos/<param>_mean`` for learnable positional parameters.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Mapping

import lightning as L
import torch
import torch.nn.functional as F

from ropelab.model import Llama
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


class AnswerMetrics:
    """Sums over batches: token loss, token accuracy, exact-match per example, accuracy per group."""

    def __init__(self):
        self.loss_sum = self.tokens = self.correct = self.exact = self.examples = 0.0
        self.groups: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])

    def update(self, logits: torch.Tensor, targets: torch.Tensor, groups: torch.Tensor | None) -> None:
        mask = targets != IGNORE
        self.loss_sum += F.cross_entropy(logits[mask].float(), targets[mask], reduction="sum").item()
        hit = (logits.argmax(-1) == targets) & mask
        self.tokens += mask.sum().item()
        self.correct += hit.sum().item()
        whole = (hit | ~mask).all(dim=1) & mask.any(dim=1)
        self.exact += whole.sum().item()
        self.examples += mask.any(dim=1).sum().item()
        if groups is not None:
            for g, ok in zip(groups.tolist(), whole.tolist()):
                self.groups[g][0] += ok
                self.groups[g][1] += 1

    def compute(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}/loss": self.loss_sum / max(self.tokens, 1), f"{prefix}/acc": self.correct / max(self.tokens, 1),
                f"{prefix}/exact": self.exact / max(self.examples, 1)}

    def per_group(self) -> dict[int, dict[str, float]]:
        """Per group (gap, depth, …): ``exact`` (whole answer right) over its ``examples``."""
        return {g: {"exact": ok / n, "examples": int(n)} for g, (ok, n) in sorted(self.groups.items())}


class LitLM(L.LightningModule):
    def __init__(self, model: Llama, optim: Mapping[str, Any], max_steps: int, diverge_grad_norm: float | None = None):
        super().__init__()
        self.model, self.optim, self.max_steps = model, dict(optim), max_steps
        self.diverge_grad_norm = diverge_grad_norm
        self._metrics: dict[str, AnswerMetrics] = {}
        self.group_results: dict[str, dict[int, dict[str, float]]] = {}
        self.last_finite_loss: float | None = None

    def forward(self, idx):
        return self.model(idx)

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
        self._metrics.setdefault(split, AnswerMetrics()).update(self.model(inputs), targets, groups)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self):
        metrics = self._metrics.pop("val", AnswerMetrics()).compute("val")
        for name, p in self.model.pos.positional_parameters().items():
            metrics[f"pos/{name}_mean"] = float(p.detach().float().mean())
        self.log_dict(metrics)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self._eval_step(batch, ("test", "ood")[dataloader_idx])

    def on_test_epoch_end(self):
        for split in ("test", "ood"):
            m = self._metrics.pop(split, AnswerMetrics())
            self.group_results[split] = m.per_group()
            self.log_dict(m.compute(split), add_dataloader_idx=False)

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
