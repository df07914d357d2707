"""Sweep reports: ``ropelab report SWEEP_DIR [--out DIR]`` (or ``make report SWEEP=runs/<name>``).

The command line: one sweep folder, or several single-run folders that are first linked into one folder
(``compare_runs``) and then reported as a sweep; the landmark rule comes from the flags."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ropelab.analysis.report.momentum import default_ckpt_roots
from ropelab.analysis.report.write import write_report
from ropelab.analysis.stats import Landmarks
from ropelab.core.cli import at_least
from ropelab.core.runs import LAST_CHECKPOINT, RUNS_ROOT, shorter


def compare_runs(run_dirs: list[Path], out: Path | None) -> Path:
    """A folder of links to single runs, so that they report as one sweep: one table, overlaid curves."""
    for run_dir in run_dirs:  # all checked before anything is made: a refused command leaves no folder
        if not (Path(run_dir) / "summary.json").is_file():
            raise SystemExit(f"error: {run_dir} is not a run folder (no summary.json)")
    folder = Path(out) if out else RUNS_ROOT / "compare" / time.strftime("%Y-%m-%d_%H-%M-%S")
    folder.mkdir(parents=True, exist_ok=True)
    for run_dir in run_dirs:
        link = folder / Path(run_dir).resolve().name
        if not link.exists():
            link.symlink_to(Path(run_dir).resolve(), target_is_directory=True)
    return folder


def refuse_to_lose_attention_maps(sweep_dir: Path) -> None:
    """A committed γ table's report holds attention maps drawn from checkpoints, which records do not keep: rewriting
    it where they are missing would drop them, so say where to write instead (one line, exit 1)."""
    if not (Path(sweep_dir) / "report" / "attention_momentum.png").is_file():
        return
    roots = default_ckpt_roots(sweep_dir)
    if not any(any(root.glob(f"*/{LAST_CHECKPOINT.as_posix()}")) for root in roots):
        name = Path(sweep_dir).name
        raise SystemExit(f"error: {sweep_dir}/report holds attention maps drawn from the checkpoints under "
                         f"{shorter(roots[0])}/, which are not here: rewriting it would drop them; write elsewhere "
                         f"with --out DIR (e.g. --out runs/{name}/report), or run `make momentum` where they are")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ropelab report", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", type=Path, nargs="+",
                   help="a sweep folder (e.g. runs/bifocal_table1), or several run folders to compare side by side")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: SWEEP_DIR/report)")
    p.add_argument("--smooth", type=at_least(1), default=10, help="lock-in: trailing-mean window in steps")
    p.add_argument("--plateau", type=int, nargs=2, default=(20, 60), metavar=("FROM", "TO"),
                   help="lock-in: plateau window in steps")
    p.add_argument("--lockin-frac", type=float, default=0.5, help="lock-in: fraction of the plateau loss")
    p.add_argument("--onset-drop", type=float, default=0.1,
                   help="onset: the loss has left its plateau when below (1 - this) × plateau")
    p.add_argument("--dpi", type=int, default=100)
    p.add_argument("--no-attention", action="store_true", help="skip the attention maps of γ sweeps")
    p.add_argument("--attn-layer", type=int, default=0, help="layer of the attention maps (-1: last)")
    args = p.parse_args(argv)
    rule = Landmarks(smooth=args.smooth, plateau=tuple(args.plateau), lockin_frac=args.lockin_frac,
                     onset_drop=args.onset_drop)
    sweep_dir, out = args.sweep_dir[0], args.out
    if out is None and len(args.sweep_dir) == 1 and not args.no_attention:
        refuse_to_lose_attention_maps(sweep_dir)
    if len(args.sweep_dir) > 1:  # single runs side by side: their links in one folder, the report beside them
        sweep_dir = compare_runs(args.sweep_dir, args.out)
        out = sweep_dir / "report"
    out = write_report(sweep_dir, out, rule, args.dpi, not args.no_attention, args.attn_layer)
    print(f"report: {out / 'report.md'}")
    return 0
