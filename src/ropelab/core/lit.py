"""LightningModule: next-token loss on answer tokens, AdamW with warmup + cosine, answer metrics.

Metric keys: ``train/loss`` (every step), ``train/lr``, ``val/loss``, ``val/acc`` (answer-token accuracy),
``val/exact`` (whole answer right), the same under ``test/`` and ``ood/`` with per-group exact match kept in
``group_results`` for the run summary, ``pos/<param>_mean`` for learnable positional parameters, and ``pos/gamma``
(every step: the mean over layers of the momentum γ that step trained with) where γ changes during training.
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


NONFINITE_LOSS = "non-finite training loss"  # why a run diverged (``Diverged``), single or packed


def gradient_diverged(norm: torch.Tensor, bound: float | None) -> str | None:
    """The divergence rule on a step's gradient norm (not finite, or past ``trainer.diverge_grad_norm``): why the
    run diverged, or None."""
    return f"gradient norm {float(norm):.3g}" if not torch.isfinite(norm) or (bound and norm > bound) else None


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def choose_fused(setting: bool | str, params, grad_scaler: bool = False) -> tuple[bool, str]:
    """(fused?, why) for ``optim.fused``: true / false as configured, or ``auto``.

    auto is on wherever torch has a fused AdamW kernel for every parameter (CPU and CUDA, floating point): one
    kernel per parameter tensor instead of a dozen elementwise ops over each, the same update up to float
    rounding; on the 2-core EPYC it takes the optimiser's part of a step from ≈ 3–4 to ≈ 2 ms (docs/speed.md,
    "Many small runs per core"). Not with a GradScaler (``trainer.precision=16-mixed``, ``grad_scaler``): a fused
    AdamW unscales inside its step, so the gradients the divergence check and the clipping see would still be
    scaled (Lightning refuses that pairing too)."""
    from ropelab.core.errors import require

    require(isinstance(setting, bool) or setting == "auto", "optim.fused", setting, "true, false or auto")
    require(not (setting is True and grad_scaler), "optim.fused", setting,
            "false or auto with trainer.precision=16-mixed (its GradScaler leaves the clipped gradients scaled)")
    if isinstance(setting, bool):
        return setting, "as configured"
    if grad_scaler:
        return False, "auto: a GradScaler (16-mixed) needs the gradients unscaled before clipping"
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    supported = set(_get_fused_kernels_supported_devices())
    params = list(params)
    if all(p.device.type in supported and p.is_floating_point() for p in params):
        return True, "auto: torch has a fused AdamW kernel for these parameters"
    return False, "auto: no fused AdamW kernel for every parameter's device or dtype"


def grad_norm(optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """The total L2 norm of the gradients of ``optimizer``'s parameters, in its order: exactly the norm that
    ``torch.nn.utils.clip_grad_norm_`` (Lightning's clipping) computes from the same parameters."""
    return torch.nn.utils.get_total_norm(_grads(optimizer))


def clip_by_norm(optimizer: torch.optim.Optimizer, max_norm: float, norm: torch.Tensor) -> None:
    """``clip_grad_norm_(params, max_norm)`` given the norm already computed (``grad_norm``)."""
    torch.nn.utils.clip_grads_with_norm_(_params(optimizer), max_norm, norm)


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _grads(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p.grad for p in _params(optimizer) if p.grad is not None]


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
        self._grad_norm: torch.Tensor | None = None  # this step's, from on_before_optimizer_step to the clipping
        self.fused: bool | None = None  # optim.fused resolved, once the optimiser is built (summary.json records it)

    @staticmethod
    def loss(logits, targets):
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = self.loss(self.model(inputs), targets)
        value = loss.detach()
        if not torch.isfinite(value):
            raise Diverged(self.global_step, self.last_finite_loss, NONFINITE_LOSS)
        self.last_finite_loss = float(value)
        self.log("train/loss", value, on_step=True, on_epoch=False, prog_bar=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)
        return loss

    def on_before_optimizer_step(self, optimizer):
        norm = self._grad_norm = grad_norm(optimizer)
        if why := gradient_diverged(norm, self.diverge_grad_norm):
            raise Diverged(self.global_step, self.last_finite_loss, why)
        self.log("train/grad_norm", norm, on_step=True, on_epoch=False)
        if self.model.gamma_schedule is not None:
            self.model.gamma_schedule.after_gradient(norm)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        # Lightning calls this right after on_before_optimizer_step, with the same gradients: clipping by the norm
        # computed there gives clip_grad_norm_'s result bit for bit without a second pass over the tensors. It is
        # also what lets a fused AdamW clip under bf16-mixed: Lightning's own clipping refuses any optimiser that
        # unscales in its step, which a fused one claims to, though bf16 has no scaler (choose_fused)
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm") and self._grad_norm is not None:
            clip_by_norm(optimizer, gradient_clip_val, self._grad_norm)
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        self._grad_norm = None

    def on_train_batch_start(self, batch, batch_idx):
        if self.model.gamma_schedule is not None:  # warm-up or adaptive γ (positional/momentum.py)
            self.log("pos/gamma", self.model.gamma_schedule.start_step(self.global_step), on_step=True, on_epoch=False)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.model.pos.project_()

    def _eval_step(self, batch, split: str):
        inputs, targets, groups = batch
        self.answer_metrics[split].update(self.model(inputs), targets, groups)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self):
        self.log_dict(self.validation_metrics())

    def validation_metrics(self) -> dict[str, Any]:
        """The validation pass's metrics (its states then reset) and each positional parameter's mean; a packed
        member (``ropelab.core.packed_launcher``) logs the same dict."""
        metrics: dict[str, Any] = self.answer_metrics["val"].compute("val")
        self.answer_metrics["val"].reset()
        for name, p in self.model.pos.positional_parameters().items():
            metrics[f"pos/{name}_mean"] = float(p.detach().float().mean())
        return metrics

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        self._eval_step(batch, ("test", "ood")[dataloader_idx])

    def on_test_epoch_end(self):
        self.log_dict(self.test_metrics(), add_dataloader_idx=False)

    def test_metrics(self) -> dict[str, Any]:
        """The test and OOD passes' metrics (their states then reset), keeping exact match per group in
        ``group_results``."""
        metrics: dict[str, Any] = {}
        for split in ("test", "ood"):
            m = self.answer_metrics[split]
            self.group_results[split] = m.per_group()
            metrics.update(m.compute(split))
            m.reset()
        return metrics

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
        scaler = self._trainer is not None and getattr(self.trainer.precision_plugin, "scaler", None) is not None
        self.fused, self.fused_why = choose_fused(o.get("fused", "auto"), self.model.parameters(), scaler)
        # fused=None, not False, for the unfused optimiser: torch's own default (for-loop on CPU, foreach on CUDA)
        opt = torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o["betas"]), eps=o.get("eps", 1e-8),
                                fused=True if self.fused else None)
        warmup, min_ratio = int(o["warmup_steps"]), float(o["min_lr_ratio"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_cosine(s, warmup, self.max_steps, min_ratio))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
