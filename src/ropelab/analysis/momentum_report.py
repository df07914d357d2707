"""Momentum attention (arXiv 2602.04902, issue 10): degradation γ = 0 → 2, γ-response verdicts and the
attention-sharpening number, for the ``momentum_gamma`` and ``momentum_freqs`` sweeps.

``ropelab report SWEEP`` adds this module's section to a γ sweep's report (``section``);
``ropelab momentum-report SWEEP [--out DIR]`` writes it alone (``momentum.md`` and its figures).

The definitions (degradation, γ verdicts, sharpening) are ``ropelab.analysis.report.gamma``'s; the section is
``ropelab.analysis.report.momentum``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ropelab.analysis.report.momentum import default_ckpt_roots, section
from ropelab.analysis.report.write import open_report
from ropelab.analysis.stats import Landmarks
from ropelab.core.cli import at_least
from ropelab.core.runs import atomic_write_text


def write(sweep_dir: Path, out: Path | None = None, **kwargs) -> Path:
    kwargs.setdefault("ckpt_roots", default_ckpt_roots(sweep_dir))
    sweep, out, md = open_report(sweep_dir, out, Landmarks(), "Momentum report", "python -m ropelab.momentum_report")
    md += section(sweep, out, **kwargs) or ["No γ axis with completed runs in this sweep."]
    md += [""]
    atomic_write_text(out / "momentum.md", "\n".join(md))
    return out / "momentum.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ropelab momentum-report", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", type=Path, help="runs/momentum_gamma, results/momentum_freqs, …")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: SWEEP_DIR/report)")
    p.add_argument("--checkpoints", type=Path, action="append", default=None,
                   help="where job folders with checkpoints/ live when SWEEP_DIR holds records (default: runs/<name>)")
    p.add_argument("--no-attention", action="store_true", help="skip the attention maps and the sharpening number")
    p.add_argument("--attn-layer", type=int, default=0, help="layer of the attention figure (-1: last)")
    p.add_argument("--k", type=at_least(1), default=3, help="sharpening: mass on the k most recent tokens")
    p.add_argument("--examples", type=at_least(1), default=16, help="sharpening: validation examples per run")
    p.add_argument("--margin", type=float, default=0.05, help="flat: every Δ(γ) interval within ±margin (accuracy)")
    p.add_argument("--dpi", type=int, default=100)
    args = p.parse_args(argv)
    path = write(args.sweep_dir, args.out, dpi=args.dpi, attention=not args.no_attention, layer=args.attn_layer,
                 k=args.k, n_examples=args.examples, margin=args.margin,
                 ckpt_roots=args.checkpoints if args.checkpoints is not None else default_ckpt_roots(args.sweep_dir))
    print(f"momentum report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
