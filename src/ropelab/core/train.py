"""Training entry: ``ropelab.core.train.run(cfg, run_dir)`` and the Hydra ``main`` behind ``python train.py``.

One run: the config resolved and checked once (``ropelab.core.schema.RunConfig``) → build task, datamodule, Llama +
scheme, LitLM (``ropelab.core.build``) → Lightning fit → test/OOD → ``summary.json``. What to do with the run folder
(skip, resume, start afresh), whether the record is kept, the summary and the job's outcome are bookkeeping, beside
this in ``ropelab.core.bookkeeping``; the command-line checks before Hydra are ``ropelab.core.cli``'s.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from ropelab.core import bookkeeping, runs, sweep_summary
from ropelab.core.bookkeeping import checkpoint_missing, close_run, completed, config_text, decide, diverged
from ropelab.core.bookkeeping import expected_identity, last_logged, record_dir_of, start_summary
from ropelab.core.build import Built, build
from ropelab.core.bookkeeping import INSPECTING, check_sweep, refuse_results_folder
from ropelab.core.cli import CONF_DIR, run_help
from ropelab.core.errors import ConfigError
from ropelab.core.machine import parallel_jobs
from ropelab.core.schema import RunConfig

# Lightning and what needs it are imported by build() and _train(), once the config has passed: a refused
# ``python train.py`` then exits without Lightning's ≈ 3 s import (ropelab.core.build's docstring)

log = logging.getLogger("ropelab")

OmegaConf.register_new_resolver("ropelab_run_dir", runs.single_run_dir, use_cache=True, replace=True)


def _quiet_harmless_warnings() -> None:
    """Silence what is harmless here, each message by its own text, so that real warnings still show."""
    # conf/hydra/launcher/joblib.yaml shadows the joblib plugin's config of the same name on purpose (README,
    # "Launchers"): Hydra warns about it once per composed config
    warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/joblib' is validated against ConfigStore schema")
    # a resume trains on in its own checkpoints/ folder: that it exists and holds checkpoints is the point
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
    # lightning's own _pytree builds a LeafSpec, which torch deprecates: nothing ropelab can change
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)


_quiet_harmless_warnings()


def run(cfg: DictConfig | RunConfig, run_dir: Path, sweep: bool = False, record_dir: Path | None | str = "config",
        trial: str = "") -> dict[str, Any]:
    """Train one configuration in ``run_dir``; returns the summary (also written to summary.json). The finished
    run's record goes to ``record_dir`` (None: nowhere; by default where ``cfg.record`` says); ``trial`` says
    why a run of a preset is not recorded (``bookkeeping.record_plan``)."""
    run_dir, settings = Path(run_dir), RunConfig.of(cfg)
    built = build(settings)  # checks the config first: a refused run leaves nothing behind
    if runs.inside_results(run_dir):
        raise ConfigError(f"{runs.portable(run_dir)} is under results/, where records are kept, never trained in: "
                          f"python -m ropelab.reproduce retrains a record into a scratch folder")
    if record_dir == "config":
        record_dir = record_dir_of(settings, run_dir)
    if runs.recorded(record_dir) and settings.rerun:  # a record is never trained over: this rerun is a trial
        record_dir, trial = None, trial or f"rerun=true of a job recorded in {record_dir}: the record left as it is"
    if (kept := runs.recorded(record_dir)) and not settings.rerun and not checkpoint_missing(settings, run_dir):
        log.info("skipping %s: recorded in %s", run_dir.name, record_dir)
        return {**kept, "record": str(record_dir), "skipped": f"recorded in {record_dir.parent}"}
    settings.machine  # decided here, before the folder is claimed: a CUDA-less gpu config is refused untouched
    with runs.claim(run_dir):  # raises runs.InUse while another process trains in this folder
        return _train(settings, built, run_dir, sweep, record_dir, trial)


def _train(cfg: RunConfig, built: Built, run_dir: Path, sweep: bool, record_dir: Path | None,
           trial: str) -> dict[str, Any]:
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from ropelab.core.callbacks import FlushLoggers, Interrupted, KillAtStep, PositionalTrace, Progress, StopOnInterrupt
    from ropelab.core.lit import Diverged
    from ropelab.core.loggers import truncate_metrics

    # Lightning's info lines (GPU available, AMP, "fit stopped", the litlogger tip) repeat what ropelab's own
    # device, progress and end-of-run lines say; its warnings go through `warnings` and still show. Set after
    # its import, which sets this logger's level itself.
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    plan = decide(run_dir, cfg, sweep)
    if plan.action == "skip":
        log.info("skipping %s: %s", run_dir, plan.why)
        return {**runs.read_summary(run_dir), "skipped": plan.why}
    ckpt, resumed_from = plan.checkpoint, plan.step
    runs.atomic_write_text(run_dir / "config.yaml", config_text(cfg))
    machine = cfg.machine
    torch.set_num_threads(machine.threads)
    datamodule, model, lit = built.datamodule, built.model, built.lit
    if machine.compile:
        model.compile()  # in place: state_dict keys stay those of the plain model

    loggers = [hydra.utils.instantiate(spec, save_dir=str(run_dir)) for spec in (cfg.logger or {}).values() if spec]
    # saved after every validation (Lightning runs checkpoint callbacks last, after the flush and the trace)
    checkpoint = ModelCheckpoint(dirpath=run_dir / runs.CHECKPOINTS, filename="step{step:06d}", auto_insert_metric_name=False,
                                 save_top_k=1, save_last="link")
    progress = Progress(Progress.choose(cfg.trainer.progress, parallel=parallel_jobs() > 1),
                        label=run_dir.name if sweep else "")
    stop_on_interrupt = StopOnInterrupt(run_dir / runs.CHECKPOINTS)
    callbacks = [FlushLoggers(), PositionalTrace(run_dir), progress, checkpoint, stop_on_interrupt]
    if kill := KillAtStep.from_env():
        callbacks.append(kill)
    log.info("device %s, precision %s (%s), compile %s (%s)", machine.accelerator, machine.precision, machine.why,
             machine.compile, machine.compile_why)
    settings = cfg.values["trainer"]  # each value as composed (the typed fields are for checking: 1 is 1.0 there)
    trainer = L.Trainer(
        accelerator=machine.accelerator, devices=machine.devices, max_steps=settings["max_steps"],
        precision=machine.precision, gradient_clip_val=settings["gradient_clip_val"], val_check_interval=settings["val_every"],
        check_val_every_n_epoch=None, num_sanity_val_steps=0, log_every_n_steps=1, logger=loggers,
        callbacks=callbacks, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(run_dir), deterministic=True,
    )
    if ckpt:
        truncate_metrics(run_dir / "metrics.csv", resumed_from)  # rows at step >= this are logged again
        log.info("resuming %s from step %d", run_dir, resumed_from)

    summary = start_summary(cfg, run_dir, model, resumed_from, machine.accelerator, machine.precision, machine.compile,
                            trial)
    summary["identity"] = expected_identity(cfg)  # close_run writes the fused kernel as the optimiser chose it
    runs.write_summary(run_dir, summary)
    start = time.time()
    final: dict[str, float] = {}  # what the fit and each evaluation left (validate and test reset callback_metrics)
    try:
        with stop_on_interrupt.armed():
            trainer.fit(lit, datamodule=datamodule, ckpt_path=str(ckpt) if ckpt else None)
        final.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        # a resume of a run stopped in its final evaluation trains no step: its last training metrics are on disk
        final = {**last_logged(run_dir / "metrics.csv", "train/"), **final}
        if trainer.global_step % settings["val_every"] or "val/loss" not in final:  # those of the final weights
            trainer.validate(lit, datamodule=datamodule, verbose=False)
            final.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        trainer.test(lit, datamodule=datamodule, verbose=False)
        final.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        summary.update(completed(model, datamodule.task, cfg, lit, final))
    except Diverged as err:
        summary.update(diverged(err))
    except (Interrupted, KeyboardInterrupt, SystemExit) as err:  # Lightning turns a KeyboardInterrupt into exit(1)
        summary.update(status="interrupted", checkpoint_step=err.step if isinstance(err, Interrupted) else
                       bookkeeping.last_checkpoint_step(run_dir),
                       final={**{k: float(v) for k, v in trainer.callback_metrics.items()}, **final})
    except Exception as err:  # recorded, so a sweep can go on and the report can show it
        summary.update(status="failed", error=f"{type(err).__name__}: {err}")
        log.exception("run failed")
    return close_run(run_dir, summary, loggers, record_dir, trainer.global_step, time.time() - start, lit.fused)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """One Hydra job (``bookkeeping.job``: its outcome and exit code)."""
    return one_job(cfg)


def one_job(cfg: DictConfig, packed: dict[str, Any] | None = None) -> float | None:
    """``main``'s job; ``packed``: its summary when trained as a member of a pack (``ropelab.core.packed_launcher``)."""
    return bookkeeping.job(cfg, run, packed)


def entry() -> None:
    """``python train.py``: Hydra's main, and Ctrl-C outside a run's training (or ending a sweep) as one summary
    and the exit code 130 instead of a traceback. A sweep's jobs are all checked first (``check_sweep``)."""
    argv = sys.argv[1:]
    refuse_results_folder(argv)  # before Hydra, which would write .hydra/ and train.log into the folder it names
    try:
        if ("-m" in argv or "--multirun" in argv) and not any(a in INSPECTING for a in argv):
            check_sweep(argv)
        if "--help" in argv or "-h" in argv:
            shown = sys.stdout
            with contextlib.redirect_stdout(io.StringIO()) as text:
                try:
                    main()
                finally:  # Hydra exits 0 after its help
                    shown.write(run_help(text.getvalue()))
        main()
    except KeyboardInterrupt:
        lines = sweep_summary.interrupted_lines(bookkeeping.resume_command())
        print("\n".join(lines or ["interrupted before training started: nothing to resume"]), flush=True)
        sys.exit(sweep_summary.INTERRUPTED_EXIT)

