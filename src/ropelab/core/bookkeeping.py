"""Run bookkeeping, beside training (``ropelab.core.train``): what to do with a job's folder (skip, start afresh,
resume), whether its record is kept or it is a trial, its summary.json from start to close, and its outcome: the
console lines, the sweep summary's note and the exit code; before Hydra starts, a sweep's every job checked and a
results/ folder refused.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch
from omegaconf import DictConfig, OmegaConf

from ropelab.core import identity, locality, machine, runs, sweep_summary
from ropelab.core.cli import as_typed
from ropelab.core.config import flatten, record_config
from ropelab.core.errors import ConfigError
from ropelab.core.schema import RunConfig, resolved

log = logging.getLogger("ropelab")


class Plan(NamedTuple):
    action: str                     # skip | fresh | resume
    why: str = ""                   # for skip: the reason the log and the sweep summary give
    checkpoint: Path | None = None  # for resume: checkpoints/last.ckpt
    step: int = 0                   # for resume: the checkpoint's global step


def decide(run_dir: Path, cfg: RunConfig | DictConfig, sweep: bool) -> Plan:
    """What to do with a run folder, from its summary and checkpoints. ``resume=`` (single runs) must name a
    folder that holds a checkpoint, or a completed run (skipped); a checkpoint that cannot be read is an error.
    A skip or a resume continues what the folder holds: with settings other than its config.yaml's it is refused
    (one line naming the keys), the folder untouched."""
    summary = runs.read_summary(run_dir) or {}
    plan = _plan(run_dir, cfg, sweep, summary)
    if plan.action == "resume" or plan.why.startswith("already completed"):
        _refuse_other_settings(cfg, run_dir, summary, sweep)
    if plan.action == "fresh":
        for leftover in (runs.CHECKPOINTS, "metrics.csv", runs.TRACE):
            path = run_dir / leftover
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    return plan


def _plan(run_dir: Path, cfg: RunConfig | DictConfig, sweep: bool, summary: dict) -> Plan:
    status = summary.get("status")
    if status == "completed" and not cfg.rerun:
        return Plan("skip", "already completed (rerun=true trains it again)")
    if status in ("failed", "diverged") and sweep and not (cfg.retry_failed or cfg.rerun):
        return Plan("skip", f"{status} before (retry_failed=true runs it again)")
    last = runs.last_checkpoint(run_dir)
    fresh = status == "completed" or (status in ("failed", "diverged") and (cfg.retry_failed or cfg.rerun))
    if not fresh and not last.exists() and cfg.get("resume") and not sweep:
        started = summary or (run_dir / "config.yaml").is_file()
        raise ConfigError(f"resume={cfg.resume} " + (
            "holds no checkpoint (checkpoints/last.ckpt): it stopped before its first validation; leave out "
            "resume= to start afresh" if started else "is not a run folder: nothing to resume"))
    if fresh or not last.exists():
        return Plan("fresh")
    return Plan("resume", checkpoint=last, step=checkpoint_step(last))


def settings_differ(cfg: RunConfig | DictConfig, run_dir: Path, summary: dict | None = None) -> list[str]:
    """The keys on which ``cfg`` and the run in ``run_dir`` (its config.yaml over today's defaults, its summary's
    identity) differ, as ``key: was → now``; bookkeeping aside. Empty for a folder without a config.yaml."""
    import yaml

    try:
        saved = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return []
    if not isinstance(saved, dict) or "task" not in saved or "pos" not in saved:
        return []
    was, now = flatten(resolved(record_config(saved))), flatten(RunConfig.of(cfg).values)
    keys = [k for k in sorted(was.keys() | now.keys()) if not identity.bookkeeping(k) and k not in identity.COMPUTE
            and was.get(k) != now.get(k)]
    # another task or scheme has other options: its name says it, not each of them
    renamed = [k.rsplit(".", 1)[0] for k in ("task.name", "pos.name") if k in keys]
    keys = [k for k in keys if k in ("task.name", "pos.name") or not k.startswith(tuple(f"{s}." for s in renamed))
            or k.startswith("pos.momentum.")]
    changes = [f"{k}: {was.get(k)!r} → {now.get(k)!r}" for k in keys]
    if summary:  # the settings as they resolved: auto here may not be what auto was where the run trained
        ran, will = identity.of_record(summary, saved), expected_identity(cfg)
        changes += [f"{k}: {identity.word(ran.get(k))} → {identity.word(will.get(k))}"
                    for k in identity.differing(ran, will)]
    return changes


def _refuse_other_settings(cfg: RunConfig | DictConfig, run_dir: Path, summary: dict, sweep: bool) -> None:
    if changes := settings_differ(cfg, run_dir, summary):
        what = "the sweep's job" if sweep else f"resume={runs.shorter(run_dir)}"
        raise ConfigError(f"{what} was trained with other settings ({'; '.join(changes)}): its files are left as they "
                          f"are; run it with its own settings, or start a new run elsewhere")


def checkpoint_step(ckpt: Path) -> int:
    """The global step a checkpoint was saved at; a truncated or corrupt file, or one that would run code as it
    loads (weights only: a run folder someone downloads must not), is a one-line ConfigError."""
    try:
        return int(torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"])
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError… depending on the damage
        target = f" (→ {ckpt.resolve().name})" if ckpt.is_symlink() else ""
        why = (str(err).splitlines() or [type(err).__name__])[0][:120]
        raise ConfigError(f"{ckpt}{target} cannot be read, truncated or corrupt ({why}): delete the run folder's "
                          f"checkpoints/ to train it again from step 0") from None


def last_checkpoint_step(run_dir: Path) -> int | None:
    """The step a resume of ``run_dir`` would start from, or None without a readable checkpoint."""
    try:
        return checkpoint_step(runs.last_checkpoint(run_dir))
    except (ConfigError, FileNotFoundError):
        return None


def record_dir_of(cfg: RunConfig | DictConfig, run_dir: Path) -> Path | None:
    """Where a finished job's record lasts: ``<record>/<job folder name>``, or None when ``record`` is unset."""
    return Path(cfg.record) / Path(run_dir).name if cfg.get("record") else None


def trial_overrides(cfg: RunConfig | DictConfig, hc: DictConfig) -> list[str]:
    """The overrides that make this job none of its preset's own: each one but how-it-runs keys (those left out of
    job folder names), the preset's sweep axes at one of the values it lists, and its ``record_also`` keys."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ropelab.core.cli import axis_values

    how_it_runs = set(hc.job.config.override_dirname.exclude_keys)
    axes = {k: {str(v) for v in axis_values(k, values)}
            for k, values in (OmegaConf.select(hc, "sweeper.params") or {}).items()}
    outside = []
    for override in OverridesParser.create().parse_overrides(list(hc.overrides.task)):
        key = override.key_or_group
        if key in how_it_runs or key in (cfg.get("record_also") or ()):
            continue
        if key in axes and not override.is_sweep_override() and str(override.value()) in axes[key]:
            continue
        outside.append(override.input_line)
    # a grid changed on the command line is no longer the preset's: its jobs are trials whatever their values
    return outside + [o for o in hc.overrides.hydra if o.startswith("hydra.sweeper.params")]


def record_plan(cfg: RunConfig | DictConfig, hc: DictConfig, run_dir: Path, sweep: bool) -> tuple[Path | None, str]:
    """(where this job's record goes, or None; why it is a trial, if it is). Only a preset's own jobs, launched
    with -m, land in its ``record`` folder (committed tables hold nothing else); a ``record=`` given on the
    command line is the user's choice and records every job."""
    if not cfg.get("record"):
        return None, ""
    preset = hc.runtime.choices.get("experiment") or "this config"
    if "record" not in {o.split("=", 1)[0].lstrip("+~") for o in hc.overrides.task}:
        if not sweep:
            return None, f"a single run of experiment={preset} is a trial, not recorded in {cfg.record} (-m records its jobs)"
        if outside := trial_overrides(cfg, hc):
            return None, (f"{' '.join(outside)} is outside experiment={preset}'s jobs: a trial, not recorded in "
                          f"{cfg.record}")
    record_dir = record_dir_of(cfg, run_dir)
    if runs.recorded(record_dir) and cfg.rerun:
        return None, (f"rerun=true of a job recorded in {record_dir}: trained in {runs.shorter(run_dir)}, the record "
                      f"left as it is (compare them with python -m ropelab.reproduce)")
    counts = identity.table(record_dir.parent, leave_out=(record_dir.name,))
    if counts and (why := identity.trial_reason(expected_identity(cfg), record_dir.parent, record_dir.name, counts)):
        return None, why
    return record_dir, ""


class _Parameter(NamedTuple):
    """What ``lit.choose_fused`` reads of a parameter, before the model is on its device."""
    device: torch.device

    def is_floating_point(self) -> bool:
        return True


def expected_identity(cfg: RunConfig | DictConfig) -> dict[str, Any]:
    """The identity (``ropelab.core.identity``) a run of ``cfg`` would have here: every setting as the run
    resolves it (its ``machine``)."""
    from ropelab.core.lit import choose_fused

    m = cfg.machine if isinstance(cfg, RunConfig) else machine.decide(cfg.trainer)  # a DictConfig: the packed launcher's
    fused, _ = choose_fused(cfg.optim.fused, [_Parameter(torch.device(m.accelerator))], m.precision == "16-mixed")
    return {"optim.fused": fused, "trainer.compile": m.compile, "trainer.precision": m.precision,
            "trainer.threads": m.threads, "trainer.accelerator": m.accelerator, "trainer.devices": m.devices}


def checkpoint_missing(cfg: RunConfig | DictConfig, run_dir: Path) -> bool:
    """A table that reads its jobs' checkpoints (``needs_checkpoint``) has no use for a record alone: the job trains
    (or resumes, or is skipped as completed) in its run folder unless that folder is complete with its checkpoint."""
    if not cfg.get("needs_checkpoint"):
        return False
    summary = runs.read_summary(run_dir) or {}
    return not (summary.get("status") == "completed" and runs.last_checkpoint(run_dir).is_file())


def last_logged(metrics_csv: Path, prefix: str) -> dict[str, float]:
    """The last value metrics.csv holds of each column named ``prefix…`` (``train/loss`` at the final step)."""
    import csv

    last: dict[str, float] = {}
    try:
        with open(metrics_csv, newline="") as f:
            for row in csv.DictReader(f):
                last.update({k: float(v) for k, v in row.items() if k and k.startswith(prefix) and v not in ("", None)})
    except OSError:
        pass
    return last


def config_text(cfg: RunConfig | DictConfig) -> str:
    """A run's config.yaml: ``cfg`` resolved, its ``record`` folder relative to the checkout (records are portable)."""
    values = dict(RunConfig.of(cfg).values)
    if values.get("record"):
        values["record"] = runs.portable(values["record"])
    return OmegaConf.to_yaml(values)


# What a run's summary.json says, in one place for a single run (_train) and a packed member
# (ropelab.core.packed_launcher): the same keys, so records, reports and sweeps see no difference.

def start_summary(cfg: RunConfig | DictConfig, run_dir: Path, model, resumed_from: int, accelerator: str, precision: str,
                  compiled: bool, trial: str) -> dict[str, Any]:
    """The summary a run writes before its first step (status running)."""
    return {
        "status": "running", "task": cfg.task["name"], "pos": cfg.pos["name"], "seed": cfg.seed, "run_dir": runs.portable(run_dir),
        "max_steps": cfg.trainer.max_steps, "params": model.num_parameters(),
        "positional_params": sum(p.numel() for p in model.pos.parameters()), "resumed_from_step": resumed_from,
        "init_from": cfg.init_from, "surgery": cfg.surgery,
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "accelerator": accelerator, "precision": precision, "compile": compiled, "threads": torch.get_num_threads(),
        "devices": cfg.trainer.devices,
        "machine": machine.describe(accelerator), **({"trial": trial} if trial else {}),
    }


def completed(model, task, cfg: RunConfig | DictConfig, lit, final: dict[str, float]) -> dict[str, Any]:
    """A completed run's fields: its final metrics, exact match per group (``lit.group_results`` of the test
    pass) and attention locality."""
    return {"attention": locality.measure(model, task, RunConfig.of(cfg).values),  # the record rebuilds sharpening
            "status": "completed", "final": final, "per_group": {
                "group": task.group_name, "metric": "exact",
                **{split: {str(g): counts for g, counts in groups.items()} for split, groups in lit.group_results.items()}}}


def diverged(err) -> dict[str, Any]:
    """A diverged run's fields, from its ``lit.Diverged``."""
    return {"status": "diverged", "diverged_step": err.step, "last_finite_loss": err.last_finite_loss, "error": str(err)}


def close_run(run_dir: Path, summary: dict[str, Any], loggers: list, record_dir: Path | None, steps: int,
              seconds: float, fused: bool | None) -> dict[str, Any]:
    """The end of a run whatever its status: the last fields, the loggers closed, summary.json written, and a
    completed run's record kept."""
    summary.update(steps=steps, wall_seconds=round(seconds, 2), fused_adamw=fused)
    summary["identity"] = identity.of_record({k: v for k, v in summary.items() if k != "identity"})
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


INTERRUPTED_EXIT = sweep_summary.INTERRUPTED_EXIT


def result_lines(summary: dict, report_target: Path | None = None, resume: str | None = None) -> list[str]:
    """The end of a run: its folder, status, every split's metrics in one fixed order, and what to run next (the
    report, or for an interrupted run the command that resumes it)."""
    final = summary.get("final") or {}
    metrics = " ".join(f"{k}={final[k]:.4f}" if k in final else f"{k}=n/a" for k in FINAL_METRICS)
    status = summary["status"] + (f" (skipped: {summary['skipped']})" if summary.get("skipped") else "")
    steps = f" · steps {summary.get('steps', '?')}"
    if summary["status"] == "interrupted":
        saved = summary.get("checkpoint_step")
        steps = f" at step {summary.get('steps', '?')} · " + (
            f"checkpoint at step {saved}" if saved is not None else "no checkpoint: a resume starts at step 0")
    lines = [f"run: {summary.get('record') or summary.get('run_dir')}",
             f"status: {status}{steps} · {summary.get('wall_seconds', '?')} s",
             f"metrics: {metrics}"]
    if summary.get("trial"):
        lines.append(f"trial: {summary['trial']}")
    if summary.get("error"):
        lines.append(f"error: {summary['error']}")
    if resume is not None:
        lines.append(f"resume: {resume}")
    elif report_target is not None:
        lines.append(f"next: {runs.report_command(report_target)}")
    return lines



def resume_command(run_dir: Path | str | None = None) -> str:
    """The command line this process was started with, as the user can type it again: with ``resume=<run_dir>``
    for a single run, unchanged for a sweep (a sweep skips its finished jobs and resumes the others)."""
    import shlex

    args = [a for a in sys.argv[1:] if not a.startswith("resume=")]
    if run_dir is not None:
        args.append(f"resume={runs.shorter(Path(run_dir))}")
    return shlex.join([runs.python_command(), str(runs.shorter(Path(sys.argv[0]))), *args])


def _interrupted_before(settings: RunConfig) -> str | None:
    """An interrupted single run with this very config, so that starting afresh is not the only thing said."""
    wanted = OmegaConf.to_yaml(settings.values)
    for summary_path in sorted((runs.RUNS_ROOT / "single").glob(f"*/{runs.SUMMARY}"), reverse=True):
        folder = summary_path.parent
        summary = runs.read_summary(folder) or {}
        if summary.get("status") == "interrupted" and (folder / "config.yaml").is_file() \
                and (folder / "config.yaml").read_text() == wanted:
            return (f"{runs.shorter(folder)} was interrupted at step {summary.get('steps', '?')} with this config; "
                    f"this run starts afresh. To continue that one instead: {resume_command(folder)}")
    return None


def check_single_run_of_preset(cfg: DictConfig, hc: DictConfig) -> None:
    """Without -m Hydra ignores a preset's sweep, so a single run would silently train something else: refuse
    unless the command line picks every axis that has several values or that the preset's config does not set."""
    from ropelab.core.cli import axis_values

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


def plan_job(cfg: DictConfig, hc: DictConfig, run_dir: Path, sweep: bool, train: Callable[..., dict]) -> dict[str, Any]:
    """The job's config resolved and checked once (``RunConfig.of``), its preset and record settled, then
    ``train`` (``ropelab.core.train.run``) with them."""
    settings = RunConfig.of(cfg)
    if not sweep:
        check_single_run_of_preset(cfg, hc)
    record_dir, trial = record_plan(settings, hc, run_dir, sweep)
    if not sweep and not settings.resume and (earlier := _interrupted_before(settings)):
        log.info("note: %s", earlier)
    return train(settings, run_dir, sweep=sweep, record_dir=record_dir, trial=trial)


def job(cfg: DictConfig, train: Callable[..., dict], packed: dict[str, Any] | None = None) -> float | None:
    """One Hydra job and its outcome. Single run: exit 2 for a refused config, 1 for a failed run, 130 for an
    interrupted one. In a sweep every outcome is noted for the sweep's closing summary
    (``ropelab.core.sweep_summary``), which sets the exit code. ``packed``: the summary of this job trained
    already as a member of a pack (``ropelab.core.packed_launcher``), then reported exactly as a job trained here."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    sweep = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)
    job = run_dir.name if sweep else str(run_dir)

    def outcome(kind: str, detail: str = "", where: Path | None = None, trial: str = "") -> None:
        if sweep:
            sweep_summary.note(hc.job.num, job, kind, detail, where, trial)

    try:
        summary = packed if packed is not None else plan_job(cfg, hc, run_dir, sweep, train)
    except ConfigError as err:  # refused before training: no folder left behind
        runs.remove_if_unstarted(run_dir)
        print(f"error: {f'[{job}] ' if sweep else ''}{as_typed(str(err), list(hc.overrides.task))}", file=sys.stderr)
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
                                         "error": _one_line(err), "run_dir": runs.portable(run_dir)})
        return outcome("failed", _one_line(err))
    if summary.get("skipped"):
        runs.remove_if_unstarted(run_dir)  # a recorded job: Hydra's folder is all there is
    interrupted = summary["status"] == "interrupted" and not summary.get("skipped")
    if not (sweep and summary.get("skipped")):  # a sweep's skipped jobs: one line each (logged) and the summary
        for line in result_lines(summary, None if sweep else Path(summary.get("record") or run_dir),
                                 resume_command(run_dir) if interrupted and not sweep else None):
            log.info(line)
    where = Path(summary["record"]).parent if summary.get("record") else run_dir.parent
    if summary.get("skipped"):
        outcome("skipped", summary["skipped"], where)
    else:
        detail = summary.get("error") or (
            f"at step {summary.get('steps')}, checkpoint at step {summary.get('checkpoint_step')}" if interrupted else "")
        outcome(summary["status"], detail, where, trial=summary.get("trial", ""))
        if summary["status"] == "failed" and not sweep:
            sys.exit(1)
    if interrupted:
        if not sweep:
            sys.exit(INTERRUPTED_EXIT)
        if sweep_summary.launched_here():
            raise KeyboardInterrupt  # ends this launch's remaining jobs; entry() prints the sweep's summary
    return summary.get("final", {}).get("val/loss")


INSPECTING = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
              "--resolve", "-p", "--package")


def sweep_jobs(argv: list[str]) -> list[list[str]]:
    """The overrides of every job ``python train.py -m <argv>`` launches, as Hydra's basic sweeper makes them: the
    preset's ``hydra.sweeper.params``, then the command line (a later value for a key replacing an earlier one),
    the product."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ropelab.core.cli import sweep_product
    from ropelab.core.config import compose_with_hydra

    given = [a for a in argv if "=" in a and not a.startswith("-")]
    plain = [o.input_line for o in OverridesParser.create().parse_overrides(given) if not o.is_sweep_override()]
    params = OmegaConf.select(compose_with_hydra(plain), "hydra.sweeper.params") or {}
    return sweep_product([*(f"{k}={v}" for k, v in params.items()), *given])


def check_sweep(argv: list[str]) -> None:
    """``-m``: every job's config is checked (``ropelab.core.build.check_config``) before the first one trains, so
    one bad value in a sweep is one line and nothing trains (exit 2). Jobs that differ in the seed alone are
    checked once. A sweep Hydra's basic sweeper does not make (another ``hydra/sweeper``) is left to its jobs."""
    from ropelab.core.build import check_config
    from ropelab.core.config import compose

    if any(a.split("=", 1)[0] in ("hydra/sweeper", "hydra.sweeper") for a in argv):
        return
    try:
        jobs = sweep_jobs(argv)
    except Exception:  # what Hydra itself refuses on this command line, it reports as it launches
        return
    checked: set[tuple[str, ...]] = set()
    for job in jobs:
        key = tuple(o for o in job if not o.startswith("seed="))
        if key in checked:
            continue
        checked.add(key)
        try:
            check_config(compose([o for o in job if not o.startswith("hydra")]))
        except ConfigError as err:
            shown = " ".join(o for o in job if not o.startswith(("hydra", "experiment=")))
            print(f"error: [{shown}] {as_typed(str(err), job)}\nnothing trained: every job of a sweep is checked "
                  f"before the first one trains", file=sys.stderr)
            sys.exit(2)
        except Exception:  # not a config mistake of ours (a Hydra composition error): Hydra reports it per job
            continue


def refuse_results_folder(argv: list[str]) -> None:
    """Exit with one line if ``resume=`` or ``hydra.run.dir=`` names a folder under results/ (records, never trained in)."""
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in ("resume", "hydra.run.dir") and value and runs.inside_results(value.strip("'\"")):
            print(f"error: {arg}: a folder under results/ holds a record, never trained in (python -m ropelab.reproduce "
                  f"retrains a record into a scratch folder)", file=sys.stderr)
            sys.exit(2)
