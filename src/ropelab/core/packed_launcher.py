"""``hydra/launcher=packed``: a multirun's jobs that differ only in ``PER_MEMBER`` keys trained together.

    python train.py -m experiment=momentum hydra/launcher=packed [hydra.launcher.pack=8]

The launcher composes every job's config as Hydra's basic launcher does, then groups the jobs whose resolved
configs are equal but for ``ropelab.core.packed.PER_MEMBER`` (``check_packable``'s rule) into packs of at most
``pack`` members, and trains each pack of two or more in this process (``fit_pack``): Lightning's Trainer fits
a ``ropelab.core.packed.PackLM``, the LightningModule over the pack's members. Every other job runs exactly as
with the basic launcher (``ropelab.core.train.main``): one alone in its group, one recorded or finished (it is
skipped as always), one refused by the config check (its error is the job's), one whose folder another launch
holds, one with a single run's checkpoint (it resumes as it started), one logging to W&B (one W&B run per process
at a time), and one at a precision a pack does not train (16-mixed's GradScaler).

A member is its single run in every file it leaves: its own folder with config.yaml (the same resolved config),
metrics.csv (the same columns and rows), summary.json (the same keys, plus ``packed``), positional_trace.npz,
train.log and .hydra/, and its record when the preset records. After training, each member goes through the
job function itself (``train.one_job`` with the pack's summary), so the result lines, the sweep summary's outcome
and skip-on-rerun are those of any job. Evaluation needs no vmap: a member's model is a plain module whose
parameters are views of its slice, evaluated by its own ``LitLM`` (``validation_metrics``, ``test_metrics``).

Checkpoints: after every validation each live member saves ``checkpoints/step<N>.ckpt`` (model, optimiser,
scheduler, step, positional trace, last finite loss; a step draws no random numbers, its batch is a function of
the seed and the step); once all are written each member moves its ``last.ckpt`` link to its own, and the
previous step's files are deleted only once every member has moved, so a kill between two members' saves leaves
a step they all hold, which the re-run resumes from. A job whose last checkpoint a pack wrote resumes in a pack,
alone if need be.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import logging
import os
import pickle
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from ropelab.core.cli import check_pack
from ropelab.core.errors import ConfigError
from ropelab.core.runs import CHECKPOINTS

log = logging.getLogger("ropelab")

PRECISIONS = ("32-true", "bf16-mixed")  # what Pack trains: 16-mixed needs a GradScaler, which it does not have
LOGGERS = ("csv",)                      # W&B keeps one run per process open at a time
FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's job log format (train.log)


@dataclass
class Member:
    """A job of the multirun that a pack trains."""

    num: int
    sweep_config: DictConfig
    cfg: DictConfig
    run_dir: Path
    record_dir: Path | None
    trial: str
    built: Any                               # ropelab.core.build.Built
    step: int = 0                            # where it starts: 0, or its checkpoint's step
    checkpoint: Path | None = None
    claim: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    loggers: list = field(default_factory=list)
    handler: logging.Handler | None = None
    trace: Any = None
    summary: dict = field(default_factory=dict)
    final: dict = field(default_factory=dict)

    def say(self, message: str) -> None:
        """A line in this member's train.log and on the console."""
        if self.handler is not None:
            self.handler.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, message, None, None))
        log.info(message)


def _task_config(sweep_config: DictConfig) -> tuple[DictConfig, Path]:
    """(the job's config without ``hydra``, its folder), with HydraConfig set to the job as ``run_job`` sets it."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import read_write

    HydraConfig.instance().set_config(sweep_config)
    output_dir = os.path.abspath(os.path.join(str(OmegaConf.select(sweep_config, "hydra.sweep.dir")),
                                              str(OmegaConf.select(sweep_config, "hydra.sweep.subdir"))))
    with read_write(sweep_config.hydra.runtime), open_dict(sweep_config.hydra.runtime):
        sweep_config.hydra.runtime.output_dir = output_dir
    HydraConfig.instance().set_config(sweep_config)
    cfg = copy.deepcopy(sweep_config)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg, Path(output_dir)


def _member(num: int, sweep_config: DictConfig) -> Member | None:
    """The job as a pack member, its folder claimed; None where it runs as any job does (the module's docstring)."""
    import torch

    from ropelab.core import bookkeeping, machine, runs
    from ropelab.core.build import build
    from ropelab.core.packed import check_packable
    from ropelab.core.schema import resolved

    cfg, run_dir = _task_config(sweep_config)
    try:
        resolved(cfg)
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))  # no ${hydra:…} left to need the job's
        record_dir, trial = bookkeeping.record_plan(cfg, sweep_config.hydra, run_dir, sweep=True)
        if runs.recorded(record_dir) and not cfg.rerun:
            return None
        if any(spec for name, spec in (cfg.logger or {}).items() if name not in LOGGERS):
            return None
        if machine.choose(cfg.trainer.accelerator, cfg.trainer.precision)[1] not in PRECISIONS:
            return None
        built = build(cfg)
        check_packable([cfg])  # a γ that changes during training (pos.momentum.warmup_steps, adaptive): alone
    except Exception:  # run as any job, it fails with its own one-line error (a ConfigError) or traceback
        return None
    member = Member(num, sweep_config, cfg, run_dir, record_dir, trial, built)
    try:
        member.claim.enter_context(runs.claim(run_dir))
        plan = bookkeeping.decide(run_dir, cfg, sweep=True)
        if plan.action == "resume":
            # weights only: a checkpoint in a downloaded run folder must not run code; a single run's checkpoint
            # that holds more than plain data is not a pack's either
            try:
                saved = torch.load(plan.checkpoint, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError:
                saved = {}
            if "packed" not in saved:  # a single run's checkpoint: Lightning resumes it, alone
                plan = plan._replace(action="alone")
            member.step, member.checkpoint = plan.step, plan.checkpoint
    except (runs.InUse, ConfigError):
        member.claim.close()
        return None
    if plan.action not in ("fresh", "resume"):
        member.claim.close()
        return None
    return member


def _key(member: Member) -> str:
    from ropelab.core.config import flatten
    from ropelab.core.packed import PER_MEMBER

    flat = flatten(OmegaConf.to_container(member.cfg, resolve=True))
    return json.dumps(sorted((k, v) for k, v in flat.items() if k not in PER_MEMBER), default=str)


def _checkpoint_file(member: Member, step: int) -> Path:
    return member.run_dir / CHECKPOINTS / f"step{step:06d}.ckpt"


def packs(members: Sequence[Member], size: int) -> list[list[Member]]:
    """The packs: members of one shape (``_key``) starting at one step, in job order, at most ``size`` each.
    Members resuming from a pack's checkpoints start at the earliest step of their group that each of them holds
    (a kill between two members' saves leaves them a step apart). A fresh member alone in its group is left out:
    it trains as any job does."""
    groups: dict[str, list[Member]] = {}
    for m in members:
        groups.setdefault(_key(m), []).append(m)
    out = []
    for group in groups.values():
        resuming = [m for m in group if m.checkpoint is not None]
        if resuming:
            common = min(m.step for m in resuming)
            for m in resuming:
                if _checkpoint_file(m, common).is_file():
                    m.step, m.checkpoint = common, _checkpoint_file(m, common)
        by_step: dict[int, list[Member]] = {}
        for m in group:
            by_step.setdefault(m.step, []).append(m)
        for start, same in by_step.items():
            chunks = [same[i:i + size] for i in range(0, len(same), size)]
            out += [c for c in chunks if len(c) > 1 or start > 0]
    return sorted(out, key=lambda p: p[0].num)


def launch(launcher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
    """``PackedLauncher.launch``: every job of this batch, packs trained where they form, the others run as the
    basic launcher runs them; one ``JobReturn`` per job, in job order."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import configure_log, run_job, setup_globals

    from ropelab.core import train

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    size = check_pack(launcher.pack)
    configs = {}
    for num, overrides in enumerate(job_overrides, start=initial_job_idx):
        sweep_config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = sweep_config.hydra.job.num = num
        configs[num] = sweep_config
    before = HydraConfig.instance().cfg
    try:
        members = [m for num, c in configs.items() if (m := _member(num, copy.deepcopy(c))) is not None]
    finally:
        HydraConfig.instance().cfg = before
    chosen = packs(members, size)
    for m in members:
        if not any(m in p for p in chosen):
            m.claim.close()  # it runs as any job does, and claims its folder again
            m.built = None
    log.info(f"Launching {len(configs)} jobs locally: {sum(map(len, chosen))} in {len(chosen)} packs "
             f"(up to {size} members), {len(configs) - sum(map(len, chosen))} alone")
    summaries: dict[int, dict] = {}
    first = {p[0].num: p for p in chosen}
    packed = {m.num for p in chosen for m in p}
    returns = {}

    def run_one(num: int, task_function) -> None:
        returns[num] = run_job(hydra_context=launcher.hydra_context, task_function=task_function,
                               config=configs[num], job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)

    for num in configs:
        if num in first:
            pack = first[num]
            log.info(f"\tpack of {len(pack)}: " + ", ".join(f"#{m.num}" for m in pack))
            summaries.update(fit_pack(pack))
            for m in pack:
                run_one(m.num, functools.partial(train.one_job, packed=summaries[m.num]))
                m.built = None  # its model and fixed training set (data.train_size) go with its pack, not the launch
        elif num not in packed:
            log.info(f"\t#{num} : {' '.join(configs[num].hydra.overrides.task)}")
            run_one(num, launcher.task_function)
    return [returns[num] for num in configs]


def _save(members: Sequence[tuple[int, Member]], pack, step: int) -> None:
    """Each member's state at ``step``; all saved, each member's ``last.ckpt`` moved to it; all moved, the older
    checkpoints removed (the module's docstring)."""
    import torch

    from ropelab.core import runs
    from ropelab.core.callbacks import link_last

    for k, m in members:
        state = {"packed": {"members": len(pack), "index": k}, "global_step": step,
                 # a member's tensors are views of the pack's: cloned, else each file would hold every member
                 "state_dict": {n: t.detach().clone() for n, t in m.built.lit.state_dict().items()},
                 "optimizer_states": [pack.members[k].optimizer.state_dict()],
                 "lr_schedulers": [pack.members[k].scheduler.state_dict()],
                 "callbacks": {"PositionalTrace": m.trace.state_dict()},
                 "last_finite_loss": pack.members[k].last_finite_loss}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        runs.atomic_write_bytes(_checkpoint_file(m, step), buffer.getvalue())
    # once every file is on disk, renames only: members' last.ckpt disagree for K renames' time, not K saves'
    for _, m in members:
        link_last(_checkpoint_file(m, step))
    for _, m in members:
        for old in m.run_dir.glob("checkpoints/step*.ckpt"):
            if old.name != f"step{step:06d}.ckpt":
                old.unlink(missing_ok=True)


def _load(k: int, m: Member, pack) -> None:
    import torch

    from ropelab.core.loggers import truncate_metrics

    saved = torch.load(m.checkpoint, map_location=pack.device, weights_only=True)
    m.built.lit.load_state_dict(saved["state_dict"])  # copies into the member's slice of the pack's tensors
    pack.members[k].optimizer.load_state_dict(saved["optimizer_states"][0])
    pack.members[k].scheduler.load_state_dict(saved["lr_schedulers"][0])
    m.trace.load_state_dict(saved["callbacks"]["PositionalTrace"])
    pack.members[k].last_finite_loss = saved.get("last_finite_loss")
    truncate_metrics(m.run_dir / "metrics.csv", m.step)  # rows at step >= this are logged again


def _member_files(members: Sequence[Member], module, started: float, lines: bool):
    """The callback that leaves each live member's files after a validation in the fit: its trace, its progress
    line and (all members' metrics flushed before, by ``FlushLoggers``) its checkpoint."""
    import lightning as L

    from ropelab.core.callbacks import Progress

    class MemberFiles(L.Callback):
        def on_validation_end(self, trainer, pl_module):
            if trainer.state.fn != "fit":
                return
            step, start, total = trainer.global_step, module.start_step, trainer.max_steps
            for k in module.live:
                m = members[k]
                m.trace.record(step, m.built.model.pos)
                if lines:
                    m.say(Progress.format(m.run_dir.name, step, total, step - start, time.time() - started, m.final))
            _save([(k, members[k]) for k in module.live], module.pack, step)

    return MemberFiles()


def fit_pack(members: Sequence[Member]) -> dict[int, dict]:
    """Train one pack with Lightning (``ropelab.core.packed.PackLM``); every member's summary (written to its
    folder, its record kept), by job number."""
    import hydra
    import lightning as L
    import torch

    from ropelab.core import machine, runs
    from ropelab.core.bookkeeping import close_run, completed, config_text, diverged, last_checkpoint_step
    from ropelab.core.bookkeeping import start_summary
    from ropelab.core.callbacks import FlushLoggers, Interrupted, KillAtStep, PositionalTrace, Progress, StopOnInterrupt
    from ropelab.core.loggers import MemberLoggers
    from ropelab.core.packed import Pack, PackLM

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # as train._train: its info lines repeat ours
    cfg = members[0].cfg
    accelerator, precision, why = machine.choose(cfg.trainer.accelerator, cfg.trainer.precision)
    torch.set_num_threads(machine.threads(cfg.trainer.threads))
    for m in members:
        m.built.lit.to(accelerator)
    pack = Pack([m.cfg for m in members], precision, accelerator, lits=[m.built.lit for m in members])
    start_step = members[0].step
    for k, m in enumerate(members):
        runs.atomic_write_text(m.run_dir / "config.yaml", config_text(m.cfg))
        m.handler = logging.FileHandler(m.run_dir / "train.log")
        m.handler.setFormatter(logging.Formatter(FORMAT))
        m.loggers = [hydra.utils.instantiate(spec, save_dir=str(m.run_dir)) for spec in (cfg.logger or {}).values() if spec]
        m.trace = PositionalTrace(m.run_dir)
        if m.checkpoint is not None:
            _load(k, m, pack)
            m.say(f"resuming {m.run_dir} from step {m.step}")
        m.summary = {**start_summary(m.cfg, m.run_dir, m.built.model, m.step, accelerator, precision, False, m.trial),
                     "packed": {"members": len(members), "index": k}}
        runs.write_summary(m.run_dir, m.summary)
        m.say(f"device {accelerator}, precision {precision} ({why}), compile False (a pack is not compiled), "
              f"packed: member {k} of {len(members)}")
        if m.step == 0:
            m.trace.record(0, m.built.model.pos)
    loggers = MemberLoggers([m.loggers for m in members], [m.final for m in members])
    live = dict(enumerate(members))
    start = time.time()

    def end(k: int, fields: dict, steps: int) -> None:
        m = live.pop(k)
        loggers.drop(k)
        m.summary.update(fields)
        close_run(m.run_dir, m.summary, m.loggers, m.record_dir, steps, time.time() - start, m.built.lit.fused)

    # each member's batches from its own datamodule, as its single run's DataLoader yields them: drawn afresh or
    # from its fixed training set (data.train_size)
    module = PackLM(pack, [m.built.datamodule.train_batches(start_step) for m in members],
                    [m.built.datamodule for m in members], start_step,
                    on_diverged=lambda k, err: end(k, diverged(err), err.step))
    stop = StopOnInterrupt(members[0].run_dir / CHECKPOINTS,
                           save=lambda step: _save([(k, members[k]) for k in module.live], pack, step))
    lines = Progress.choose(cfg.trainer.progress, parallel=True) != "off"
    callbacks = [FlushLoggers(), _member_files(members, module, start, lines), stop]
    if kill := KillAtStep.from_env():
        callbacks.append(kill)
    max_steps, val_every = cfg.trainer.max_steps, cfg.trainer.val_every
    trainer = L.Trainer(accelerator=accelerator, devices=1, max_steps=max_steps, precision="32-true",
                        val_check_interval=val_every, check_val_every_n_epoch=None, num_sanity_val_steps=0,
                        log_every_n_steps=1, logger=[loggers], callbacks=callbacks, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        default_root_dir=str(members[0].run_dir))
    try:
        with warnings.catch_warnings():
            # the stand-in optimiser is meant (PackLM.configure_optimizers); the batches are made in this process
            warnings.filterwarnings("ignore", message=r".*configure_optimizers. returned .None.")
            warnings.filterwarnings("ignore", message=r".*does not have many workers")
            with stop.armed():
                trainer.fit(module)
            if stop.saved_step is not None:  # asked to stop in the last step: its checkpoint is saved
                raise Interrupted(stop.saved_step)
            if live:
                if max_steps % val_every:  # the final metrics are those of the final weights
                    trainer.validate(module, verbose=False)
                trainer.test(module, verbose=False)
        for k, m in list(live.items()):
            end(k, completed(m.built.model, m.built.datamodule.task, m.cfg, m.built.lit, m.final), trainer.global_step)
    except (Interrupted, KeyboardInterrupt, SystemExit) as err:  # Lightning turns a KeyboardInterrupt into exit(1)
        for k in list(live):
            step = err.step if isinstance(err, Interrupted) else last_checkpoint_step(live[k].run_dir)
            end(k, {"status": "interrupted", "checkpoint_step": step, "final": dict(live[k].final)},
                trainer.global_step)
    except Exception as err:  # every member still training fails with it; the sweep goes on
        log.exception("pack failed")
        for k in list(live):
            end(k, {"status": "failed", "error": f"{type(err).__name__}: {err}"}, trainer.global_step)
    finally:
        for m in members:
            m.claim.close()
            if m.handler is not None:
                m.handler.close()
            m.built = m.trace = None  # the next pack's models (and a fixed training set each) take their place
    return {m.num: m.summary for m in members}
