"""The bio-rotation phase diagram: where (if anywhere) RoPE stalls and spectral RoPE locks in.

``ropelab phase [RECORD_DIR …] [--out DIR]`` reads run records (default: the bio_rotation jobs of
results/bifocal_table1 and every job of results/bio_phase) and places each completed run in a cell
(noise alphabet × gap range) and a variant (scheme, plus ``×10 lr`` when ``optim.pos_lr_scale`` ≠ 1). Per cell
and variant: final val loss (mean ± SD, n), the fraction of seeds that lock in (half-plateau crossing) and the
median onset; per cell, spectral − rope paired by seed with a 95 % t interval. Writes ``phase.md``,
``phase.csv`` and heat maps (``phase_loss.png``, ``phase_lockin.png``, ``phase_diff.png``).

The paper's claim holds in a cell when rope *stalls* (its loss never leaves the plateau: no onset) in most
seeds while spectral *locks in* in most seeds, and spectral's final loss is lower with an interval that
excludes 0.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ropelab.analysis.report import Run, load_run, markdown_table, pyplot, smoothed_train_loss
from ropelab.core.record import run_dirs
from ropelab.analysis.stats import Landmarks, estimate, lockin_step, onset_step, paired_difference, train_loss
from ropelab.core.runs import atomic_write_text

DEFAULT_SOURCES = (Path("results/bifocal_table1"), Path("results/bio_phase"))
NOISES = ("lower", "same")
VARIANT_ORDER = ("rope", "spectral", "bifocal", "spectral ×10 lr", "bifocal ×10 lr")


def gap_label(run: Run) -> str:
    return f"{int(run.config['task.gap_min'])}–{int(run.config['task.gap_max'])}"


def variant(run: Run) -> str:
    scale = float(run.config.get("optim.pos_lr_scale", 1.0))
    name = str(run.config.get("pos.name"))
    return name if scale == 1.0 else f"{name} ×{scale:g} lr"


def load(sources: list[Path], rule: Landmarks) -> pd.DataFrame:
    """One row per completed bio_rotation run: cell, variant, seed, final metrics and landmarks."""
    rows, seen = [], set()
    for source in sources:
        if not source.is_dir():
            continue
        for path in run_dirs(source):
            run = load_run(path, source)
            if run.config.get("task.name") != "bio_rotation" or run.status != "completed":
                continue
            key = (run.config.get("task.noise"), gap_label(run), variant(run), run.config.get("seed"),
                   run.config.get("trainer.max_steps"))
            if key in seen:  # the same configuration recorded by two sweeps counts once
                continue
            seen.add(key)
            loss = train_loss(run.metrics)
            lock = lockin_step(smoothed_train_loss(run.metrics, rule.smooth), rule)
            onset = onset_step(loss, rule)
            rows.append({"noise": run.config.get("task.noise"), "gap": gap_label(run), "variant": variant(run),
                         "seed": run.config.get("seed"), "steps": run.config.get("trainer.max_steps"),
                         "val_loss": run.final.get("val/loss"), "val_acc": run.final.get("val/acc"),
                         "ood_acc": run.final.get("ood/acc"),
                         "onset": math.nan if onset is None else onset, "lockin": math.nan if lock is None else lock,
                         "locked": lock is not None and not math.isnan(lock),
                         "left_plateau": onset is not None and not math.isnan(onset), "record": str(path)})
    return pd.DataFrame(rows)


def _gap_order(gaps) -> list[str]:
    return sorted(set(gaps), key=lambda g: int(g.split("–")[0]))


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (noise, gap, var), group in runs.groupby(["noise", "gap", "variant"]):
        loss = estimate(group["val_loss"])
        rows.append({"noise": noise, "gap": gap, "variant": var, "n": len(group), "val_loss_mean": loss.mean,
                     "val_loss_sd": loss.sd, "val_acc_mean": group["val_acc"].mean(),
                     "lockin_fraction": group["locked"].mean(), "stall_fraction": 1 - group["left_plateau"].mean(),
                     "onset_median": group["onset"].median(), "lockin_median": group["lockin"].median()})
    return pd.DataFrame(rows)


def spectral_minus_rope(runs: pd.DataFrame, noise: str, gap: str, other: str = "spectral"):
    cell = runs[(runs["noise"] == noise) & (runs["gap"] == gap)]

    def by_seed(v, col):
        sel = cell[cell["variant"] == v]
        return dict(zip(sel["seed"], sel[col]))

    return (paired_difference(by_seed(other, "val_loss"), by_seed("rope", "val_loss")),
            paired_difference(by_seed(other, "onset"), by_seed("rope", "onset")))


def verdict(summary: pd.DataFrame, runs: pd.DataFrame, noise: str, gap: str) -> str:
    def row(v):
        sel = summary[(summary["noise"] == noise) & (summary["gap"] == gap) & (summary["variant"] == v)]
        return sel.iloc[0] if len(sel) else None

    rope, spectral = row("rope"), row("spectral")
    if rope is None or spectral is None:
        return "not run"
    diff, _ = spectral_minus_rope(runs, noise, gap)
    rope_stalls = rope["stall_fraction"] > 0.5
    spectral_locks = spectral["lockin_fraction"] > 0.5
    better = diff.n > 1 and diff.high < 0
    if rope_stalls and spectral_locks and better:
        return "claim holds (rope stalls, spectral locks in, lower loss)"
    parts = [f"rope {'stalls' if rope_stalls else 'does not stall'} ({rope['stall_fraction']:.0%} of seeds)",
             f"spectral {'locks in' if spectral_locks else 'does not lock in'} ({spectral['lockin_fraction']:.0%})",
             "spectral lower" if better else ("spectral higher" if diff.n > 1 and diff.low > 0 else "no clear difference")]
    return "claim does not hold: " + ", ".join(parts)


def heatmaps(summary: pd.DataFrame, runs: pd.DataFrame, out: Path, dpi: int = 100) -> list[Path]:
    plt = pyplot()
    gaps, variants = _gap_order(summary["gap"]), [v for v in VARIANT_ORDER if v in set(summary["variant"])]
    written = []
    for metric, title, fname, cmap, vmax in (
            ("val_loss_mean", "final val loss (mean over seeds)", "phase_loss.png", "viridis", None),
            ("lockin_fraction", "fraction of seeds that lock in", "phase_lockin.png", "Greens", 1.0)):
        fig, axes = plt.subplots(1, len(variants), figsize=(3.4 * len(variants) + 1, 3.2), squeeze=False)
        vmax = vmax or float(np.nanmax(summary[metric]))
        for ax, var in zip(axes[0], variants):
            grid = np.full((len(NOISES), len(gaps)), np.nan)
            for i, noise in enumerate(NOISES):
                for j, gap in enumerate(gaps):
                    sel = summary[(summary["noise"] == noise) & (summary["gap"] == gap) & (summary["variant"] == var)]
                    if len(sel):
                        grid[i, j] = sel.iloc[0][metric]
                        n = int(sel.iloc[0]["n"])
                        ax.text(j, i, f"{grid[i, j]:.2f}\nn={n}", ha="center", va="center", fontsize=9,
                                color="white" if metric == "val_loss_mean" and grid[i, j] < 0.6 * vmax else "black")
            im = ax.imshow(grid, cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
            ax.set_xticks(range(len(gaps)), [f"gap {g}" for g in gaps])
            ax.set_yticks(range(len(NOISES)), [f"noise={n}" for n in NOISES])
            ax.set_title(var)
        fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
        fig.suptitle(f"bio_rotation: {title}")
        fig.savefig(out / fname, dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        written.append(out / fname)

    others = [v for v in variants if v != "rope"]
    fig, axes = plt.subplots(1, max(1, len(others)), figsize=(3.4 * max(1, len(others)) + 1, 3.2), squeeze=False)
    for ax, other in zip(axes[0], others):
        grid = np.full((len(NOISES), len(gaps)), np.nan)
        for i, noise in enumerate(NOISES):
            for j, gap in enumerate(gaps):
                diff, _ = spectral_minus_rope(runs, noise, gap, other)
                if diff.n:
                    grid[i, j] = diff.mean
                    ci = "" if diff.n < 2 else f"\n[{diff.low:.2f}, {diff.high:.2f}]"
                    ax.text(j, i, f"{diff.mean:+.2f}{ci}\nn={diff.n}", ha="center", va="center", fontsize=8)
        lim = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(len(gaps)), [f"gap {g}" for g in gaps])
        ax.set_yticks(range(len(NOISES)), [f"noise={n}" for n in NOISES])
        ax.set_title(f"{other} − rope")
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle("bio_rotation: final val loss difference, paired by seed (blue = lower than rope)")
    fig.savefig(out / "phase_diff.png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return written + [out / "phase_diff.png"]


def write(sources: list[Path], out: Path, rule: Landmarks = Landmarks(), dpi: int = 100) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    runs = load(sources, rule)
    md = ["# bio_rotation phase diagram", "",
          f"From the records in {', '.join(f'`{s}`' for s in sources)} · {len(runs)} completed runs · by "
          "`python -m ropelab.phase`", ""]
    if runs.empty:
        atomic_write_text(out / "phase.md", "\n".join(md + ["No completed bio_rotation records."]) + "\n")
        return out
    summary = summarise(runs)
    gaps = _gap_order(runs["gap"])
    md += [f"Budget: {', '.join(sorted({f'{int(s)} steps' for s in runs['steps']}))} per run. Landmarks: "
           + rule.describe(), "", "A run *stalls* when its loss never leaves the plateau (no onset).", ""]
    verdicts = []
    for noise in NOISES:
        for gap in gaps:
            dl, do = spectral_minus_rope(runs, noise, gap)
            verdicts.append({"noise": noise, "gap": gap, "spectral − rope, val loss": dl.text("{:+.3f}"),
                             "spectral − rope, onset": do.text("{:+.0f}"),
                             "verdict": verdict(summary, runs, noise, gap)})
    md += ["## Verdict per cell", "", markdown_table(pd.DataFrame(verdicts).set_index("noise"), "noise"), ""]
    md += ["## Cells", ""]
    shown = summary.copy()
    shown["val loss"] = [f"{m:.3f} ± {s:.3f} (n={n})" if n > 1 else f"{m:.3f} (n={n})"
                         for m, s, n in zip(shown["val_loss_mean"], shown["val_loss_sd"], shown["n"])]
    shown["val acc %"] = (100 * shown["val_acc_mean"]).round(1)
    shown["locks in"] = [f"{f:.0%}" for f in shown["lockin_fraction"]]
    shown["stalls"] = [f"{f:.0%}" for f in shown["stall_fraction"]]
    shown["median onset"] = shown["onset_median"].map(lambda v: "none" if pd.isna(v) else f"{v:.0f}")
    shown["median lock-in"] = shown["lockin_median"].map(lambda v: "none" if pd.isna(v) else f"{v:.0f}")
    md += [markdown_table(shown.set_index("noise")[["gap", "variant", "val loss", "val acc %", "locks in", "stalls",
                                               "median onset", "median lock-in"]], "noise"), ""]
    figures = heatmaps(summary, runs, out, dpi)
    md += ["## Heat maps", "", *[f"![{p.stem}]({p.name})" for p in figures], ""]
    missing = [f"{noise} × {gap} × {v}" for noise in NOISES for gap in gaps for v in ("rope", "spectral")
               if summary[(summary["noise"] == noise) & (summary["gap"] == gap) & (summary["variant"] == v)].empty]
    if missing:
        md += ["## Not run yet", "", *[f"- {m}" for m in missing], ""]
    atomic_write_text(out / "phase.md", "\n".join(md) + "\n")
    atomic_write_text(out / "phase.csv", runs.to_csv(index=False))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ropelab phase", description=__doc__.split("\n\n")[0])
    p.add_argument("sources", type=Path, nargs="*", default=list(DEFAULT_SOURCES), help="record folders")
    p.add_argument("--out", type=Path, default=Path("results/bio_phase/report"))
    p.add_argument("--dpi", type=int, default=100)
    args = p.parse_args(argv)
    out = write(args.sources, args.out, dpi=args.dpi)
    print(f"phase diagram: {out / 'phase.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
