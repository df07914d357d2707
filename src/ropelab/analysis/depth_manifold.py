"""Depth manifold of Dyck-3 models (Bifocal paper §3.3 / Fig. 3, "manifold collapse"): with RoPE the states of
recursion depths 10 and 11 are said to be nearly the same, while spectral RoPE unrolls depth into a spiral,
⟨v_10, v_11⟩ ≈ 0.

    ropelab depth-manifold SWEEP_OR_RUN [SWEEP_OR_RUN …] --out DIR [--examples 256]

For each completed dyck3 run (``config.yaml`` + ``checkpoints/last.ckpt``) under the given folders it feeds
``--examples`` validation examples (in distribution, depths 1–``depth_max``) and as many of the OOD split (deeper
nesting), both drawn with the run's seed as ``TaskDataModule`` draws them, and takes the residual stream after
every block (``layer`` 1 … L; 0 = the embedded input) at every opening bracket of the prefix, labelled by the depth it opens (the number of brackets open
once it is read). Per layer and split:

* ``cos adjacent`` — the cosine of the mean states of depths d and d + 1, averaged over the adjacent pairs of the
  split; ``centred``: the same after subtracting the mean over depths of the depth means (the raw cosine is mostly
  the component every state shares). ``cos 10–11``: the paper's pair, from the OOD split.
* ``probe`` — a linear probe of depth: ridge regression onto one-hot depth (λ = ``RIDGE`` × the mean eigenvalue of
  the fit states' covariance), argmax; fit on the even-numbered examples of a split and scored on the odd ones
  (held-out examples, not only held-out tokens); ``chance``: the held-out share of the fit set's most frequent depth.
  ``probe ood`` fits and scores on the OOD split the same way; ``transfer``: the in-distribution probe on the OOD
  split's tokens at depths it was fit on.

Writes ``depth_manifold.csv`` (run × layer × split, and the per-depth cosines), ``depth_manifold.md`` (the last
layer per scheme over seeds, 95 % t intervals, differences from ``--reference`` paired by seed) and per scheme
``depth_pca_<scheme>.png`` (the first run of that scheme: PCA of each layer's states, coloured by depth, with the
path of the depth means).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ropelab.analysis.report.tables import markdown_table
from ropelab.analysis.run_folders import finished_runs
from ropelab.analysis.stats import estimate, paired_difference
from ropelab.core.cli import at_least

RIDGE = 1e-2          # ridge strength, relative to the mean eigenvalue of the fit states' covariance
EXAMPLES = 256        # examples per split
PAPER_PAIR = (10, 11)  # the depths whose mean states the paper compares


class DepthManifoldError(ValueError):
    """A run this analysis cannot read; the message is one line."""


# ---------------------------------------------------------------------------------------------- states

def open_depths(inputs: np.ndarray, open_ids: Sequence[int], close_ids: Sequence[int]) -> np.ndarray:
    """(B, T) → (B, T): at every opening bracket the depth it opens (brackets open once it is read), 0 elsewhere.
    Openers occur only in the prefix, so the answer's closers never enter a count."""
    is_open, is_close = np.isin(inputs, open_ids), np.isin(inputs, close_ids)
    height = np.cumsum(is_open.astype(int) - is_close, axis=1)
    return np.where(is_open, height, 0)


@torch.no_grad()
def layer_states(model, idx: torch.Tensor) -> torch.Tensor:
    """idx (B, T) → the residual stream (layers + 1, B, T, C): the embedded input, then after every block."""
    x, ctx, mask = model.inputs(idx)
    states = [x]
    for block in model.blocks:
        x = block(x, model.pos, ctx, mask)
        states.append(x)
    return torch.stack(states).float()


def depth_states(model, task, seed: int, split: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(states (layers + 1, N, C), depth (N,), example index (N,)) at the opening brackets of ``n`` examples."""
    from ropelab.core.data import draw
    from tasks.dyck3 import CLOSE, OPEN

    inputs, _ = draw(task.for_split(split), seed, split, n)
    ids = {t: i for i, t in enumerate(task.vocab)}
    depth = open_depths(inputs, [ids[c] for c in OPEN], [ids[c] for c in CLOSE])
    rows, cols = np.nonzero(depth)
    states = layer_states(model, torch.as_tensor(inputs)).numpy()
    return states[:, rows, cols], depth[rows, cols], rows


# ---------------------------------------------------------------------------------------------- measures

def depth_means(states: np.ndarray, depth: np.ndarray) -> dict[int, np.ndarray]:
    return {int(d): states[depth == d].mean(axis=0) for d in np.unique(depth)}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    denominator = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denominator) if denominator > 0 else math.nan


def adjacent_cosines(means: dict[int, np.ndarray], centred: bool) -> dict[int, float]:
    """d → cos(v_d, v_{d+1}) for every d with both means; ``centred``: after subtracting the mean of the means."""
    centre = np.mean(list(means.values()), axis=0) if centred else 0.0
    return {d: cosine(means[d] - centre, means[d + 1] - centre) for d in sorted(means) if d + 1 in means}


def ridge_fit(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(centre, weights, bias) of a ridge regression of y (N, K) on x (N, C), x centred by its fit mean."""
    centre = x.mean(axis=0)
    xc = (x - centre).astype(np.float64)
    gram = xc.T @ xc / len(xc)
    lam = ridge * np.trace(gram) / gram.shape[0]
    weights = np.linalg.solve(gram + lam * np.eye(gram.shape[0]), xc.T @ (y - y.mean(axis=0)) / len(xc))
    return centre, weights, y.mean(axis=0)


class DepthProbe:
    """Linear probe: ridge regression onto one-hot depth, argmax over the depths it was fit on."""

    def __init__(self, states: np.ndarray, depth: np.ndarray, ridge: float = RIDGE):
        self.classes = np.unique(depth)
        onehot = (depth[:, None] == self.classes[None, :]).astype(np.float64)
        self.centre, self.weights, self.bias = ridge_fit(states, onehot, ridge)

    def predict(self, states: np.ndarray) -> np.ndarray:
        return self.classes[np.argmax((states - self.centre) @ self.weights + self.bias, axis=1)]

    def accuracy(self, states: np.ndarray, depth: np.ndarray) -> float:
        return float((self.predict(states) == depth).mean()) if len(depth) else math.nan


def halves(example: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fit, held-out) masks: even- and odd-numbered examples."""
    return example % 2 == 0, example % 2 == 1


def chance(depth_fit: np.ndarray, depth_held: np.ndarray) -> float:
    values, counts = np.unique(depth_fit, return_counts=True)
    return float((depth_held == values[np.argmax(counts)]).mean())


def layer_measures(split_data: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], layer: int,
                   trained_max: int) -> list[dict[str, Any]]:
    """Rows (one per split) of one layer's measures; ``split_data``: split → depth_states' triple."""
    rows, probes = [], {}
    for split, (states, depth, example) in split_data.items():
        x = states[layer]
        fit, held = halves(example)
        probe = probes[split] = DepthProbe(x[fit], depth[fit])
        means = depth_means(x, depth)
        raw, centred = adjacent_cosines(means, False), adjacent_cosines(means, True)
        a, b = PAPER_PAIR
        rows.append({"layer": layer, "split": split, "states": len(depth), "depths": f"{depth.min()}–{depth.max()}",
                     "cos_adjacent": float(np.mean(list(raw.values()))),
                     "cos_adjacent_centred": float(np.mean(list(centred.values()))),
                     "cos_10_11": raw.get(a, math.nan) if b in means else math.nan,
                     "cos_10_11_centred": centred.get(a, math.nan) if b in means else math.nan,
                     "probe": probe.accuracy(x[held], depth[held]), "chance": chance(depth[fit], depth[held]),
                     "_raw": raw, "_centred": centred})
    if "id" in probes and "ood" in split_data:
        states, depth, _ = split_data["ood"]
        known = depth <= trained_max
        rows[-1]["transfer"] = probes["id"].accuracy(states[layer][known], depth[known])
    return rows


# ---------------------------------------------------------------------------------------------- runs

def analyse_run(run_dir: str | Path, examples: int, checkpoint: str, planned: int | None = None) -> dict[str, Any]:
    import tasks
    from ropelab.analysis.attention_maps import load_run_model

    run_dir = Path(run_dir)
    model, task, cfg = load_run_model(run_dir, checkpoint)
    if cfg["task"]["name"] != "dyck3":
        raise DepthManifoldError(f"{run_dir}: task={cfg['task']['name']}; depth_manifold reads dyck3 runs")
    model = model.float()
    _, ood_task = tasks.build_with_ood(cfg["task"])
    seed = int(cfg.get("seed", 0))
    split_data = {"id": depth_states(model, task, seed, "val", examples),
                  "ood": depth_states(model, ood_task, seed, "ood", examples)}
    rows = []
    for layer in range(split_data["id"][0].shape[0]):
        rows += layer_measures(split_data, layer, task.depth_max)
    return {"run": str(run_dir), "scheme": cfg["pos"]["name"], "seed": seed, "planned": planned,
            "steps": int(cfg["trainer"]["max_steps"]), "rows": rows, "_states": split_data}


def run_table(results: Sequence[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{"run": r["run"], "scheme": r["scheme"], "seed": r["seed"], "planned": r["planned"],
                          "steps": r["steps"],
                          **{k: v for k, v in row.items() if not k.startswith("_")}}
                         for r in results for row in r["rows"]])


def per_depth_table(results: Sequence[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{"run": r["run"], "scheme": r["scheme"], "seed": r["seed"], "layer": row["layer"],
                          "split": row["split"], "depth": d, "cos_next": row["_raw"][d],
                          "cos_next_centred": row["_centred"][d]}
                         for r in results for row in r["rows"] for d in row["_raw"]])


HEADLINE = {  # column of the summary table → (split, measure in run_table)
    "cos adjacent, centred (id)": ("id", "cos_adjacent_centred"),
    "cos adjacent, centred (ood)": ("ood", "cos_adjacent_centred"),
    "cos 10–11 (ood)": ("ood", "cos_10_11"),
    "cos 10–11, centred (ood)": ("ood", "cos_10_11_centred"),
    "probe (id)": ("id", "probe"),
    "probe (ood)": ("ood", "probe"),
    "transfer id → ood": ("ood", "transfer"),
}


def summary_tables(table: pd.DataFrame, reference: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per scheme: each headline measure at the last layer, mean [95 % CI] (n); per scheme ≠ reference: the
    difference from the reference, paired by seed)."""
    last = table[table["layer"] == table["layer"].max()]
    schemes = list(dict.fromkeys(last["scheme"]))

    def per_seed(scheme: str, split: str, measure: str) -> dict[int, float]:
        here = last[(last["scheme"] == scheme) & (last["split"] == split)]
        return dict(zip(here["seed"], here[measure].astype(float)))

    cells, diffs = [], []
    for scheme in schemes:
        row = {"scheme": scheme, "steps": int(last[last["scheme"] == scheme]["steps"].iloc[0])}
        for title, (split, measure) in HEADLINE.items():
            row[title] = estimate(per_seed(scheme, split, measure).values()).text("{:.3f}")
        chance = estimate(per_seed(scheme, "id", "chance").values())
        row["chance (id)"] = f"{chance.mean:.3f}"
        cells.append(row)
        if scheme != reference and reference in schemes:
            drow = {"pair": f"{scheme} − {reference}"}
            for title, (split, measure) in HEADLINE.items():
                drow[title] = paired_difference(per_seed(scheme, split, measure),
                                                per_seed(reference, split, measure)).text("{:+.3f}")
            diffs.append(drow)
    return pd.DataFrame(cells).set_index("scheme"), pd.DataFrame(diffs).set_index("pair") if diffs else pd.DataFrame()


def write_md(table: pd.DataFrame, reference: str, examples: int, path: Path) -> str:
    cells, diffs = summary_tables(table, reference)
    layer = int(table["layer"].max())
    lines = ["# Depth manifold (Dyck-3)", "",
             f"Residual stream after the last block (layer {layer}) at every opening bracket, labelled by the depth "
             f"it opens; {examples} validation (id) and {examples} OOD examples per run. cos adjacent: mean cosine of "
             "adjacent depths' mean states (centred: after subtracting the mean of the depth means); cos 10–11: the "
             "paper's pair, OOD split. probe: accuracy of a ridge one-hot depth probe fit on even-numbered examples, "
             "scored on the odd ones; transfer: the id probe on OOD tokens at trained depths. Mean [95 % t interval] "
             "(n seeds); every layer in depth_manifold.csv.", "", markdown_table(cells, "scheme"), ""]
    if not diffs.empty:
        lines += [f"Differences from {reference}, paired by seed:", "", markdown_table(diffs, "pair"), ""]
    lines += ["The paper's claims (last layer, cos 10–11 centred and probe, OOD, each scheme against rope) are declared "
              "in conf/claims/bifocal.yaml and decided from depth_manifold.csv by `python -m ropelab.claims`.", ""]
    text = "\n".join(lines)
    path.write_text(text)
    return text


def pca_2d(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(centre, top-2 principal axes (C, 2), explained-variance shares (2,)) of the rows of x."""
    centre = x.mean(axis=0)
    _, s, vt = np.linalg.svd(x - centre, full_matrices=False)
    return centre, vt[:2].T, (s[:2] ** 2) / (s ** 2).sum()


def plot_scheme(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = result["_states"]
    layers = data["id"][0].shape[0]
    fig, axes = plt.subplots(1, layers, figsize=(3.3 * layers, 3.3), squeeze=False, layout="constrained")
    top = int(max(d[1].max() for d in data.values()))
    for layer, ax in enumerate(axes[0]):
        x = np.concatenate([data[s][0][layer] for s in data])
        depth = np.concatenate([data[s][1] for s in data])
        centre, axes2, share = pca_2d(x)
        xy = (x - centre) @ axes2
        points = ax.scatter(xy[:, 0], xy[:, 1], c=depth, cmap="viridis", vmin=1, vmax=top, s=3, alpha=0.5, lw=0)
        means = depth_means(xy, depth)
        path_xy = np.array([means[d] for d in sorted(means)])
        ax.plot(path_xy[:, 0], path_xy[:, 1], color="k", lw=1, marker="o", ms=2.5)
        ax.set_title(f"layer {layer}" + (" (embedding)" if layer == 0 else ""), fontsize=8)
        ax.set_xlabel(f"PC1 ({share[0]:.0%})", fontsize=7)
        ax.set_ylabel(f"PC2 ({share[1]:.0%})", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.colorbar(points, ax=axes[0].tolist(), label="depth opened", shrink=0.8)
    fig.suptitle(f"{result['scheme']} · seed {result['seed']} · {result['steps']} steps: states at opening brackets, "
                 "id + OOD (black: depth means)", fontsize=8)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ropelab depth-manifold", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="dyck3 sweep or run folders (config.yaml + checkpoints/last.ckpt)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--examples", type=at_least(2), default=EXAMPLES,
                        help="examples per split (at least 2: the probe needs a fit and a held-out example)")
    parser.add_argument("--checkpoint", default="checkpoints/last.ckpt", help="checkpoint path inside each run")
    parser.add_argument("--reference", default="rope", help="the scheme the others are compared with")
    args = parser.parse_args(argv)
    try:
        found = [(Path(run), None) for run in args.runs] if args.checkpoint != "checkpoints/last.ckpt" \
            else finished_runs(args.runs)
        if not found:
            raise DepthManifoldError(f"no completed run with checkpoints/last.ckpt under {', '.join(args.runs)}")
        results = [analyse_run(run, args.examples, args.checkpoint, planned) for run, planned in found]
    except (DepthManifoldError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = run_table(results)
    table.to_csv(out / "depth_manifold.csv", index=False, float_format="%.6g")
    per_depth_table(results).to_csv(out / "depth_manifold_per_depth.csv", index=False, float_format="%.6g")
    print(write_md(table, args.reference, args.examples, out / "depth_manifold.md"), end="")
    for scheme in dict.fromkeys(r["scheme"] for r in results):
        plot_scheme(next(r for r in results if r["scheme"] == scheme), out / f"depth_pca_{scheme}.png")
    print(f"wrote {out / 'depth_manifold.md'}, depth_manifold.csv, depth_manifold_per_depth.csv, depth_pca_*.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
