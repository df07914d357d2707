"""The surgery experiment's runs: one ``train.py`` run in this process (``train``), its metrics, the fine-tuning
arms, the machine."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from ropelab.core.cli import REPO
from ropelab.core.config import compose


ROOT = REPO


ARMS = {  # name: (train.py overrides on top of init_from, label)
    "control": ([], "control: fixed rope"),
    "spectral_only": (["surgery=spectral", "surgery_train=spectral"], "spectral, only Ω, A, Φ train"),
    "spectral_all": (["surgery=spectral", "surgery_train=all"], "spectral, everything trains"),
}


def train(overrides: list[str], run_dir: Path, say) -> dict:
    """One run through ``ropelab.core.train.run`` (what ``python train.py <overrides>`` does), in this process."""
    from ropelab.core.train import run

    say(f"train.py {' '.join(overrides)}  ->  {run_dir}")
    summary = run(compose(overrides), run_dir)
    if summary.get("status") != "completed":
        raise RuntimeError(f"{run_dir}: {summary.get('status')} {summary.get('error', '')}")
    return summary


def read_metrics(run_dir: Path) -> dict[str, dict[int, float]]:
    """metric → step → value, as metrics.csv writes them (a blank is no value)."""
    from ropelab.core import record

    rows = record.read(run_dir).metrics_rows()
    if not rows:
        raise FileNotFoundError(f"{run_dir / record.METRICS}: no metrics to report")
    header, out = rows[0], {}
    for row in rows[1:]:
        cells = dict(zip(header, row))
        for key, value in cells.items():
            if key not in ("step", "epoch") and value != "":
                out.setdefault(key, {})[int(cells["step"])] = float(value)
    return out


def machine_info(threads: int) -> dict[str, Any]:
    from ropelab.core import machine

    info = machine.describe("cpu")
    return {"cpu": info["cpu"]["model"], "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(), "torch": info["torch"], "commit": info.get("commit"), "dirty": info.get("dirty"),
            "python": platform.python_version(), "threads": threads}
