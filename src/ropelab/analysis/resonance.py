"""Resonance of learned frequencies (Bifocal paper §2.2, §5.3 / Fig. 5): does training move Ω so that cos(ω·N) ≈ 1
at the distances N the task must bridge (the "harmonic bridge" between a motif and its reverse complement)?

    ropelab resonance results/bifocal_table1 results/bio_phase [--out results/resonance]

Reads only records: each run folder's ``config.yaml`` and ``positional_trace.npz`` (Ω at step 0 and at every
validation; ``omega`` of spectral and of bifocal's spectral heads, shape (heads, pairs)). Declared before looking:

* distances N the task bridges, from the run's own config: bio_rotation — the query that predicts answer token j
  sits 1 + 2j + g tokens after the motif token it reverse-complements (g ∈ [gap_min, gap_max], j < motif_len,
  each (g, j) equally likely); dyck3 — the query that predicts closer j sits this far after the open bracket it
  closes, read off ``DISTANCE_EXAMPLES`` validation examples of the run's seed (the empirical distribution).
* "near 1": cos(ω·N) ≥ ``THRESHOLD`` = 0.9 (ω·N within ±0.451 rad of a whole number of turns). A pair counts at a
  distance only once it has turned at least half a cycle there (ω·N ≥ π): slower pairs sit near cos = 1 at every
  distance without any resonance. The share is over (pair, distance) cases, distances weighted by how often the
  task asks for them: share = Σ w_N [ωN ≥ π][cos ωN ≥ τ] / Σ w_N [ωN ≥ π]. A phase uniform on the circle gives
  arccos(τ)/π = 0.144.
* null: a matched random spectrum — as many frequencies as the run's final Ω, log-uniform between its smallest and
  largest, ``--draws`` times (seeded); p = (1 + #{null share ≥ final share}) / (1 + draws), one-sided.

Per group of runs (sweep folder, task, scheme and the settings that tell cells apart) over seeds: the final share,
the final − initial share paired by seed (95 % t interval), the null's mean, and a pooled p (the seeds' mean final
share against the mean of one null draw per seed, ``--draws`` times). Writes ``resonance.csv`` (one row per run),
``resonance.md`` (the per-group table) and ``resonance.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ropelab.analysis.report.records import Run, load_run, load_trace
from ropelab.core.cli import at_least
from ropelab.core.record import run_dirs
from ropelab.analysis.report.tables import markdown_table
from ropelab.analysis.stats import estimate, paired_difference

THRESHOLD = 0.9          # cos(ω·N) at or above this is "near 1"
MIN_ANGLE = math.pi      # a pair counts at distance N once ω·N has turned this far
DRAWS = 2000             # random spectra per run
DISTANCE_EXAMPLES = 256  # dyck3: validation examples the distances are read from


class ResonanceError(ValueError):
    """Input this analysis cannot read; the message is one line."""


# ---------------------------------------------------------------------------------------------- distances

def bio_rotation_distances(task_cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(distances, weights): every query → motif-token distance g + 1 + 2j of the config's gap range, equally likely."""
    m, lo, hi = int(task_cfg["motif_len"]), int(task_cfg["gap_min"]), int(task_cfg["gap_max"])
    gaps, j = np.meshgrid(np.arange(lo, hi + 1), np.arange(m), indexing="ij")
    values, counts = np.unique(gaps + 1 + 2 * j, return_counts=True)
    return values.astype(float), counts / counts.sum()


def closing_distances(inputs: np.ndarray, targets: np.ndarray, open_ids: Sequence[int], close_ids: Sequence[int]
                      ) -> np.ndarray:
    """Per answer token of each example (loss positions of ``targets``): the query position minus the position of
    the open bracket it closes (the prefix's unclosed brackets, innermost first)."""
    out = []
    for row_in, row_t in zip(inputs, targets):
        answer = np.flatnonzero(row_t != -100)
        stack = []
        for pos, token in enumerate(row_in[: answer[0]]):  # the prefix, up to the separator
            if token in open_ids:
                stack.append(pos)
            elif token in close_ids:
                stack.pop()
        for j, query in enumerate(answer):
            out.append(query - stack[-1 - j])
    return np.asarray(out, dtype=float)


def dyck3_distances(cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    import tasks
    from ropelab.core.data import draw
    from tasks.dyck3 import CLOSE, OPEN

    task = tasks.from_config(cfg["task"])
    inputs, targets = draw(task, int(cfg.get("seed", 0)), "val", DISTANCE_EXAMPLES)
    ids = {t: i for i, t in enumerate(task.vocab)}
    values, counts = np.unique(closing_distances(inputs, targets, [ids[c] for c in OPEN], [ids[c] for c in CLOSE]),
                               return_counts=True)
    return values, counts / counts.sum()


BRIDGES: dict[str, Callable[[dict[str, Any]], tuple[np.ndarray, np.ndarray]]] = {
    "bio_rotation": lambda cfg: bio_rotation_distances(cfg["task"]),
    "dyck3": dyck3_distances,
}


# ---------------------------------------------------------------------------------------------- the share

def resonance_share(omega: np.ndarray, distances: np.ndarray, weights: np.ndarray,
                    threshold: float = THRESHOLD) -> float:
    """Weighted share of (pair, distance) cases with cos(ω·N) ≥ threshold among those with ω·N ≥ π (NaN: none).
    ``omega``: any shape (flattened), ``distances``/``weights``: (n,)."""
    angle = np.abs(np.asarray(omega, dtype=np.float64).reshape(-1, 1)) * np.asarray(distances, dtype=np.float64)
    counted = angle >= MIN_ANGLE
    w = np.broadcast_to(np.asarray(weights, dtype=np.float64), angle.shape)
    total = (w * counted).sum()
    return float((w * (counted & (np.cos(angle) >= threshold))).sum() / total) if total > 0 else math.nan


def random_spectra(omega: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(draws, n) frequencies log-uniform between the smallest and largest |ω| of ``omega`` (n = its size)."""
    w = np.abs(np.asarray(omega, dtype=np.float64).ravel())
    lo, hi = np.log(w.min()), np.log(w.max())
    return np.exp(rng.uniform(lo, hi, size=(draws, w.size)))


def null_shares(omega: np.ndarray, distances: np.ndarray, weights: np.ndarray, draws: int, seed: int,
                threshold: float = THRESHOLD) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([resonance_share(s, distances, weights, threshold) for s in random_spectra(omega, draws, rng)])


def finite_mean(values: np.ndarray, axis=None):
    """Mean over the finite values (NaN where there are none, without numpy's empty-slice warning)."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    count = finite.sum(axis=axis)
    total = np.where(finite, values, 0.0).sum(axis=axis)
    return np.divide(total, count, out=np.full_like(total, np.nan, dtype=np.float64), where=count > 0)


def one_sided_p(observed: float, null: np.ndarray) -> float:
    null = null[np.isfinite(null)]
    return float((1 + (null >= observed).sum()) / (1 + len(null)))


# ---------------------------------------------------------------------------------------------- runs

def cell_label(run: Run, sweep: str) -> str:
    c = run.config
    parts = [sweep, c.get("task.name"), c.get("pos.name")]
    if c.get("task.name") == "bio_rotation":
        parts += [f"gap {c.get('task.gap_min')}–{c.get('task.gap_max')}", f"noise {c.get('task.noise')}"]
    if float(c.get("optim.pos_lr_scale", 1.0) or 1.0) != 1.0:
        parts.append(f"pos lr ×{c.get('optim.pos_lr_scale'):g}")
    return " · ".join(str(p) for p in parts)


def gather(paths: Sequence[str | Path]) -> tuple[list[tuple[Run, str]], list[str]]:
    """(usable runs with their sweep name, one line per run left out and why)."""
    usable, skipped = [], []
    for path in paths:
        path = Path(path)
        if not path.is_dir():
            raise ResonanceError(f"{path} is not a folder")
        for run_dir in run_dirs(path):
            run = load_run(run_dir, path)
            task = run.config.get("task.name")
            if run.status != "completed":
                skipped.append(f"{run_dir}: status {run.status}")
            elif task not in BRIDGES:
                skipped.append(f"{run_dir}: task {task} (resonance reads {', '.join(BRIDGES)})")
            elif (trace := load_trace(run)) is None or "omega" not in trace:
                skipped.append(f"{run_dir}: no learned Ω in positional_trace.npz (pos={run.config.get('pos.name')})")
            else:
                usable.append((run, path.name if path != run_dir else run_dir.parent.name))
    return usable, skipped


def analyse_run(run: Run, sweep: str, draws: int, threshold: float = THRESHOLD) -> dict[str, Any]:
    cfg = run.record.saved_config
    trace = load_trace(run)
    omega = np.asarray(trace["omega"], dtype=np.float64)  # (validations + 1, heads, pairs)
    distances, weights = BRIDGES[cfg["task"]["name"]](cfg)
    seed = int(cfg.get("seed", 0))
    null = null_shares(omega[-1], distances, weights, draws, seed, threshold)
    final = resonance_share(omega[-1], distances, weights, threshold)
    return {"cell": cell_label(run, sweep), "run": str(run.path), "seed": seed, "steps": int(trace["steps"][-1]),
            "pairs": int(omega[-1].size), "distance_min": float(distances.min()),
            "distance_max": float(distances.max()),
            "share_init": resonance_share(omega[0], distances, weights, threshold), "share_final": final,
            "null_mean": float(finite_mean(null)), "p_vs_null": one_sided_p(final, null),
            "omega_drift": float(np.median(np.abs(omega[-1] / omega[0] - 1))), "_null": null}


def pooled_p(rows: list[dict[str, Any]]) -> float:
    """The seeds' mean final share against the mean over seeds of null draw i, for every i."""
    null_means = finite_mean(np.stack([r["_null"] for r in rows]), axis=0)
    return one_sided_p(float(np.mean([r["share_final"] for r in rows])), null_means)


def summarise(rows: list[dict[str, Any]]) -> pd.DataFrame:
    table = []
    for cell in dict.fromkeys(r["cell"] for r in rows):
        here = [r for r in rows if r["cell"] == cell]
        diff = paired_difference({r["seed"]: r["share_final"] for r in here},
                                 {r["seed"]: r["share_init"] for r in here})
        table.append({"cell": cell, "n": len(here), "steps": here[0]["steps"],
                      "distances": f"{here[0]['distance_min']:g}–{here[0]['distance_max']:g}",
                      "share at init": estimate(r["share_init"] for r in here).text("{:.3f}"),
                      "share at end": estimate(r["share_final"] for r in here).text("{:.3f}"),
                      "end − init (paired)": diff.text("{:+.3f}"),
                      "random spectrum": f"{np.mean([r['null_mean'] for r in here]):.3f}",
                      "p (end ≥ random)": f"{pooled_p(here):.3g}",
                      "median |Ω/Ω₀ − 1|": f"{np.median([r['omega_drift'] for r in here]):.2g}"})
    return pd.DataFrame(table).set_index("cell")


def write_md(table: pd.DataFrame, skipped: list[str], draws: int, threshold: float, path: Path) -> str:
    lines = ["# Resonance of learned frequencies", "",
             f"Share of (pair, bridged distance) cases with cos(ω·N) ≥ {threshold:g} among those with ω·N ≥ π, at "
             f"init (step 0) and at the end of training; per cell mean [95 % t interval] (n seeds); end − init "
             f"paired by seed; random spectrum: mean share of {draws} log-uniform spectra per run over the final Ω's "
             f"range; p: one-sided, the seeds' mean final share against the null's mean over seeds. A uniform phase "
             f"gives {math.acos(threshold) / math.pi:.3f}. The paper's claims (end > init, end > random, per cell) are "
             f"declared in conf/claims/bifocal.yaml and decided from resonance.csv by `python -m ropelab.claims`.",
             "", markdown_table(table, "cell"), ""]
    reasons = pd.Series([s.partition(": ")[2] for s in skipped]).value_counts()
    if len(reasons):
        lines += [f"Runs left out ({len(skipped)}):", ""] + [f"- {n} × {why}" for why, n in reasons.items()] + [""]
    text = "\n".join(lines)
    path.write_text(text)
    return text


def plot(rows: list[dict[str, Any]], threshold: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys(r["cell"] for r in rows))
    fig, ax = plt.subplots(figsize=(5.5, 0.45 * len(cells) + 1.6))
    for y, cell in enumerate(cells):
        here = [r for r in rows if r["cell"] == cell]
        null = np.concatenate([r["_null"] for r in here])
        lo, hi = np.nanpercentile(null, [2.5, 97.5])
        ax.plot([lo, hi], [y, y], color="0.8", lw=6, solid_capstyle="butt",
                label="random spectrum 95 %" if y == 0 else None)
        ax.scatter([r["share_init"] for r in here], [y - 0.12] * len(here), s=14, color="0.4", marker="o",
                   label="init" if y == 0 else None)
        ax.scatter([r["share_final"] for r in here], [y + 0.12] * len(here), s=18, color="tab:red", marker="D",
                   label="end" if y == 0 else None)
    ax.set_yticks(range(len(cells)), cells, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"share of rotating (pair, distance) cases with cos(ω·N) ≥ {threshold:g}")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ropelab resonance", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="sweep or run folders with config.yaml and positional_trace.npz")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--draws", type=at_least(1), default=DRAWS, help="random spectra per run")
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="cos(ω·N) at or above this is near 1")
    args = parser.parse_args(argv)
    if not -1 < args.threshold < 1:
        print(f"error: --threshold={args.threshold} must lie in (-1, 1)", file=sys.stderr)
        return 2
    try:
        usable, skipped = gather(args.paths)
        if not usable:
            raise ResonanceError(f"no completed {' or '.join(BRIDGES)} run with a learned Ω under "
                                 f"{', '.join(args.paths)}")
    except ResonanceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = [analyse_run(run, sweep, args.draws, args.threshold) for run, sweep in usable]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]).to_csv(
        out / "resonance.csv", index=False, float_format="%.6g")
    text = write_md(summarise(rows), skipped, args.draws, args.threshold, out / "resonance.md")
    print(text, end="")
    plot(rows, args.threshold, out / "resonance.png")
    print(f"wrote {out / 'resonance.md'}, resonance.csv, resonance.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
