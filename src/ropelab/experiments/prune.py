"""``ropelab prune [FOLDER] --older-than DAYS``: delete run folders' checkpoints, printing what it freed.

Every run keeps its checkpoints (``<run>/checkpoints/*.ckpt``) so that it can resume and the analyses that read a
model (frequency usage, attention maps, extrapolation) can load it; a few short runs fill runs/ with hundreds of MB.
This deletes the checkpoint files last written more than DAYS ago (0: all of them) in every run folder under FOLDER
(default runs/). Nothing else of a run folder goes (its metrics, summary and logs stay), nothing under results/ is
touched (records keep no checkpoints; a folder under results/, or a link into it, is refused or skipped), and
links are not followed. A pruned run can no longer resume, nor feed an analysis that reads its model.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ropelab.core import runs
from ropelab.core.cli import REPO
from ropelab.core.cli import at_least

RESULTS = REPO / "results"


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def _in_results(path: Path) -> bool:
    return path.resolve() == RESULTS.resolve() or runs.inside_results(path.resolve())


def stale_checkpoints(root: Path, older_than_days: float) -> dict[Path, list[Path]]:
    """run folder → its checkpoint files last written before the cutoff, under ``root``, results/ left out."""
    cutoff = time.time() - older_than_days * 86400
    found: dict[Path, list[Path]] = {}
    for folder, subfolders, files in os.walk(root):  # os.walk follows no link
        here = Path(folder)
        subfolders[:] = [d for d in subfolders if not _in_results(here / d)]
        if here.name != runs.CHECKPOINTS:
            continue
        old = [here / f for f in sorted(files) if not (here / f).is_symlink() and (here / f).stat().st_mtime < cutoff]
        if old:
            found.setdefault(here.parent, []).extend(old)
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ropelab prune", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", nargs="?", type=Path, default=runs.RUNS_ROOT, help="where run folders lie (default runs/)")
    p.add_argument("--older-than", type=at_least(0, float), required=True, metavar="DAYS",
                   help="delete checkpoints last written more than DAYS ago; 0 deletes them all")
    p.add_argument("--dry-run", action="store_true", help="print what would be freed, delete nothing")
    args = p.parse_args(argv)
    if _in_results(args.folder):
        print(f"error: {args.folder} is under results/: records keep no checkpoints, and prune never writes there",
              file=sys.stderr)
        return 2
    if not args.folder.is_dir():
        print(f"{args.folder}: no such folder, nothing to prune")
        return 0
    stale = stale_checkpoints(args.folder, args.older_than)
    freed = 0
    for run_dir, files in stale.items():
        size = sum(f.stat().st_size for f in files)
        if not args.dry_run:
            for f in files:
                f.unlink()
            if not any((run_dir / runs.CHECKPOINTS).iterdir()):
                (run_dir / runs.CHECKPOINTS).rmdir()
        freed += size
        print(f"{_size(size):>10}  {runs.shorter(run_dir)} ({len(files)} checkpoint{'s' * (len(files) != 1)})")
    verb = "would free" if args.dry_run else "freed"
    count = sum(map(len, stale.values()))
    print(f"{verb} {_size(freed)}: {count} checkpoints in {len(stale)} run folders under {runs.shorter(args.folder)}"
          f" ({'all' if args.older_than == 0 else f'older than {args.older_than:g} days'})")
    return 0
