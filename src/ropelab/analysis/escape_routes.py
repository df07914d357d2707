"""Escape routes, measured (momentum paper §3.2–3.3): momentum perturbs rotary pair i by ‖I − R_θ(−1)‖ = 2|sin(θ/2)|,
large for high frequencies and ≈ θ for low ones, so as γ grows a model is said to move its attention onto the
low-frequency (stable) pairs — fewer such pairs (single-frequency, band-pass profiles) leave fewer escape routes.

    ropelab escape-routes SWEEP_OR_RUN [SWEEP_OR_RUN …] --out DIR [--examples 256]

For each completed rope run (``config.yaml`` + ``checkpoints/last.ckpt``) it feeds ``--examples`` validation
examples of the run's seed and, at every layer, splits the attention logit q·k of every causal (query, key) pair of
non-padding tokens into its rotary pairs: c_i = q_i·k_i + q_{i+D/2}·k_{i+D/2} (the rotate_half layout), Σ_i c_i = q·k.
A pair's *energy share* is Σ c_i² / Σ_j Σ c_j² over examples, heads and (query, key) pairs, per layer, then averaged
over layers. Two readings of q and k:

* ``weights`` (the declared one) — after the rotation, before momentum: where the model's own projections put the
  logit. Momentum's filter amplifies high-frequency pairs by itself, so only this reading can show a model moving
  away from them.
* ``scored`` — after momentum, the q and k the softmax sees (captured from the attention block itself).

Per run: ``low share``, the energy share of the lowest-frequency third of the pairs (⌊P/3⌋ of P; NaN for a
single-frequency profile, whose pairs share one frequency), and ``exposure`` = Σ_i share_i · 2|sin(θ_i/2)|, the
momentum perturbation the logit energy sits on (escaping lowers it; constant by construction for one frequency).
Per profile and γ over seeds: mean [95 % t interval] (n), and each γ minus γ = 0 paired by seed; per profile ≠
geometric at the largest γ: its relative exposure change minus geometric's, paired by seed.

Writes ``escape_routes.csv`` (run × layer × pair: frequency, both shares), ``escape_routes_runs.csv`` (run-level
measures), ``escape_routes.md`` and ``escape_routes.png`` (energy share against frequency, a panel per profile, a
line per γ) under ``--out``.
"""

from __future__ import annotations

import argparse
import math
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
import torch

from ropelab.analysis.run_folders import finished_runs
from ropelab.analysis.report.tables import markdown_table
from ropelab.analysis.stats import estimate, paired_difference
from ropelab.core.cli import at_least

EXAMPLES = 256
CHUNK = 64       # examples per forward
READINGS = ("weights", "scored")
SUPPORTED = ("rope",)


class EscapeRoutesError(ValueError):
    """Input this analysis cannot read; the message is one line."""


# ---------------------------------------------------------------------------------------------- q and k

@contextmanager
def recorded_qk(model) -> Iterator[dict[str, list[tuple[torch.Tensor, torch.Tensor]]]]:
    """While active, every attention block's (q, k) is recorded, in block order: ``weights`` as the scheme's
    transform returns them, ``scored`` as the block scores them (after momentum). Recorded at the two calls rather
    than recomputed, so whatever momentum option the block applies is the one measured."""
    from ropelab.core import model as model_module

    recorded: dict[str, list] = {"weights": [], "scored": []}
    pos, transform, weights_of = model.pos, model.pos.transform_qk, model_module.attention_weights

    def transform_qk(q, k, ctx):
        q, k = transform(q, k, ctx)
        recorded["weights"].append((q, k))
        return q, k

    def attention_weights(q, k, mask, scale):
        recorded["scored"].append((q, k))
        return weights_of(q, k, mask, scale)

    pos.transform_qk = transform_qk
    model_module.attention_weights = attention_weights
    try:
        yield recorded
    finally:
        del pos.transform_qk  # the instance attribute; the class's method shows again
        model_module.attention_weights = weights_of


def pair_energy(q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """q, k (B, H, T, D) → (D/2,): Σ over examples, heads and causal (query, key) pairs of kept tokens of c_i², with
    c_i = q_i·k_i + q_{i+D/2}·k_{i+D/2} the logit's part in rotary pair i. ``keep``: (B, T) bool."""
    half = q.shape[-1] // 2
    q, k = q.double(), k.double()
    c = (torch.einsum("bhtp,bhsp->bhpts", q[..., :half], k[..., :half])
         + torch.einsum("bhtp,bhsp->bhpts", q[..., half:], k[..., half:]))
    T = q.shape[-2]
    mask = torch.ones(T, T, dtype=torch.bool).tril() & keep[:, :, None] & keep[:, None, :]  # (B, T, T)
    return (c.square() * mask[:, None, None]).sum(dim=(0, 1, 3, 4))


def energies(model, inputs: np.ndarray) -> dict[str, np.ndarray]:
    """reading → (layers, D/2) energy per rotary pair over ``inputs`` (N, T), in chunks of ``CHUNK``."""
    from ropelab.core.locality import attention_weights

    totals: dict[str, np.ndarray] = {}
    for start in range(0, len(inputs), CHUNK):
        idx = torch.as_tensor(inputs[start: start + CHUNK])
        with recorded_qk(model) as recorded:
            attention_weights(model, idx)  # runs every block with explicit scores
        keep = idx != 0
        for reading in READINGS:
            e = torch.stack([pair_energy(q, k, keep) for q, k in recorded[reading]]).numpy()
            totals[reading] = totals.get(reading, 0) + e
    return totals


# ---------------------------------------------------------------------------------------------- measures

def shares(energy: np.ndarray) -> np.ndarray:
    """(layers, P) energies → (P,): each layer's shares, averaged over layers."""
    return (energy / energy.sum(axis=1, keepdims=True)).mean(axis=0)


def low_share(share: np.ndarray, freq: np.ndarray) -> float:
    """Share of the ⌊P/3⌋ lowest-frequency pairs; NaN when the frequencies do not order the pairs (all equal)."""
    if np.allclose(freq, freq[0], rtol=1e-6):
        return math.nan
    return float(share[np.argsort(freq)[: max(1, len(freq) // 3)]].sum())


def perturbation(freq: np.ndarray) -> np.ndarray:
    """‖I − R_θ(−1)‖ = 2|sin(θ/2)| per pair (the paper's §3.2)."""
    return 2 * np.abs(np.sin(np.asarray(freq, dtype=np.float64) / 2))


def exposure(share: np.ndarray, freq: np.ndarray) -> float:
    return float(share @ perturbation(freq))


# ---------------------------------------------------------------------------------------------- runs

def analyse_run(run_dir: Path, examples: int, planned: int | None = None) -> dict[str, Any]:
    from ropelab.analysis.attention_maps import load_run_model
    from ropelab.analysis.freq_usage import frequencies
    from ropelab.core.data import draw

    model, task, cfg = load_run_model(run_dir)
    if model.pos.name not in SUPPORTED:
        raise EscapeRoutesError(f"{run_dir}: pos={model.pos.name}; escape_routes reads {', '.join(SUPPORTED)} runs "
                                "(fixed rotary frequencies)")
    inputs, _ = draw(task.for_split("val"), int(cfg.get("seed", 0)), "val", examples)
    freq = frequencies(model.pos)
    energy = energies(model.float(), inputs)
    gamma = (cfg["pos"].get("momentum") or {}).get("gamma", 0.0)
    if not isinstance(gamma, (int, float)):
        raise EscapeRoutesError(f"{run_dir}: pos.momentum.gamma={gamma}; escape_routes compares runs of one constant γ")
    row = {"run": str(run_dir), "task": cfg["task"]["name"], "profile": cfg["pos"].get("freqs", "geometric"),
           "gamma": float(gamma), "seed": int(cfg.get("seed", 0)),
           "steps": int(cfg["trainer"]["max_steps"]), "examples": examples, "planned": planned}
    for reading in READINGS:
        s = shares(energy[reading])
        row[f"low_share_{reading}"] = low_share(s, freq)
        row[f"exposure_{reading}"] = exposure(s, freq)
    return {"row": row, "freq": freq, "energy": energy}


def pair_table(results: Sequence[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in results:
        per_layer = {reading: r["energy"][reading] / r["energy"][reading].sum(axis=1, keepdims=True)
                     for reading in READINGS}
        for layer in range(per_layer["weights"].shape[0]):
            for i, f in enumerate(r["freq"]):
                rows.append({"run": r["row"]["run"], "profile": r["row"]["profile"], "gamma": r["row"]["gamma"],
                             "seed": r["row"]["seed"], "layer": layer, "pair": i, "freq": f,
                             **{f"share_{reading}": per_layer[reading][layer, i] for reading in READINGS}})
    return pd.DataFrame(rows)


MEASURES = {"low third (weights)": "low_share_weights", "exposure (weights)": "exposure_weights",
            "low third (scored)": "low_share_scored", "exposure (scored)": "exposure_scored"}


def _by_seed(runs: pd.DataFrame, profile: str, gamma: float, measure: str) -> dict[int, float]:
    here = runs[(runs["profile"] == profile) & (runs["gamma"] == gamma)]
    return dict(zip(here["seed"], here[measure].astype(float)))


def relative_change(runs: pd.DataFrame, profile: str, gamma: float, measure: str) -> dict[int, float]:
    """Per seed: measure at γ over measure at γ = 0, minus 1."""
    at, base = _by_seed(runs, profile, gamma, measure), _by_seed(runs, profile, 0.0, measure)
    return {s: at[s] / base[s] - 1 for s in at if s in base and base[s] > 0}


def tables(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(per profile × γ: each measure over seeds; per profile × γ > 0: γ − 0 paired by seed; per profile ≠
    geometric at the largest γ: its relative exposure change minus geometric's, paired by seed)."""
    cells, diffs, profiles = [], [], []
    for profile in sorted(runs["profile"].unique(), key=lambda p: (p != "geometric", p)):
        gammas = sorted(runs[runs["profile"] == profile]["gamma"].unique())
        for gamma in gammas:
            cell = {"profile": profile, "γ": f"{gamma:g}"}
            for title, measure in MEASURES.items():
                cell[title] = estimate(_by_seed(runs, profile, gamma, measure).values()).text("{:.3f}")
            cells.append(cell)
            if gamma > 0 and 0.0 in gammas:
                diff = {"profile": profile, "γ − 0": f"{gamma:g} − 0"}
                for title, measure in MEASURES.items():
                    diff[title] = paired_difference(_by_seed(runs, profile, gamma, measure),
                                                    _by_seed(runs, profile, 0.0, measure)).text("{:+.3f}")
                diff["exposure (weights), relative"] = estimate(
                    relative_change(runs, profile, gamma, "exposure_weights").values()).text("{:+.3f}")
                diffs.append(diff)
    top = runs["gamma"].max()
    if "geometric" in set(runs["profile"]) and top > 0:
        reference = relative_change(runs, "geometric", top, "exposure_weights")
        for profile in sorted(set(runs["profile"]) - {"geometric"}):
            mine = relative_change(runs, profile, top, "exposure_weights")
            if mine:
                change = paired_difference(mine, reference).text("{:+.3f}")
                profiles.append({"profile": f"{profile} − geometric", "γ": f"{top:g}",
                                 "relative exposure change (weights)": change})
    return (pd.DataFrame(cells).set_index("profile"), pd.DataFrame(diffs).set_index("profile"),
            pd.DataFrame(profiles).set_index("profile") if profiles else pd.DataFrame())


def write_md(runs: pd.DataFrame, examples: int, path: Path) -> str:
    cells, diffs, profiles = tables(runs)
    lines = ["# Escape routes", "",
             f"Energy share of each rotary pair in the attention logits (Σ c_i² over causal pairs of {examples} "
             "validation examples, per layer, averaged over layers). low third: the share of the ⌊P/3⌋ "
             "lowest-frequency pairs (– for one frequency); exposure: Σ share_i · 2|sin(θ_i/2)|. weights: q, k after "
             "the rotation, before momentum; scored: after momentum. Mean [95 % t interval] (n seeds).", "",
             markdown_table(cells, "profile"), ""]
    if not diffs.empty:
        lines += ["Against γ = 0, paired by seed (relative: exposure at γ over exposure at 0, minus 1):", "",
                  markdown_table(diffs, "profile"), ""]
    if not profiles.empty:
        lines += ["Relative exposure change at the largest γ, each profile minus geometric, paired by seed (> 0: the "
                  "profile's exposure falls less than geometric's):", "", markdown_table(profiles, "profile"), ""]
    lines += ["The paper's claims (weights reading, γ = 2 against 0) are declared in conf/claims/momentum.yaml and "
              "decided from escape_routes_runs.csv by `python -m ropelab.claims`.", ""]
    text = "\n".join(lines)
    path.write_text(text)
    return text


def plot(pairs: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = sorted(pairs["profile"].unique(), key=lambda p: (p != "geometric", p))
    fig, axes = plt.subplots(1, len(profiles), figsize=(3.4 * len(profiles), 3.0), squeeze=False)
    colours = plt.cm.plasma(np.linspace(0, 0.85, max(2, pairs["gamma"].nunique())))
    gamma_colour = dict(zip(sorted(pairs["gamma"].unique()), colours))
    for ax, profile in zip(axes[0], profiles):
        here = pairs[pairs["profile"] == profile]
        for gamma, by_gamma in here.groupby("gamma"):
            per_pair = by_gamma.groupby("pair").agg(freq=("freq", "first"), share=("share_weights", "mean"))
            per_pair = per_pair.sort_values("freq")
            ax.plot(per_pair["freq"], per_pair["share"], marker="o", ms=2.5, lw=1.2, color=gamma_colour[gamma],
                    label=f"γ = {gamma:g} (n={by_gamma['seed'].nunique()})")
        ax.set_xscale("log")
        ax.set_title(profile, fontsize=9)
        ax.set_xlabel("pair frequency θ (rad/token)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    axes[0, 0].set_ylabel("energy share of the logits (weights)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ropelab escape-routes", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="sweep or run folders with checkpoints/last.ckpt")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--examples", type=at_least(1), default=EXAMPLES, help="validation examples per run")
    args = parser.parse_args(argv)
    try:
        found = finished_runs(args.paths)
        if not found:
            raise EscapeRoutesError(f"no completed run with checkpoints/last.ckpt under {', '.join(args.paths)}")
        results = [analyse_run(run, args.examples, planned) for run, planned in found]
    except (EscapeRoutesError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = pd.DataFrame([r["row"] for r in results])
    runs.to_csv(out / "escape_routes_runs.csv", index=False, float_format="%.6g")
    pairs = pair_table(results)
    pairs.to_csv(out / "escape_routes.csv", index=False, float_format="%.6g")
    print(write_md(runs, args.examples, out / "escape_routes.md"), end="")
    plot(pairs, out / "escape_routes.png")
    print(f"wrote {out / 'escape_routes.md'}, escape_routes.csv, escape_routes_runs.csv, escape_routes.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
