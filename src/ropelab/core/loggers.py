"""Loggers: ``metrics.csv`` in the run folder (default) and W&B (offline unless a key and network exist).

Lightning's own CSVLogger deletes an existing ``metrics.csv`` when a run restarts; ours keeps it and, on
resume, drops the rows logged after the checkpoint, so a resumed run's file equals an uninterrupted one's.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor


class _FolderLogger(Logger):
    """A logger whose files sit in the run folder: no name or version folder of its own, and no hyperparameters
    to log (the run folder has config.yaml already)."""

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    @rank_zero_only
    def log_hyperparams(self, params=None, *args, **kwargs) -> None:
        pass


class RunCSVLogger(_FolderLogger):
    """``save_dir/metrics.csv``: one row per logged step, the columns sorted by name, blank where a step has no value.

    Rows are buffered and appended every ``flush_logs_every_n_steps`` steps and at each ``save`` (after every
    validation: ``callbacks.FlushLoggers``); the file Lightning's CSVLogger writes, except that a file already
    there is appended to, never deleted. A metric seen for the first time widens the header: the file is
    rewritten once with the new column.
    """

    def __init__(self, save_dir: str, flush_logs_every_n_steps: int = 50):
        super().__init__()
        self._save_dir, self.flush_every = str(save_dir), flush_logs_every_n_steps
        self.path = Path(save_dir) / "metrics.csv"
        self.pending: list[dict[str, Any]] = []

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def log_dir(self) -> str:
        return self._save_dir

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        step = len(self.pending) if step is None else step
        self.pending.append({**{k: v.item() if isinstance(v, Tensor) else v for k, v in metrics.items()}, "step": step})
        if (step + 1) % self.flush_every == 0:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        if not self.pending:
            return
        exists = self.path.is_file()
        columns = _read_csv(self.path, header_only=True)[0] if exists else []
        wider = sorted(set(columns).union(*self.pending))
        if exists and wider != columns:
            _write_csv(self.path, wider, _read_csv(self.path)[1])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a" if exists else "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=wider)
            if not exists:
                writer.writeheader()
            writer.writerows(self.pending)
        self.pending = []

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.save()


class MemberLoggers(_FolderLogger):
    """A pack's loggers (``ropelab.core.packed.PackLM``): what it logs as ``<k>/<metric>`` goes to member ``k``'s
    own loggers as ``<metric>``, with what every member shares (``epoch``); ``final[k]`` keeps each metric's last
    value (a member's summary). A member ``drop``ped (its run ended) is sent nothing more."""

    def __init__(self, members: list[list[Logger]], final: list[dict[str, float]]):
        super().__init__()
        self.members, self.final = dict(enumerate(members)), final

    def drop(self, k: int) -> None:
        self.members.pop(k, None)

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        shared = {k: v for k, v in metrics.items() if "/" not in k or not k.split("/", 1)[0].isdigit()}
        for k, loggers in self.members.items():
            own = {key.split("/", 1)[1]: v for key, v in metrics.items() if key.startswith(f"{k}/")}
            if own:
                self.final[k].update(own)
                for logger in loggers:
                    logger.log_metrics({**own, **shared}, step=step)

    @rank_zero_only
    def save(self) -> None:
        for loggers in self.members.values():
            for logger in loggers:
                logger.save()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.save()  # each member's run closes its own loggers


def truncate_metrics(metrics_csv: Path, from_step: int) -> None:
    """Drop rows logged at ``step >= from_step`` (they will be logged again by the resumed run)."""
    metrics_csv = Path(metrics_csv)
    if not metrics_csv.is_file():
        return
    columns, rows = _read_csv(metrics_csv)
    _write_csv(metrics_csv, columns, [r for r in rows if int(float(r["step"])) < from_step])


def _read_csv(path: Path, header_only: bool = False) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), [] if header_only else list(reader)


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


# ---------------------------------------------------------------------------------------------------- W&B

def _wandb_tags(cfg: dict) -> list[str]:
    pos, task = cfg.get("pos") or {}, cfg.get("task") or {}
    tags = [f"task={task.get('name')}", f"pos={pos.get('name')}", f"seed={cfg.get('seed')}",
            f"gamma={(pos.get('momentum') or {}).get('gamma', 0.0)}"]
    tags += [f"{key}={pos[key]}" for key in ("base", "freqs") if pos.get(key) is not None]
    return [t[:64] for t in tags]  # W&B's tag length limit


class RunWandbLogger(WandbLogger):
    """One W&B run per run folder (so per Hydra job), offline unless ``WANDB_MODE`` says otherwise.

    * files go under ``<run_dir>/wandb/`` (``offline-run-*`` until ``make sync`` uploads them);
    * the run is grouped by the experiment ``name``, tagged task / pos / seed / γ / base / freqs, named after
      the folder, and carries the resolved ``config.yaml`` that ``ropelab.core.train`` wrote before building loggers;
    * at each validation it also logs histograms of the scheme's learnable parameters (``pos/<name>``, and
      ``pos/<name>_drift`` = Ω/Ω₀ − 1 where the scheme keeps its initial Ω), so their spread, not only the
      ``pos/<name>_mean`` scalar, is visible;
    * ``close(status)``, called by ``ropelab.core.train.run`` at the end of the job, finishes the W&B run (exit code 0
      for a completed run, 1 otherwise). Lightning's own ``finalize`` after each fit / validate / test leaves the
      run open, so the test metrics that follow land in the same run.
    """

    def __init__(self, save_dir: str, project: str = "ropelab", entity: str | None = None,
                 group: str | None = None, tags: list[str] | None = None, histograms: bool = True,
                 mode: str | None = None, **kwargs):
        import yaml

        run_dir = Path(save_dir)
        cfg_path = run_dir / "config.yaml"
        cfg = yaml.safe_load(cfg_path.read_text()) if cfg_path.is_file() else {}
        if os.environ.get("WANDB_MODE") == "":  # set but empty: W&B itself would reject it
            del os.environ["WANDB_MODE"]
        mode = mode or os.environ.get("WANDB_MODE") or "offline"  # no key / no network here: sync later
        previous = _wandb_module().run
        if previous is not None:  # a run left open in this process (an earlier job that died): close it
            previous.finish(exit_code=1)
        # quiet: no banner and no history table per run (W&B's warnings still show); the runs are under
        # <run_dir>/wandb/ and `make sync` uploads them
        kwargs.setdefault("settings", _wandb_module().Settings(quiet=True))
        super().__init__(save_dir=str(run_dir), project=project, entity=entity,
                         group=group or cfg.get("name"), name=run_dir.name,
                         tags=list(tags or []) + _wandb_tags(cfg), config=cfg, mode=mode,
                         job_type="train", **kwargs)
        # Lightning passes anonymous=None to wandb.init, which W&B ≥ 0.19 warns has no effect: never send it
        self._wandb_init.pop("anonymous", None)
        self._histograms, self._pos_module, self._finished = histograms, None, False

    def log_graph(self, model, input_array=None) -> None:  # Lightning hands us the module at fit start
        inner = getattr(model, "model", model)
        self._pos_module = getattr(inner, "pos", None)

    def _histogram_metrics(self) -> dict:
        pos = self._pos_module
        if pos is None or not self._histograms or not hasattr(pos, "positional_parameters"):
            return {}
        wandb = _wandb_module()
        out = {}
        for name, p in pos.positional_parameters().items():
            values = p.detach().float().cpu().numpy().ravel()
            out[f"pos/{name}"] = wandb.Histogram(values)
            init = getattr(pos, f"{name}_init", None)
            if init is not None and getattr(init, "shape", None) == p.shape:
                base = init.detach().float().cpu().numpy().ravel()
                out[f"pos/{name}_drift"] = wandb.Histogram(values / (base + (base == 0)) - 1)
        return out

    def log_metrics(self, metrics, step=None) -> None:
        if self._finished:
            return
        if any(k.startswith("val/") for k in metrics):
            metrics = {**metrics, **self._histogram_metrics()}
        super().log_metrics(metrics, step)

    def close(self, status: str) -> None:
        """End of the job: finish the W&B run so the next Hydra job in this process starts its own."""
        if self._finished:
            return
        self._finished = True
        if self._experiment is not None:
            self._experiment.summary["status"] = status
            self._experiment.finish(exit_code=0 if status == "completed" else 1)


def _wandb_module():
    import wandb

    return wandb
