"""Callbacks: snapshots of the learnable positional parameters (Ω, A, Φ, δ) over training, progress, a clean
stop on Ctrl-C, and the test hook that kills a run at an exact step."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Callable

import lightning as L
import numpy as np
import torch

from ropelab.core.runs import TRACE, atomic_write_bytes

log = logging.getLogger("ropelab")


class PositionalTrace(L.Callback):
    """Records every learnable positional parameter at step 0 and after each validation.

    Written to ``<run>/positional_trace.npz``: ``steps`` (n,) and one array (n, *shape) per parameter,
    e.g. ``omega`` (n, heads, pairs). The trace is part of the checkpoint, so a resumed run keeps it whole.
    """

    FILE = TRACE

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / self.FILE
        self.steps: list[int] = []
        self.values: dict[str, list[np.ndarray]] = {}

    def _record(self, trainer, pl_module) -> None:
        self.record(trainer.global_step, pl_module.model.pos)

    def record(self, step: int, pos) -> None:
        """Snapshot ``pos``'s learnable parameters at ``step`` and rewrite the file (a pack's member's trace is
        recorded directly: ``ropelab.core.packed_launcher``)."""
        params = pos.positional_parameters()
        if not params or (self.steps and self.steps[-1] == step):
            return
        self.steps.append(step)
        for name, p in params.items():
            self.values.setdefault(name, []).append(p.detach().float().cpu().numpy().copy())
        buffer = io.BytesIO()
        np.savez(buffer, steps=np.array(self.steps), **{k: np.stack(v) for k, v in self.values.items()})
        atomic_write_bytes(self.path, buffer.getvalue())

    def on_train_start(self, trainer, pl_module):
        if trainer.global_step == 0:
            self._record(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking and trainer.state.fn == "fit":
            self._record(trainer, pl_module)

    def state_dict(self):  # tensors, not arrays: checkpoints are loaded with torch.load(weights_only=True)
        return {"steps": list(self.steps), "values": {k: [torch.from_numpy(a) for a in v] for k, v in self.values.items()}}

    def load_state_dict(self, state):
        self.steps = list(state["steps"])
        self.values = {k: [t.numpy() for t in v] for k, v in state["values"].items()}


class FlushLoggers(L.Callback):
    """Write buffered metrics at every validation, before the checkpoint that follows it is saved, so the
    rows in ``metrics.csv`` always reach at least the last checkpoint."""

    def on_validation_end(self, trainer, pl_module):
        if trainer.state.fn == "fit":
            for logger in trainer.loggers:
                logger.save()


class Progress(L.Callback):
    """What training is doing while it does it.

    ``bar``: a bar on stderr with steps/s, ETA and the current training loss, and each validation's line above it;
    ``lines``: one log line per validation (step, steps/s, ETA, train and val metrics), for sweeps and log files;
    ``off``: nothing. ``choose(setting, parallel)`` resolves ``trainer.progress=auto``. The lines go to the
    ``ropelab`` logger, so they land in the run's ``train.log`` too.
    """

    SHOWN = ("train/loss", "val/loss", "val/acc", "val/exact")

    def __init__(self, mode: str, label: str = ""):
        self.mode, self.label = mode, label
        self.bar = None
        self.start_step, self.start_time = 0, 0.0

    @staticmethod
    def choose(setting: str, parallel: bool) -> str:
        """auto: a bar when stderr is a terminal and no other job shares it, else lines."""
        if setting != "auto":
            return setting
        return "bar" if sys.stderr.isatty() and not parallel else "lines"

    def on_train_start(self, trainer, pl_module):
        self.start_step, self.start_time = trainer.global_step, time.monotonic()
        if self.mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=trainer.max_steps, initial=trainer.global_step, unit="step", dynamic_ncols=True,
                            desc=self.label or None, file=sys.stderr)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.bar is not None:
            if pl_module.last_finite_loss is not None:
                self.bar.set_postfix_str(f"loss {pl_module.last_finite_loss:.4f}", refresh=False)
            self.bar.update(trainer.global_step - self.bar.n)

    def on_validation_end(self, trainer, pl_module):
        if self.mode == "off" or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        line = self.line(trainer)
        if self.bar is None:
            log.info(line)
            return
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm():  # printed above the bar; train.log's file handler is left as it is
            log.info(line)

    def on_train_end(self, trainer, pl_module):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_exception(self, trainer, pl_module, exception):  # Ctrl-C: the closing lines start on their own line
        self.on_train_end(trainer, pl_module)

    def line(self, trainer) -> str:
        return self.format(self.label, trainer.global_step, trainer.max_steps, trainer.global_step - self.start_step,
                           time.monotonic() - self.start_time, trainer.callback_metrics)

    @classmethod
    def format(cls, label: str, step: int, total: int, done: int, elapsed: float, metrics) -> str:
        """One progress line: ``done`` steps in ``elapsed`` seconds, now at ``step`` of ``total``."""
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        eta = _duration((total - step) / rate) if rate else "?"
        shown = " ".join(f"{k}={float(metrics[k]):.4f}" for k in cls.SHOWN if k in metrics)
        prefix = f"[{label}] " if label else ""
        return (f"{prefix}step {step}/{total} · {f'{rate:.2f}' if rate else '?'} steps/s · ETA {eta} · {shown}"
                ).rstrip(" ·")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Interrupted(BaseException):
    """Training stopped on Ctrl-C (SIGINT) at a step boundary, with a checkpoint of that step on disk.

    A BaseException like KeyboardInterrupt, so that nothing which handles failures takes it for one; not a
    KeyboardInterrupt, which Lightning turns into exit code 1."""

    def __init__(self, step: int):
        super().__init__(f"interrupted at step {step}")
        self.step = step


class StopOnInterrupt(L.Callback):
    """Ctrl-C stops training cleanly: the first SIGINT asks for a stop; at the end of the step under way a
    checkpoint of that step is saved as ``checkpoints/last.ckpt`` (where Lightning resumes exactly: a checkpoint
    saved on_train_batch_end), and at the start of the next step, once that step's metrics are logged, the
    metrics are flushed and ``Interrupted`` ends the fit. A second SIGINT stops at once (KeyboardInterrupt; the
    last checkpoint is then the last validation's). ``save(step)``: how that step is saved, where it is not one
    Lightning checkpoint (a pack's members each save their own: ``ropelab.core.packed_launcher``)."""

    def __init__(self, checkpoint_dir: str | Path, save: Callable[[int], None] | None = None):
        self.checkpoint_dir, self.save = Path(checkpoint_dir), save
        self.requested, self.saved_step = False, None

    @contextlib.contextmanager
    def armed(self):
        """SIGINT handled as above while training runs in this block (only the main thread can catch signals)."""
        def ask_to_stop(signum, frame):
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True

        try:
            previous = signal.signal(signal.SIGINT, ask_to_stop)
        except ValueError:  # not the main thread: Ctrl-C keeps its default meaning
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.requested and self.saved_step is None:
            step = trainer.global_step
            if self.save is not None:
                self.save(step)
            else:
                path = self.checkpoint_dir / f"step{step:06d}.ckpt"  # a validation at this step saves over it
                trainer.save_checkpoint(path)
                link_last(path)
            self.saved_step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.saved_step is not None:
            for logger in trainer.loggers:
                logger.save()
            raise Interrupted(self.saved_step)


def link_last(path: Path) -> None:
    """``last.ckpt`` beside ``path`` made to point at it, in one rename: a kill leaves the old link or the new."""
    link = path.parent / f".last.{os.getpid()}"
    link.unlink(missing_ok=True)
    link.symlink_to(path.name)
    os.replace(link, path.parent / "last.ckpt")


class KillAtStep(L.Callback):
    """Test hook: send this process SIGKILL (or ``$ROPELAB_KILL_SIGNAL``, e.g. INT for a Ctrl-C) at the start of
    training step ``step`` (when ``$ROPELAB_KILL_AT_STEP`` is set), after everything the steps before it wrote
    (checkpoints included) is on disk.

    It lets a test stop a run at an exact point, where polling for a checkpoint file or a progress line would race
    the run (and ``save_top_k=1`` deletes the older ones)."""

    ENV, SIGNAL_ENV = "ROPELAB_KILL_AT_STEP", "ROPELAB_KILL_SIGNAL"

    def __init__(self, step: int, signum: int = signal.SIGKILL):
        self.step, self.signum, self.sent = step, signum, False

    @classmethod
    def from_env(cls) -> "KillAtStep | None":
        value = os.environ.get(cls.ENV)
        name = os.environ.get(cls.SIGNAL_ENV, "KILL")
        return cls(int(value), signal.Signals[f"SIG{name}"]) if value else None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step >= self.step and not self.sent:
            self.sent = True  # once: a resumed run past the step trains on
            os.kill(os.getpid(), self.signum)
