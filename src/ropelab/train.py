"""Training entry: ``ropelab.train.run(cfg, run_dir)`` and the Hydra ``main`` behind ``python train.py``.

One run: compose config → build task, datamodule, Llama + scheme, LitLM (``ropelab.build``) → Lightning fit →
test/OOD → ``summary.json``. A run folder that already holds a completed summary is skipped, an unfinished one is
resumed from ``checkpoints/last.ckpt`` (see README, "When things go wrong").
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from ropelab import locality, machine, runs, sweep_summary
from ropelab.build import Built, build
from ropelab.cli import CONF_DIR
from ropelab.errors import ConfigError

# Lightning and what needs it are imported by build() and _train(), once the config has passed: a refused
# ``python train.py`` then exits without Lightning's ≈ 3 s import (ropelab.build's docstring)

log = logging.getLogger("ropelab")

OmegaConf.register_new_resolver("ropelab_run_dir", runs.single_run_dir, use_cache=True, replace=True)


def _quiet_harmless_warnings() -> None:
    """Silence what is harmless here, each message by its own text, so that real warnings still show."""
    # conf/hydra/launcher/joblib.yaml shadows the joblib plugin's config of the same name on purpose (README,
    # "Launchers"): Hydra warns about it once per composed config
    warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/joblib' is validated against ConfigStore schema")
    # lightning's own _pytree builds a LeafSpec, which torch deprecates: nothing ropelab can change
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)


_quiet_harmless_warnings()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _parallel_jobs() -> int:
    """Jobs of this sweep that share this machine at once: joblib's n_jobs (-1 or unset: one per core), else 1."""
    if not HydraConfig.initialized():
        return 1
    n_jobs = OmegaConf.select(HydraConfig.get(), "launcher.n_jobs", default=None)
    if n_jobs in (None, -1) and "joblib" in str(HydraConfig.get().launcher.get("_target_", "")):
        return _cores()
    return max(1, int(n_jobs or 1))


def _threads(cfg: DictConfig) -> int:
    if cfg.trainer.threads:
        return int(cfg.trainer.threads)
    return max(1, _cores() // _parallel_jobs())  # parallel joblib jobs share the cores instead of oversubscribing


class Plan(NamedTuple):
    action: str                     # skip | fresh | resume
    why: str = ""                   # for skip: the reason the log and the sweep summary give
    checkpoint: Path | None = None  # for resume: checkpoints/last.ckpt
    step: int = 0                   # for resume: the checkpoint's global step


def _decide(run_dir: Path, cfg: DictConfig, sweep: bool) -> Plan:
    """What to do with a run folder, from its summary and checkpoints. ``resume=`` (single runs) must name a
    folder that holds a checkpoint, or a completed run (skipped); a checkpoint that cannot be read is an error."""
    summary = runs.read_summary(run_dir) or {}
    status = summary.get("status")
    if status == "completed" and not cfg.rerun:
        return Plan("skip", "already completed (rerun=true trains it again)")
    if status in ("failed", "diverged") and sweep and not (cfg.retry_failed or cfg.rerun):
        return Plan("skip", f"{status} before (retry_failed=true runs it again)")
    last = run_dir / "checkpoints" / "last.ckpt"
    fresh = status == "completed" or (status in ("failed", "diverged") and (cfg.retry_failed or cfg.rerun))
    if not fresh and not last.exists() and cfg.get("resume") and not sweep:
        started = summary or (run_dir / "config.yaml").is_file()
        raise ConfigError(f"resume={cfg.resume} " + (
            "holds no checkpoint (checkpoints/last.ckpt): it stopped before its first validation; leave out "
            "resume= to start afresh" if started else "is not a run folder: nothing to resume"))
    if fresh or not last.exists():
        for leftover in ("checkpoints", "metrics.csv", runs.TRACE):
            path = run_dir / leftover
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        return Plan("fresh")
    return Plan("resume", checkpoint=last, step=_checkpoint_step(last))


def _checkpoint_step(ckpt: Path) -> int:
    """The global step a checkpoint was saved at; a truncated or corrupt file is a one-line ConfigError."""
    try:
        return int(torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"])
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError… depending on the damage
        target = f" (→ {ckpt.resolve().name})" if ckpt.is_symlink() else ""
        why = (str(err).splitlines() or [type(err).__name__])[0][:120]
        raise ConfigError(f"{ckpt}{target} cannot be read, truncated or corrupt ({why}): delete the run folder's "
                          f"checkpoints/ to train it again from step 0") from None


def record_dir_of(cfg: DictConfig, run_dir: Path) -> Path | None:
    """Where a finished job's record lasts: ``<record>/<job folder name>``, or None when ``record`` is unset."""
    return Path(cfg.record) / Path(run_dir).name if cfg.get("record") else None


def run(cfg: DictConfig, run_dir: Path, sweep: bool = False) -> dict[str, Any]:
    """Train one configuration in ``run_dir``; returns the summary (also written to summary.json)."""
    run_dir = Path(run_dir)
    built = build(cfg)  # checks the config first: a refused run leaves nothing behind
    record_dir = record_dir_of(cfg, run_dir)
    if (kept := runs.recorded(record_dir)) and not cfg.rerun:
        log.info("skipping %s: recorded in %s", run_dir.name, record_dir)
        return {**kept, "record": str(record_dir), "skipped": f"recorded in {record_dir.parent}"}
    accelerator, precision, why = machine.choose(cfg.trainer.accelerator, cfg.trainer.precision)
    with runs.claim(run_dir):  # raises runs.InUse while another process trains in this folder
        return _train(cfg, built, run_dir, sweep, record_dir, accelerator, precision, why)


def _train(cfg: DictConfig, built: Built, run_dir: Path, sweep: bool, record_dir: Path | None, accelerator: str,
           precision: str, why: str) -> dict[str, Any]:
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from ropelab.callbacks import FlushLoggers, KillAtStep, PositionalTrace, Progress
    from ropelab.lit import Diverged
    from ropelab.loggers import truncate_metrics

    # Lightning's info lines (GPU available, AMP, "fit stopped", the litlogger tip) repeat what ropelab's own
    # device, progress and end-of-run lines say; its warnings go through `warnings` and still show. Set after
    # its import, which sets this logger's level itself.
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    plan = _decide(run_dir, cfg, sweep)
    if plan.action == "skip":
        log.info("skipping %s: %s", run_dir, plan.why)
        return {**runs.read_summary(run_dir), "skipped": plan.why}
    ckpt, resumed_from = plan.checkpoint, plan.step
    runs.atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    torch.set_num_threads(_threads(cfg))
    datamodule, model, lit = built.datamodule, built.model, built.lit
    compiled, compile_why = machine.choose_compile(cfg.trainer.compile, accelerator)
    if compiled:
        model.compile()  # in place: state_dict keys stay those of the plain model

    loggers = [hydra.utils.instantiate(spec, save_dir=str(run_dir)) for spec in (cfg.logger or {}).values() if spec]
    # saved after every validation (Lightning runs checkpoint callbacks last, after the flush and the trace)
    checkpoint = ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="step{step:06d}", auto_insert_metric_name=False,
                                 save_top_k=1, save_last="link")
    progress = Progress(Progress.choose(cfg.trainer.progress, parallel=_parallel_jobs() > 1),
                        label=run_dir.name if sweep else "")
    callbacks = [FlushLoggers(), PositionalTrace(run_dir), progress, checkpoint]
    if kill := KillAtStep.from_env():
        callbacks.append(kill)
    log.info("device %s, precision %s (%s), compile %s (%s)", accelerator, precision, why, compiled, compile_why)
    trainer = L.Trainer(
        accelerator=accelerator, devices=cfg.trainer.devices, max_steps=cfg.trainer.max_steps, precision=precision,
        gradient_clip_val=cfg.trainer.gradient_clip_val, val_check_interval=cfg.trainer.val_every,
        check_val_every_n_epoch=None, num_sanity_val_steps=0, log_every_n_steps=1, logger=loggers,
        callbacks=callbacks, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(run_dir), deterministic=True,
    )
    if ckpt:
        truncate_metrics(run_dir / "metrics.csv", resumed_from)  # rows at step >= this are logged again
        log.info("resuming %s from step %d", run_dir, resumed_from)

    summary: dict[str, Any] = {
        "status": "running", "task": cfg.task.name, "pos": cfg.pos.name, "seed": cfg.seed, "run_dir": str(run_dir),
        "max_steps": cfg.trainer.max_steps, "params": model.num_parameters(),
        "positional_params": sum(p.numel() for p in model.pos.parameters()), "resumed_from_step": resumed_from,
        "init_from": cfg.init_from, "surgery": cfg.surgery,
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "accelerator": accelerator, "precision": precision, "compile": compiled,
        "machine": machine.describe(accelerator),
    }
    runs.write_summary(run_dir, summary)
    start = time.time()
    try:
        trainer.fit(lit, datamodule=datamodule, ckpt_path=str(ckpt) if ckpt else None)
        final = {k: float(v) for k, v in trainer.callback_metrics.items()}  # validate and test reset them
        if trainer.global_step % cfg.trainer.val_every:  # make the final metrics those of the final weights
            trainer.validate(lit, datamodule=datamodule, verbose=False)
            final.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        trainer.test(lit, datamodule=datamodule, verbose=False)
        final.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        summary["attention"] = locality.measure(model, datamodule.task, cfg)  # the record rebuilds sharpening
        summary.update(status="completed", final=final, per_group={
            "group": datamodule.task.group_name, "metric": "exact",
            **{split: {str(g): counts for g, counts in groups.items()} for split, groups in lit.group_results.items()}})
    except Diverged as err:
        summary.update(status="diverged", diverged_step=err.step, last_finite_loss=err.last_finite_loss, error=str(err))
    except (KeyboardInterrupt, SystemExit):
        summary.update(status="interrupted", steps=trainer.global_step, wall_seconds=time.time() - start)
        runs.write_summary(run_dir, summary)
        raise
    except Exception as err:  # recorded, so a sweep can go on and the report can show it
        summary.update(status="failed", error=f"{type(err).__name__}: {err}")
        log.exception("run failed")
    summary.update(steps=trainer.global_step, wall_seconds=round(time.time() - start, 2))
    for lg in loggers:
        lg.finalize("success" if summary["status"] == "completed" else summary["status"])
        if hasattr(lg, "close"):  # W&B: one run per job, finished before the next multirun job starts
            lg.close(summary["status"])
    runs.write_summary(run_dir, summary)
    if record_dir is not None and summary["status"] == "completed":
        runs.keep_record(run_dir, record_dir)
        summary["record"] = str(record_dir)
    return summary


FINAL_METRICS = ("train/loss", "val/loss", "val/acc", "val/exact", "test/loss", "test/acc", "test/exact",
                 "ood/loss", "ood/acc", "ood/exact")


def result_lines(summary: dict, report_target: Path | None = None) -> list[str]:
    """The end of a run: its folder, status, every split's metrics in one fixed order, and what to run next."""
    final = summary.get("final") or {}
    metrics = " ".join(f"{k}={final[k]:.4f}" if k in final else f"{k}=n/a" for k in FINAL_METRICS)
    status = summary["status"] + (f" (skipped: {summary['skipped']})" if summary.get("skipped") else "")
    lines = [f"run: {summary.get('record') or summary.get('run_dir')}",
             f"status: {status} · steps {summary.get('steps', '?')} · {summary.get('wall_seconds', '?')} s",
             f"metrics: {metrics}"]
    if summary.get("error"):
        lines.append(f"error: {summary['error']}")
    if report_target is not None:
        lines.append(f"next: {runs.report_command(report_target)}")
    return lines


def _check_single_run_of_preset(cfg: DictConfig, hc: DictConfig) -> None:
    """Without -m Hydra ignores a preset's sweep, so a single run would silently train something else: refuse
    unless the command line picks every axis that has several values or that the preset's config does not set."""
    from ropelab.cli import axis_values

    params = OmegaConf.select(hc, "sweeper.params") or {}
    given = {o.split("=", 1)[0].lstrip("+~") for o in hc.overrides.task}
    unpicked = []
    for key, values in params.items():
        if key in given:
            continue
        values = axis_values(key, values)
        if len(values) > 1:
            unpicked.append(f"{key} ({', '.join(map(str, values))})")
        else:
            current = hc.runtime.choices.get(key) if key in hc.runtime.choices else OmegaConf.select(cfg, key)
            if current != values[0]:
                unpicked.append(f"{key} ({values[0]})")
    if unpicked:
        preset = hc.runtime.choices.get("experiment") or "this config"
        keys = " ".join(f"{u.split(' ')[0]}=…" for u in unpicked)
        raise ConfigError(f"experiment={preset} is a sweep over {'; '.join(unpicked)}: run it with -m, or pick one "
                          f"job with {keys}")


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """One Hydra job. Single run: exit 2 for a refused config, 1 for a failed run. In a sweep every outcome is
    noted for the sweep's closing summary (``ropelab.sweep_summary``), which sets the exit code."""
    hc = HydraConfig.get()
    sweep = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)
    job = run_dir.name if sweep else str(run_dir)

    def outcome(kind: str, detail: str = "") -> None:
        if sweep:
            sweep_summary.note(hc.job.num, job, kind, detail)

    try:
        if not sweep:
            _check_single_run_of_preset(cfg, hc)
        summary = run(cfg, run_dir, sweep=sweep)
    except ConfigError as err:  # refused before training: no folder left behind
        runs.remove_if_unstarted(run_dir)
        print(f"error: {f'[{job}] ' if sweep else ''}{err}", file=sys.stderr)
        if not sweep:
            sys.exit(2)
        return outcome("failed", str(err))
    except runs.InUse as err:
        if not sweep:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        log.info("skipping %s: %s", job, err)
        return outcome("skipped", "being trained by another launch")
    except Exception as err:  # anything else ends this job only: the sweep goes on and its summary lists it
        if not sweep:
            raise
        log.exception("job %s failed", job)
        if (run_dir / "config.yaml").is_file():
            runs.write_summary(run_dir, {**(runs.read_summary(run_dir) or {}), "status": "failed",
                                         "error": _one_line(err), "run_dir": str(run_dir)})
        return outcome("failed", _one_line(err))
    if summary.get("skipped"):
        runs.remove_if_unstarted(run_dir)  # a recorded job: Hydra's folder is all there is
    if not (sweep and summary.get("skipped")):  # a sweep's skipped jobs: one line each (logged) and the summary
        for line in result_lines(summary, None if sweep else Path(summary.get("record") or run_dir)):
            log.info(line)
    if summary.get("skipped"):
        outcome("skipped", summary["skipped"])
    else:
        outcome(summary["status"], summary.get("error", ""))
        if summary["status"] == "failed" and not sweep:
            sys.exit(1)
    return summary.get("final", {}).get("val/loss")
