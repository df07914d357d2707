"""Training entry: ``ropelab.train.run(cfg, run_dir)`` and the Hydra ``main`` behind ``python train.py``.

One run: compose config → build task, datamodule, Llama + scheme, LitLM → Lightning fit → test/OOD →
``summary.json``. A run folder that already holds a completed summary is skipped, an unfinished one is
resumed from ``checkpoints/last.ckpt`` (see README, "When things go wrong").
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from ropelab import machine, runs
from ropelab.callbacks import FlushLoggers, PositionalTrace
from ropelab.config import check_config
from ropelab.data import TaskDataModule
from ropelab.lit import Diverged, LitLM
from ropelab.loggers import truncate_metrics
from ropelab.model import LlamaConfig, build_model
from tasks.base import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
log = logging.getLogger("ropelab")

OmegaConf.register_new_resolver("ropelab_run_dir", runs.single_run_dir, use_cache=True, replace=True)


def _threads(cfg: DictConfig) -> int:
    if cfg.trainer.threads:
        return int(cfg.trainer.threads)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parallel = 1
    if HydraConfig.initialized():  # parallel joblib jobs share the cores instead of oversubscribing them
        n_jobs = OmegaConf.select(HydraConfig.get(), "launcher.n_jobs", default=None)
        parallel = cores if n_jobs in (None, -1) and "joblib" in str(HydraConfig.get().launcher.get("_target_", "")) \
            else int(n_jobs or 1)
    return max(1, cores // max(1, parallel))


def _decide(run_dir: Path, cfg: DictConfig, sweep: bool) -> tuple[str, Path | None]:
    """('skip' | 'fresh' | 'resume', checkpoint) for a run folder, from its summary and checkpoints."""
    summary = runs.read_summary(run_dir) or {}
    status = summary.get("status")
    if status == "completed" and not cfg.rerun:
        return "skip", None
    if status in ("failed", "diverged") and sweep and not (cfg.retry_failed or cfg.rerun):
        return "skip", None
    last = run_dir / "checkpoints" / "last.ckpt"
    fresh = status == "completed" or (status in ("failed", "diverged") and (cfg.retry_failed or cfg.rerun))
    if fresh or not last.exists():
        for leftover in ("checkpoints", "metrics.csv", PositionalTrace.FILE):
            path = run_dir / leftover
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        return "fresh", None
    return "resume", last


def record_dir_of(cfg: DictConfig, run_dir: Path) -> Path | None:
    """Where a finished job's record lasts: ``<record>/<job folder name>``, or None when ``record`` is unset."""
    return Path(cfg.record) / Path(run_dir).name if cfg.get("record") else None


def _init_and_surgery(model, cfg: DictConfig) -> None:
    """``init_from``: load a finished run's weights (step 0, fresh optimizer); ``surgery=spectral``: swap the
    fixed rope for learnable spectral RoPE with the outputs unchanged (``ropelab.surgery``). On a resume the
    checkpoint's weights are loaded over these afterwards."""
    from ropelab import surgery

    if cfg.init_from:
        log.info("weights from %s", surgery.load_weights(model, cfg.init_from))
    if cfg.surgery == "spectral":
        surgery.spectralize(model, freeze=cfg.surgery_train == "spectral", phase_std=cfg.surgery_phase_std,
                            spectral_fraction=cfg.surgery_spectral_fraction)


def run(cfg: DictConfig, run_dir: Path, sweep: bool = False) -> dict[str, Any]:
    """Train one configuration in ``run_dir``; returns the summary (also written to summary.json)."""
    run_dir = Path(run_dir)
    check_config(cfg)
    record_dir = record_dir_of(cfg, run_dir)
    if (kept := runs.recorded(record_dir)) and not cfg.rerun:
        log.info("skipping %s: recorded in %s", run_dir.name, record_dir)
        return {**kept, "record": str(record_dir)}
    accelerator, precision, why = machine.choose(cfg.trainer.accelerator, cfg.trainer.precision)
    action, ckpt = _decide(run_dir, cfg, sweep)
    if action == "skip":
        summary = runs.read_summary(run_dir)
        log.info("skipping %s: already %s", run_dir, summary["status"])
        return summary
    run_dir.mkdir(parents=True, exist_ok=True)
    runs.atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    torch.set_num_threads(_threads(cfg))
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = TaskDataModule(OmegaConf.to_container(cfg.task, resolve=True), cfg.seed, **cfg.data)
    model_cfg = LlamaConfig(vocab_size=len(datamodule.task.vocab), max_len=datamodule.max_len, **cfg.model)
    model = build_model(model_cfg, OmegaConf.to_container(cfg.pos, resolve=True))
    _init_and_surgery(model, cfg)
    lit = LitLM(model, cfg.optim, cfg.trainer.max_steps, diverge_grad_norm=cfg.trainer.diverge_grad_norm)
    if cfg.trainer.compile:
        model.compile()  # in place: state_dict keys stay those of the plain model

    loggers = [hydra.utils.instantiate(spec, save_dir=str(run_dir)) for spec in (cfg.logger or {}).values() if spec]
    # saved after every validation (Lightning runs checkpoint callbacks last, after the flush and the trace)
    checkpoint = ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="step{step:06d}", auto_insert_metric_name=False,
                                 save_top_k=1, save_last="link")
    log.info("device %s, precision %s (%s)", accelerator, precision, why)
    trainer = L.Trainer(
        accelerator=accelerator, devices=cfg.trainer.devices, max_steps=cfg.trainer.max_steps, precision=precision,
        gradient_clip_val=cfg.trainer.gradient_clip_val, val_check_interval=cfg.trainer.val_every,
        check_val_every_n_epoch=None, num_sanity_val_steps=0, log_every_n_steps=1, logger=loggers,
        callbacks=[FlushLoggers(), PositionalTrace(run_dir), checkpoint], enable_progress_bar=cfg.trainer.progress,
        enable_model_summary=False, default_root_dir=str(run_dir), deterministic=True,
    )
    resumed_from = torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"] if ckpt else 0
    if ckpt:
        truncate_metrics(run_dir / "metrics.csv", resumed_from)  # rows at step >= this are logged again
        log.info("resuming %s from step %d", run_dir, resumed_from)

    summary: dict[str, Any] = {
        "status": "running", "task": cfg.task.name, "pos": cfg.pos.name, "seed": cfg.seed, "run_dir": str(run_dir),
        "max_steps": cfg.trainer.max_steps, "params": model.num_parameters(),
        "positional_params": sum(p.numel() for p in model.pos.parameters()), "resumed_from_step": resumed_from,
        "init_from": cfg.init_from, "surgery": cfg.surgery,
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "accelerator": accelerator, "precision": precision, "machine": machine.describe(accelerator),
    }
    runs.write_summary(run_dir, summary)
    start = time.time()
    try:
        trainer.fit(lit, datamodule=datamodule, ckpt_path=str(ckpt) if ckpt else None)
        if trainer.global_step % cfg.trainer.val_every:  # make the final metrics those of the final weights
            trainer.validate(lit, datamodule=datamodule, verbose=False)
        final = {k: float(v) for k, v in trainer.callback_metrics.items()}
        trainer.test(lit, datamodule=datamodule, verbose=False)
        final.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        summary.update(status="completed", final=final, group_name=datamodule.task.group_name,
                       per_group={split: {str(g): acc for g, acc in accs.items()}
                                  for split, accs in lit.group_results.items()})
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


def _print_result(summary: dict) -> None:
    final = summary.get("final", {})
    shown = " ".join(f"{k}={final[k]:.4f}" for k in ("train/loss", "val/loss", "val/acc", "val/exact", "ood/acc")
                     if k in final)
    print(f"run: {summary['run_dir']}\nstatus: {summary['status']} steps={summary.get('steps')} "
          f"wall={summary.get('wall_seconds')}s {shown}".rstrip())


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    hc = HydraConfig.get()
    sweep = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)
    try:
        summary = run(cfg, run_dir, sweep=sweep)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        if not sweep:
            sys.exit(2)
        summary = {"status": "failed", "error": f"ConfigError: {err}", "run_dir": str(run_dir)}
        runs.write_summary(run_dir, summary)  # the sweep goes on; the report shows this job as failed
    _print_result(summary)
    return summary.get("final", {}).get("val/loss")
