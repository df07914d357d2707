"""Frequency usage of a trained model (PoPE paper, "frequency usage analysis"): the mean query and key norm
per frequency channel, per layer.

    ropelab freq-usage RUN_DIR [RUN_DIR …] [--out DIR] [--examples 512] [--checkpoint PATH]

For each run folder it loads ``checkpoints/last.ckpt``, feeds the run's own validation examples (the first
``--examples`` of the same draw as ``TaskDataModule.fixed_set``), and at every layer takes q and k from the
attention's projection (after ``attn_norm`` and ``attn.qkv``, before the positional transform), at every
non-padding position:

* ``rope`` — per channel pair i (channels i and i + D/2, the rotate_half layout), frequency θ_i = inv_freq[i]:
  ‖(q_i, q_{i+D/2})‖, the length of the 2-vector that the rotation turns (rotating does not change it);
* ``rope_half`` — the same over its rotated pairs (the unrotated channels carry no frequency and are left out);
* ``pope`` — per component c = 0…D−1, frequency θ_c = base^(−c/D): the magnitude μ = softplus(q_c)
  (PoPE's phases come from the position alone, so μ is all the "norm" a component has).

The norm is averaged over positions, examples and heads (``mean``; per head in the CSV too). It writes, under
``--out`` (default: the first run folder's ``freq_usage/``):

* ``freq_usage.png`` — a row per layer, a column per run: mean q and k norm against the channel's frequency
  (rad/token, log axis, high frequencies on the right);
* ``freq_usage.csv`` — run, scheme, layer, side (q / k), head (``mean`` or its index), channel, freq, norm;
* ``freq_usage.md`` — per run and layer, the share of the summed norm in the highest-frequency third of the
  channels (⌊n/3⌋ of n), against ⌊n/3⌋/n for a flat profile, e.g. 5/16 = 0.31 for rope's 16 pairs at head dim 32
  (the paper: RoPE suppresses high frequencies, PoPE uses a broad range).

Schemes without frequency channels (nope, alibi, learned_abs, sinusoidal) and learned-frequency ones
(spectral, bifocal) are refused in one line.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ropelab.analysis.report.tables import pipe_table
from ropelab.core.cli import at_least

SUPPORTED = ("rope", "rope_half", "pope")


class FreqUsageError(ValueError):
    """A run this analysis cannot read; the message is one line."""


def channel_norms(model, idx: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q norms, k norms, frequencies) of a model on inputs idx (B, T): norms (layers, heads, channels) averaged
    over the non-padding positions, frequencies (channels,) in rad/token."""
    pos = model.pos
    scheme = pos.name
    if scheme not in SUPPORTED:
        raise FreqUsageError(f"pos={scheme} has no fixed frequency channels: freq_usage reads {', '.join(SUPPORTED)}")
    B, T = idx.shape
    keep = (idx != 0).float()  # (B, T): padding carries no norm
    with torch.no_grad():
        x, ctx, mask = model.inputs(idx)
        q_layers, k_layers = [], []
        for block in model.blocks:
            attn = block.attn
            h = block.attn_norm(x)
            q, k, _ = attn.qkv(h).float().view(B, T, 3, attn.n_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
            q_layers.append(_per_channel(q, pos, keep))
            k_layers.append(_per_channel(k, pos, keep))
            x = block(x, pos, ctx, mask)
    return torch.stack(q_layers).numpy(), torch.stack(k_layers).numpy(), frequencies(pos)


def frequencies(pos) -> np.ndarray:
    if pos.name == "pope":
        return pos.theta.double().numpy()
    rope = pos.rotary if pos.name == "rope_half" else pos
    return rope.inv_freq.double().numpy()


def _per_channel(x: torch.Tensor, pos, keep: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D) → (H, channels): the norm of each frequency channel, averaged over kept positions."""
    if pos.name == "pope":
        norm = F.softplus(x)  # μ per component
    else:
        r = pos.rotary_dim if pos.name == "rope_half" else x.shape[-1]
        first, second = x[..., : r // 2], x[..., r // 2: r]
        norm = torch.sqrt(first ** 2 + second ** 2)  # the 2-vector each rotation frequency turns
    w = keep[:, None, :, None]
    return (norm * w).sum(dim=(0, 2)) / w.sum(dim=(0, 2)).clamp_min(1)


def analyse_run(run_dir: str | Path, examples: int = 512, checkpoint: str = "checkpoints/last.ckpt") -> dict[str, Any]:
    """{run, scheme, task, q, k (layers, heads, channels), freq (channels,)} of one trained run."""
    from ropelab.analysis.attention_maps import load_run_model
    from ropelab.core.data import draw

    run_dir = Path(run_dir)
    model, task, cfg = load_run_model(run_dir, checkpoint)
    if model.pos.name not in SUPPORTED:
        raise FreqUsageError(f"{run_dir}: pos={model.pos.name} has no fixed frequency channels: "
                             f"freq_usage reads {', '.join(SUPPORTED)}")
    inputs, _, _ = draw(task.for_split("val"), int(cfg.get("seed", 0)), "val", examples, index=0, grouped=True)
    q, k, freq = channel_norms(model.float(), torch.as_tensor(inputs))
    return {"run": str(run_dir), "scheme": model.pos.name, "task": cfg["task"]["name"], "q": q, "k": k,
            "freq": freq, "examples": examples}


def high_share(norm: np.ndarray, freq: np.ndarray) -> float:
    """Share of the summed norm (channels,) in the highest-frequency third of the channels."""
    order = np.argsort(-freq)
    top = order[: max(1, len(order) // 3)]
    return float(norm[top].sum() / norm.sum())


def label(result: dict[str, Any]) -> str:
    return f"{result['scheme']} · {Path(result['run']).name}"


def write_csv(results: Sequence[dict[str, Any]], path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "scheme", "layer", "side", "head", "channel", "freq", "norm"])
        for r in results:
            for side in ("q", "k"):
                arr = r[side]
                for layer in range(arr.shape[0]):
                    heads = [("mean", arr[layer].mean(axis=0))] + [(str(h), arr[layer, h]) for h in range(arr.shape[1])]
                    for head, values in heads:
                        for c, (fr, v) in enumerate(zip(r["freq"], values)):
                            w.writerow([r["run"], r["scheme"], layer, side, head, c, f"{fr:.6g}", f"{v:.6g}"])
    tmp.replace(path)


def write_md(results: Sequence[dict[str, Any]], path: Path) -> str:
    layers = max(r["q"].shape[0] for r in results)
    rows = [[r["run"], r["scheme"], r["examples"], f"{max(1, len(r['freq']) // 3) / len(r['freq']):.2f}",
             *(f"{high_share(r['q'][i].mean(0), r['freq']):.2f} / {high_share(r['k'][i].mean(0), r['freq']):.2f}"
               for i in range(r["q"].shape[0]))] for r in results]
    lines = ["# Frequency usage", "",
             "Mean q / k norm per frequency channel (rope: per rotated pair; pope: μ = softplus per component), "
             "averaged over positions, heads and the run's first validation examples. The table gives, per layer, "
             "the share of the summed norm in the highest-frequency third of the channels (`flat`: the share of a "
             "flat profile; lower = high frequencies suppressed).", "",
             *pipe_table(["run", "scheme", "examples", "flat", *(f"layer {i} q / k" for i in range(layers))], rows,
                         "llrr" + "l" * layers)]
    text = "\n".join(lines) + "\n"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return text


def plot(results: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = max(r["q"].shape[0] for r in results)
    fig, axes = plt.subplots(layers, len(results), figsize=(4.2 * len(results), 2.4 * layers), squeeze=False,
                             sharex="col")
    for j, r in enumerate(results):
        order = np.argsort(r["freq"])
        for i in range(layers):
            ax = axes[i, j]
            if i >= r["q"].shape[0]:
                ax.axis("off")
                continue
            for side, color in (("q", "tab:blue"), ("k", "tab:orange")):
                ax.plot(r["freq"][order], r[side][i].mean(0)[order], color=color, lw=1.2, label=side)
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(label(r), fontsize=8)
            if j == 0:
                ax.set_ylabel(f"layer {i}\nmean norm")
            if i == layers - 1:
                ax.set_xlabel("frequency θ (rad/token)")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("mean q / k norm per frequency channel (rope: pair norm; pope: softplus magnitude)", fontsize=9)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ropelab freq-usage", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (config.yaml + checkpoints/last.ckpt)")
    parser.add_argument("--out", help="output folder (default: <first run>/freq_usage)")
    parser.add_argument("--examples", type=at_least(1), default=512, help="validation examples to average over")
    parser.add_argument("--checkpoint", default="checkpoints/last.ckpt", help="checkpoint path inside each run")
    args = parser.parse_args(argv)
    try:
        results = [analyse_run(run, args.examples, args.checkpoint) for run in args.runs]
    except (FreqUsageError, FileNotFoundError) as err:  # a path that is no trained run: attention_maps.RunFolderError
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.runs[0]) / "freq_usage"
    out.mkdir(parents=True, exist_ok=True)
    plot(results, out / "freq_usage.png")
    write_csv(results, out / "freq_usage.csv")
    print(write_md(results, out / "freq_usage.md"), end="")
    print(f"wrote {out / 'freq_usage.png'}, freq_usage.csv, freq_usage.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
