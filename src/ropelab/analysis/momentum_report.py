"""Momentum attention (arXiv 2602.04902, issue 10): degradation γ = 0 → 2, γ-response verdicts and the
attention-sharpening number, for the ``momentum_gamma`` and ``momentum_freqs`` sweeps.

``python -m ropelab.report SWEEP`` adds this module's section to a γ sweep's report (``section``);
``python -m ropelab.momentum_report SWEEP [--out DIR]`` writes it alone (``momentum.md`` and its figures).

Definitions (every interval is a 95 % Student t interval over seeds, ``ropelab.analysis.stats``):

* **Relative degradation** of a task, γ₀ = 0 → γ₁ = 2, in %: per seed s, d_s = (a_s(γ₀) − a_s(γ₁)) / a_s(γ₀) with
  a = final val/acc — the two runs of a seed share the data and the backbone initialisation, so the drop is
  paired — then the mean of d_s over seeds with its t interval. Averaged over a task set (the ∫ tasks, all
  four): per seed, the mean of that seed's per-task drops, then the t interval over seeds (only seeds that have
  both γ for every task of the set count). Beside it, the **drop of the mean** — per seed (Ā(γ₀) − Ā(γ₁)) / Ā(γ₀)
  with Ā the mean accuracy over the task set — and the **absolute** drop Ā(γ₀) − Ā(γ₁) in points.
* **γ verdicts** (``gamma_verdict``), per task, against the seed spread: Δ(γ) = a(γ) − a(γ_first) paired by seed;
  slope = per seed, the least-squares slope of accuracy against the *rank* of γ (0, 1, …, so the wide 1 → 2 step
  does not dominate), t interval over seeds. In this order: **flat** if every Δ(γ) interval lies within
  ±``margin`` (5 points by default) — an equivalence test: any change is smaller than the margin with 95 %
  confidence, even if a tiny one is significant; **inverted U** if the interior γ with the highest mean is
  significantly above both ends (both paired intervals > 0); **U** for the mirror case; **monotone gain** if
  the slope's interval is > 0; **monotone drop** if it is < 0; **no clear change** if no Δ(γ) interval excludes 0
  (but some is wider than ±margin: flatness not shown either); **other** if some Δ excludes 0 without any of
  these shapes.
* **Sharpening** (``local_mass``): the attention mass a query puts on its k most recent tokens, itself included
  (keys i−k < j ≤ i), averaged over queries i ≥ k, heads, layers and validation examples; uniform causal
  attention gives ``uniform_local_mass``. The paper's "the diagonal sharpens as γ grows" = this number rises
  with γ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ropelab.analysis.report.momentum import default_ckpt_roots, section
from ropelab.analysis.report.write import open_report
from ropelab.analysis.stats import Landmarks
from ropelab.core.runs import atomic_write_text


def write(sweep_dir: Path, out: Path | None = None, **kwargs) -> Path:
    kwargs.setdefault("ckpt_roots", default_ckpt_roots(sweep_dir))
    sweep, out, md = open_report(sweep_dir, out, Landmarks(), "Momentum report", "python -m ropelab.momentum_report")
    md += section(sweep, out, **kwargs) or ["No γ axis with completed runs in this sweep."]
    md += [""]
    atomic_write_text(out / "momentum.md", "\n".join(md))
    return out / "momentum.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ropelab.momentum_report", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", type=Path, help="runs/momentum_gamma, results/momentum_freqs, …")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: SWEEP_DIR/report)")
    p.add_argument("--checkpoints", type=Path, action="append", default=None,
                   help="where job folders with checkpoints/ live when SWEEP_DIR holds records (default: runs/<name>)")
    p.add_argument("--no-attention", action="store_true", help="skip the attention maps and the sharpening number")
    p.add_argument("--attn-layer", type=int, default=0, help="layer of the attention figure (-1: last)")
    p.add_argument("--k", type=int, default=3, help="sharpening: mass on the k most recent tokens")
    p.add_argument("--examples", type=int, default=16, help="sharpening: validation examples per run")
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
