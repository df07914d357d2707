"""Finished run folders for the analyses that read checkpoints (escape_routes, depth_manifold): which folders
under the given paths are usable, and how many seeds their sweep planned before it ran.

A sweep folder that Hydra launched keeps ``multirun.yaml``, whose ``hydra.sweeper.params.seed`` lists the seeds
the preset planned (``100,101,102``); a verdict over fewer finished seeds is then "incomplete (k of n)" rather than
a verdict on the seeds that happened to finish.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ropelab.core import record
from ropelab.core.record import read_yaml
from ropelab.core.runs import last_checkpoint


def planned_seeds(sweep: Path) -> int | None:
    """The number of seeds ``sweep/multirun.yaml`` lists (a comma-separated list of integers), else None."""
    hydra = (read_yaml(Path(sweep) / "multirun.yaml") or {}).get("hydra") or {}
    params = (hydra.get("sweeper") or {}).get("params") or {}
    seeds = str(params.get("seed", "")).split(",")
    try:
        return len({int(s) for s in seeds})
    except ValueError:
        return None


def finished_runs(paths: Sequence[str | Path]) -> list[tuple[Path, int | None]]:
    """(run folder, seeds its sweep planned or None) of every completed run with ``checkpoints/last.ckpt`` under
    ``paths`` (sweep or run folders). Raises FileNotFoundError (one line) for a path that is not a folder."""
    found = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise FileNotFoundError(f"{path} is not a folder")
        planned = planned_seeds(path)
        found += [(d, planned) for d in record.run_dirs(path) if last_checkpoint(d).is_file() and record.read(d).completed]
    return found
