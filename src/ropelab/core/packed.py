"""Packed members: K runs of one shape trained in one set of calls (issue 23; ``hydra/launcher=packed`` trains a
multirun's packs with it: ``ropelab.core.packed_launcher``). ``Pack`` holds the members and takes their step;
``PackLM`` is the pack as a LightningModule, so that a pack trains in Lightning's loop as a single run does.

A tiny model's step pays per operation, not per example, so K runs that differ only in options that keep every
tensor's shape (``PER_MEMBER``: seed, learning rates, clipping, the divergence bound, γ) can share the operations:
each parameter is stacked into one (K, …) tensor and the model runs once under ``torch.func.vmap`` over the
members (``functional_call`` with the stacked parameters). Every member keeps what makes it its own run:

* its momentum γ (``pos.momentum.gamma``, per layer: a list or ``per_layer``): the attention blocks take a tensor of
  the members' γ under vmap, one per member and layer; a γ that changes during training (``warmup_steps``,
  ``adaptive``) is refused (``check_packable``): the packed launcher trains such a job alone, as any job;
* its model is built as a single run builds it (``ropelab.core.build.model_for``, seeded by its ``seed``), and
  its batches are the single run's (``ropelab.core.data.draw`` with its seed and the step);
* its parameters are views of its slice of the stacked tensors, and the pack's step is the one training step of
  every run (``ropelab.core.lit.train_step`` over K members): its own optimiser and schedule
  (``LitLM.configure_optimizers``: param groups, ``optim.pos_lr_scale``, ``optim.fused``), its clipping by its
  own gradient norm (the norm the divergence check uses) and its scheme's projection (PoPE's δ clamp) act on it
  exactly as in a single run;
* a member whose loss or gradient norm is not finite, or whose norm passes ``trainer.diverge_grad_norm``, is
  diverged from that step on: its weights stop changing and the others go on.

What made the model fail under vmap ("Cannot access storage of BatchedTensorImpl"): ``model._frees_projection``
compared tensor storages, which functorch's batched tensors do not have, and the MLP's custom autograd Function
(``SwiGLU``) has no ``setup_context`` (functorch needs it); under vmap the model now skips the first and uses
autograd's own silu · up for the second (the same values). The CPU flash-attention kernel has no batching rule:
vmap runs it once per member (a warning, silenced here), so attention is not shared.
"""

from __future__ import annotations

import warnings
from typing import Callable, Iterable, Sequence

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, IterableDataset

from ropelab.core.config import flatten
from ropelab.core.errors import ConfigError
from ropelab.core.lit import Diverged, LitLM, Member, answer_loss, train_step
from ropelab.core.positional.momentum import KEY as MOMENTUM, options_of

# keys a pack's members may differ in: none changes a tensor's shape or the operations of a step
PER_MEMBER = ("seed", "optim.lr", "optim.pos_lr_scale", "trainer.gradient_clip_val", "trainer.diverge_grad_norm",
              "pos.momentum.gamma", "pos.momentum.per_layer", "pos.momentum.gamma_shallow", "pos.momentum.gamma_deep")


def member_gammas(cfg: DictConfig) -> tuple[float, ...]:
    """A member's γ per layer (``pos.momentum``, checked); a one-line ConfigError where γ changes during training,
    which a pack does not do (the template's attention blocks take each member's γ as a fixed tensor under vmap)."""
    options = options_of(OmegaConf.to_container(cfg.pos, resolve=True), cfg.model.n_layers)
    for key in ("warmup_steps", "adaptive.enabled"):
        value = OmegaConf.select(cfg, f"pos.{MOMENTUM}.{key}")
        if options.dynamic and value:
            raise ConfigError(f"pos.{MOMENTUM}.{key}={value!r} cannot be packed: a pack keeps every member's γ fixed "
                              "(hydra/launcher=packed trains such a job alone; other launchers train it as any job)")
    return options.gammas


def check_packable(cfgs: Sequence[DictConfig]) -> None:
    """One-line ConfigError unless the configs differ only in ``PER_MEMBER`` keys and each keeps its γ fixed."""
    for cfg in cfgs:
        member_gammas(cfg)
    first = flatten(OmegaConf.to_container(cfgs[0], resolve=True))
    for cfg in cfgs[1:]:
        other = flatten(OmegaConf.to_container(cfg, resolve=True))
        # a different task or scheme first: it explains every option that differs with it
        for key in sorted(set(first) | set(other), key=lambda k: (k not in ("task.name", "pos.name"), k)):
            if key not in PER_MEMBER and first.get(key) != other.get(key):
                raise ConfigError(f"{key}={other.get(key)!r} differs from the pack's first member ({first.get(key)!r}): "
                                  f"members may differ only in {', '.join(PER_MEMBER)}")


class Pack:
    """K members (one config each) trained together; ``step()`` is one training step of every live member."""

    def __init__(self, cfgs: Sequence[DictConfig], precision: str = "32-true", device: str = "cpu",
                 lits: Sequence[LitLM] | None = None):
        """``lits``: the members' Lightning modules as ``ropelab.core.build.build`` made them (the launcher has
        built each job to check it); without them each member's model is built here as ``build`` builds it."""
        import tasks
        from ropelab.core.build import model_for
        from ropelab.core.data import draw

        self.cfgs = list(cfgs)
        check_packable(self.cfgs)
        self.device, self.autocast, self._draw = device, str(precision).startswith("bf16"), draw
        task, ood = tasks.build_with_ood(OmegaConf.to_container(self.cfgs[0].task, resolve=True))
        self.task = task.for_split("train")
        if lits is None:
            lits = [LitLM(model_for(cfg, len(task.vocab), max(task.seq_len, ood.seq_len)), cfg.optim,
                          cfg.trainer.max_steps, cfg.trainer.diverge_grad_norm) for cfg in self.cfgs]
        self.lits = list(lits)
        self.models = [lit.model.to(device) for lit in self.lits]
        self.template = self.models[0]
        self.params: dict[str, torch.Tensor] = {}
        self._members: dict[str, list[torch.nn.Parameter]] = {}
        for name, _ in self.template.named_parameters():
            members = [m.get_parameter(name) for m in self.models]
            stacked = torch.stack([p.detach() for p in members]).requires_grad_(members[0].requires_grad)
            for k, p in enumerate(members):
                p.data = stacked.data[k]  # a view: the member's optimiser and project_ update its slice in place
            self.params[name], self._members[name] = stacked, members
        self.buffers = dict(self.template.named_buffers())  # the same for every member (tables of the shape)
        gammas = [member_gammas(cfg) for cfg in self.cfgs]
        # (K, layers): one γ per member and layer when members differ, given to each attention block as a tensor
        # under vmap (a member at γ = 0 then computes q + 0·(q − q_prev) = q: its single run's values, which skip
        # momentum); the same for all: the template's own floats (member 0's)
        self.gammas = torch.tensor(gammas, device=device) if len(set(gammas)) > 1 else None
        self._attention = [block.attn for block in self.template.blocks]
        self.members = [Member.of(lit, cfg.trainer.gradient_clip_val) for lit, cfg in zip(self.lits, self.cfgs)]
        self.steps = 0

    @property
    def diverged(self) -> list[int | None]:
        """Each member's step of divergence, or None while it trains (``lit.Member`` holds what a single run logs
        and raises with: this step's learning rate and gradient norm, its last finite loss, why it diverged)."""
        return [m.diverged for m in self.members]

    def __len__(self) -> int:
        return len(self.cfgs)

    def _forward(self, params, buffers, inputs, gamma=None):
        if gamma is None:
            return torch.func.functional_call(self.template, (params, buffers), (inputs,))
        floats = [a.momentum_gamma for a in self._attention]
        try:
            for layer, a in enumerate(self._attention):
                a.momentum_gamma = gamma[layer]
            return torch.func.functional_call(self.template, (params, buffers), (inputs,))
        finally:
            for a, value in zip(self._attention, floats):
                a.momentum_gamma = value

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every member's training batch of ``step``, as its single run draws it: (K, B, T) inputs and targets."""
        drawn = [self._draw(self.task, cfg.seed, "train", cfg.data.batch_size, index=step) for cfg in self.cfgs]
        return tuple(torch.from_numpy(np.stack(part)).to(self.device) for part in zip(*drawn))

    def losses(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(K,) training losses, each ``LitLM.loss`` of its member's logits."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*batching rule for aten::_scaled_dot_product")
            with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):
                logits = torch.func.vmap(self._forward, in_dims=(0, None, 0, None if self.gammas is None else 0))(
                    self.params, self.buffers, inputs, self.gammas)
            return torch.func.vmap(answer_loss)(logits, targets)

    def _share_gradients(self) -> None:
        """Each member's parameters' gradients: its slice of the stacked tensors' (replaced at every step)."""
        for name, stacked in self.params.items():
            for k, p in enumerate(self._members[name]):
                p.grad = None if stacked.grad is None else stacked.grad[k]
            stacked.grad = None

    def step(self, batch: tuple[torch.Tensor, torch.Tensor] | None = None) -> list[float | None]:
        """One training step of every member on its own batch (``batch``: given instead, as the bench does):
        ``lit.train_step`` over the members; its loss, or None for a member diverged before this step."""
        inputs, targets = batch if batch is not None else self.batch(self.steps)
        out = train_step(self.members, lambda: self.losses(inputs, targets), self.steps, self._share_gradients)
        self.steps += 1
        return out


class _Together(IterableDataset):
    """The members' training batches, one step at a time: (K, B, T) inputs and targets."""

    def __init__(self, streams: Sequence[Iterable]):
        self.streams = streams

    def __iter__(self):
        for batches in zip(*self.streams):
            inputs, targets = zip(*batches)
            yield torch.stack(inputs), torch.stack(targets)


class PackLM(L.LightningModule):
    """A pack in Lightning's loop: one training step of every live member per batch (``Pack.step``: the one
    training step, ``lit.train_step``, over the members), each member's validation and test by its own ``LitLM``.

    Metrics are logged under ``<k>/`` (``ropelab.core.loggers.MemberLoggers`` hands each member its own).
    Optimisation is manual: each member's optimiser, schedule and clipping are its own (``train_step``), and the
    Trainer counts a pack's step as one optimiser step. The Trainer runs at 32-true: the pack autocasts its
    forward and evaluation itself (bf16-mixed), its backward outside autocast. A pack resumed at ``start_step``
    (members' checkpoints loaded by the caller) continues Lightning's step counters from there.
    ``on_diverged(k, Diverged)``: member ``k`` diverged; it is no longer trained, logged or evaluated."""

    def __init__(self, pack: Pack, train_batches: Sequence[Iterable], datamodules: Sequence, start_step: int = 0,
                 on_diverged: Callable[[int, Diverged], None] | None = None):
        super().__init__()
        self.automatic_optimization = False
        self.pack, self.batches, self.datamodules = pack, _Together(train_batches), list(datamodules)
        self.lits = torch.nn.ModuleList(pack.lits)  # eval / train mode follow the pack's
        self.start_step, self.on_diverged = start_step, on_diverged
        self.live = list(range(len(pack)))
        pack.steps = start_step

    def _autocast(self):
        return torch.autocast(self.pack.device, dtype=torch.bfloat16, enabled=self.pack.autocast)

    def configure_optimizers(self):
        return None  # Lightning's stand-in optimiser: its step runs the pack's (training_step)

    def train_dataloader(self):
        return DataLoader(self.batches, batch_size=None)

    def val_dataloader(self):
        return [dm.val_dataloader() for dm in self.datamodules]

    def test_dataloader(self):
        return [loader for dm in self.datamodules for loader in dm.test_dataloader()]

    def on_train_start(self):
        loop = self.trainer.fit_loop.epoch_loop
        for progress in (loop.batch_progress.total, loop.manual_optimization.optim_step_progress.total):
            for counter in ("ready", "started", "processed", "completed"):
                if hasattr(progress, counter):
                    setattr(progress, counter, self.start_step)
        loop._batches_that_stepped = self.start_step

    def training_step(self, batch, batch_idx):
        step, losses = self.pack.steps, []
        inputs, targets = batch
        self.optimizers().step(lambda: losses.extend(self.pack.step((inputs, targets))))
        logged = {}
        for k in list(self.live):
            member = self.pack.members[k]
            if member.diverged is not None:
                self.live.remove(k)
                if self.on_diverged is not None:
                    self.on_diverged(k, Diverged(step, member.last_finite_loss, member.why))
                continue
            logged.update({f"{k}/train/loss": losses[k], f"{k}/train/lr": member.lr,
                           f"{k}/train/grad_norm": member.grad_norm})
        if logged:
            self.log_dict(logged, on_step=True, on_epoch=False)
        if not self.live:
            self.trainer.should_stop = True

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        if dataloader_idx in self.live:
            with self._autocast():
                self.lits[dataloader_idx].validation_step(batch, batch_idx)

    def on_validation_epoch_end(self):
        for k in self.live:
            with self._autocast():
                metrics = self.lits[k].validation_metrics()
            self.log_dict({f"{k}/{key}": value for key, value in metrics.items()}, add_dataloader_idx=False)

    def test_step(self, batch, batch_idx, dataloader_idx=0):
        k, split = divmod(dataloader_idx, 2)
        if k in self.live:
            with self._autocast():
                self.lits[k].test_step(batch, batch_idx, split)

    def on_test_epoch_end(self):
        for k in self.live:
            with self._autocast():
                metrics = self.lits[k].test_metrics()
            self.log_dict({f"{k}/{key}": value for key, value in metrics.items()}, add_dataloader_idx=False)
