"""Callbacks: snapshots of the learnable positional parameters (Ω, A, Φ, δ) over training."""

from __future__ import annotations

import io
from pathlib import Path

import lightning as L
import numpy as np
import torch

from ropelab.runs import atomic_write_bytes


class PositionalTrace(L.Callback):
    """Records every learnable positional parameter at step 0 and after each validation.

    Written to ``<run>/positional_trace.npz``: ``steps`` (n,) and one array (n, *shape) per parameter,
    e.g. ``omega`` (n, heads, pairs). The trace is part of the checkpoint, so a resumed run keeps it whole.
    """

    FILE = "positional_trace.npz"

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / self.FILE
        self.steps: list[int] = []
        self.values: dict[str, list[np.ndarray]] = {}

    def _record(self, trainer, pl_module) -> None:
        params = pl_module.model.pos.positional_parameters()
        if not params or (self.steps and self.steps[-1] == trainer.global_step):
            return
        self.steps.append(trainer.global_step)
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
