"""LightningModule: next-token loss on answer tokens, AdamW with warmup + cosine, answer metrics.

Metric keys: ``train/loss`` (every step), ``train/lr``, ``val/loss``, ``val/acc`` (answer-token accuracy),
``val/exact`` (whole answer right), the same under ``test/`` and ``ood/`` with per-group exact match kept in
``group_results`` for the run summary, ``pos/<param>_mean`` for learnable positional parameters, and ``pos/gamma``
(every step: the mean over layers of the momentum γ that step trained with) where γ changes during training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

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


def answer_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the answer tokens (targets other than ``IGNORE``), in float32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)


# The one training step, in phases. ``train_step`` runs them for K members (a pack, the bench, the smoke check;
# K = 1 is a plain run); ``LitLM``'s hooks are the same phases where Lightning's loop calls them, in the same order.

def start_step(model: nn.Module, step: int) -> float | None:
    """Before step ``step``: a γ that changes during training set for it (positional/momentum.py); its mean over
    layers, or None where γ is fixed."""
    schedule = getattr(model, "gamma_schedule", None)
    return None if schedule is None else schedule.start_step(step)


def check_loss(member, value: float) -> str | None:
    """Why ``member`` (a ``LitLM`` or ``Member``) diverged at this loss, or None; a finite loss is its
    ``last_finite_loss``."""
    if not math.isfinite(value):
        return NONFINITE_LOSS
    member.last_finite_loss = value
    return None


def check_gradients(model: nn.Module, optimizer: torch.optim.Optimizer,
                    bound: float | None) -> tuple[torch.Tensor, str | None]:
    """(the gradient norm, why the member diverged or None) after the backward; a γ that adapts to the gradient
    takes its next value from this norm, before clipping."""
    norm = grad_norm(optimizer)
    if why := gradient_diverged(norm, bound):
        return norm, why
    schedule = getattr(model, "gamma_schedule", None)
    if schedule is not None:
        schedule.after_gradient(norm)
    return norm, None


def clip(optimizer: torch.optim.Optimizer, max_norm: float | None, norm: torch.Tensor) -> None:
    """``trainer.gradient_clip_val``: the gradients clipped to ``max_norm`` by their norm (none where unset or 0)."""
    if max_norm:
        clip_by_norm(optimizer, max_norm, norm)


def end_step(model: nn.Module) -> None:
    """After the update: the scheme's projection (PoPE's δ clamp); nothing for a model without a scheme."""
    pos = getattr(model, "pos", None)
    if pos is not None:
        pos.project_()


@dataclass
class Member:
    """One member of a ``train_step``: its model, optimiser, schedule and bounds; after each step, the learning
    rate it trained with and its gradient norm (None where it did not step), and once it diverged, the step and
    why (``Diverged``'s wording)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any = None
    clip: float | None = None
    diverge_grad_norm: float | None = None
    last_finite_loss: float | None = None
    diverged: int | None = None
    why: str | None = None
    lr: float | None = None
    grad_norm: float | None = None

    @classmethod
    def of(cls, lit: "LitLM", clip: float | None) -> "Member":
        """``lit``'s model with the optimiser and schedule ``lit.configure_optimizers`` builds, as a run's."""
        made = lit.configure_optimizers()
        return cls(lit.model, made["optimizer"], made["lr_scheduler"]["scheduler"], clip, lit.diverge_grad_norm)


def train_step(members: Sequence[Member], losses: Callable[[], torch.Tensor], step: int,
               after_backward: Callable[[], None] | None = None) -> list[float | None]:
    """One training step of K members: ``losses()`` is their (K,) answer-only losses from one forward (a plain
    model's for K = 1, a pack's vmap over its members); one backward (members share no parameter, so each gets its
    own gradient; ``after_backward`` then runs, a pack hands each member its slice); then per live member: the loss
    and gradient checks, clipping by the norm the check computed, the optimiser, the schedule and the scheme's
    projection. A member that diverges stops there: its weights stop changing and the others go on. Returns each
    member's loss, None for one diverged before this step."""
    for m in members:
        if m.diverged is None:
            start_step(m.model, step)
    values = losses()
    values.sum().backward()
    if after_backward is not None:
        after_backward()
    out: list[float | None] = []
    for k, (m, value) in enumerate(zip(members, values.detach().tolist())):
        m.lr = m.grad_norm = None
        if m.diverged is not None:
            out.append(None)
            continue
        out.append(value)
        why = check_loss(m, value)
        if why is None:
            norm, why = check_gradients(m.model, m.optimizer, m.diverge_grad_norm)
        if why is not None:
            m.diverged, m.why = step, why
            continue
        m.lr, m.grad_norm = m.optimizer.param_groups[0]["lr"], float(norm)
        clip(m.optimizer, m.clip, norm)
        m.optimizer.step()
        if m.scheduler is not None:
            m.scheduler.step()
        m.optimizer.zero_grad(set_to_none=True)
        end_step(m.model)
    return out


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
    """One run's model in Lightning's loop. Its training hooks are the phases of the one training step
    (``train_step``), called by Lightning in the order ``train_step`` calls them: Lightning's automatic optimisation
    does the backward, the optimiser and the schedule, and keeps the checkpoint format every run and resume uses."""

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
        return answer_loss(logits, targets)

    def on_train_batch_start(self, batch, batch_idx):
        if (gamma := start_step(self.model, self.global_step)) is not None:
            self.log("pos/gamma", gamma, on_step=True, on_epoch=False)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = answer_loss(self.model(inputs), targets)
        value = loss.detach()
        if why := check_loss(self, float(value)):
            raise Diverged(self.global_step, self.last_finite_loss, why)
        self.log("train/loss", value, on_step=True, on_epoch=False, prog_bar=True)
        self.log("train/lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)
        return loss

    def on_before_optimizer_step(self, optimizer):
        norm, why = check_gradients(self.model, optimizer, self.diverge_grad_norm)
        if why:
            raise Diverged(self.global_step, self.last_finite_loss, why)
        self._grad_norm = norm
        self.log("train/grad_norm", norm, on_step=True, on_epoch=False)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        # Lightning calls this right after on_before_optimizer_step, with the same gradients: clipping by the norm
        # computed there gives clip_grad_norm_'s result bit for bit without a second pass over the tensors. It is
        # also what lets a fused AdamW clip under bf16-mixed: Lightning's own clipping refuses any optimiser that
        # unscales in its step, which a fused one claims to, though bf16 has no scaler (choose_fused)
        if gradient_clip_algorithm in (None, "norm") and self._grad_norm is not None:
            clip(optimizer, gradient_clip_val, self._grad_norm)
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        self._grad_norm = None

    def on_train_batch_end(self, outputs, batch, batch_idx):
        end_step(self.model)

    def _eval_step(self, batch, split: str):
        inputs, targets, groups = batch
        self.answer_metrics[split].update(self.model(inputs), targets, groups)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self):
        self.log_dict(self.validation_metrics())

    def validation_metrics(self) -> dict[str, Any]:
        """The validation pass's metrics (its states then reset) and each positional parameter's mean; a pack
        (``ropelab.core.packed.PackLM``) logs each member's."""
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
