"""The report's figures: loss curves per task, learned positional parameters per task × column, and (γ sweeps)
attention maps per task. Each ``plot_*`` writes one PNG into the output folder and returns its path; each
``*_section`` draws its figures and returns the Markdown that shows them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ropelab.analysis.report.cells import trace_summary
from ropelab.analysis.report.records import Run, load_trace, parameter_kind
from ropelab.analysis.report.sweep import GAMMA, Sweep, ordered, value_label
from ropelab.analysis.report.tables import markdown_table
from ropelab.core.runs import last_checkpoint


def pyplot():
    """matplotlib.pyplot on the file-only backend, imported when a figure is drawn (it is slow to import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def file_part(name: str) -> str:
    """A plain-ASCII file-name part: γ=0.5 → gamma=0.5, anything else odd → _."""
    name = name.replace("γ", "gamma")
    return "".join(c if (c.isascii() and c.isalnum()) or c in "-_.=" else "_" for c in name).strip("_")


def plot_band(ax, data: pd.DataFrame, color, label: str | None = None, **line) -> None:
    """One column's runs (a DataFrame column each) as their mean line, and a min–max band when there are several."""
    ax.plot(data.index, data.mean(axis=1).to_numpy(), color=color, lw=1.4, label=label, **line)
    if data.shape[1] > 1:
        ax.fill_between(data.index, data.min(axis=1).to_numpy(), data.max(axis=1).to_numpy(), color=color,
                        alpha=0.18, lw=0)


def plot_curves(sweep: Sweep, task: str, out: Path, dpi: int) -> Path | None:
    series = []
    for column in sweep.columns():
        runs = [r for r in sweep.runs_in(task, column) if r.metrics is not None and "step" in r.metrics]
        if not runs:
            continue
        train = pd.concat({r.rel: r.smoothed for r in runs}, axis=1)
        val = pd.concat({r.rel: r.metrics[["step", "val/loss"]].dropna().groupby("step")["val/loss"].last()
                         for r in runs if "val/loss" in r.metrics}, axis=1) if any(
            "val/loss" in r.metrics for r in runs) else pd.DataFrame()
        locks = [r.lockin for r in runs if r.lockin is not None and not math.isnan(r.lockin)]
        series.append((column, len(runs), train, val, float(np.median(locks)) if locks else None))
    if not series:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (column, n, train, val, lock) in enumerate(series):
        color = colors[i % len(colors)]
        for ax, data in ((axes[0], train), (axes[1], val)):
            if not data.empty:
                plot_band(ax, data, color, f"{column} ({n})")
        if lock is not None:
            axes[0].axvline(lock, color=color, ls=":", lw=1)
    a, b = sweep.rule.plateau
    axes[0].axvspan(a, b, color="grey", alpha=0.08, lw=0)
    axes[0].set_title(f"{task}: train loss (mean over {sweep.rule.smooth} steps)", fontsize=9)
    axes[1].set_title(f"{task}: validation loss", fontsize=9)
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("loss (answer tokens)")
    # on the validation panel, unless no run got to a validation (short runs): then on the training one
    (axes[1] if axes[1].get_legend_handles_labels()[0] else axes[0]).legend(fontsize=7, loc="upper right")
    fig.text(0.01, 0.01, "line: mean over seeds; band: min–max; dotted: median lock-in step; grey: plateau window",
             fontsize=6, color="grey")
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.16, top=0.92, wspace=0.06)
    path = out / f"curves_{file_part(task)}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_params(sweep: Sweep, task: str, column: str, traced: list[tuple[Run, dict]], out: Path, dpi: int,
                phase_ref: float | None) -> Path:
    names = [n for n in traced[0][1] if n != "steps"]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.2), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes[0], names):
        kind = parameter_kind(name)
        for i, (run, tr) in enumerate(traced):
            if name not in tr:
                continue
            steps, arr, color = tr["steps"], tr[name].astype(float), colors[i % len(colors)]
            seed = value_label(run.config.get("seed"))
            flat = arr.reshape(len(arr), -1)
            if kind == "omega":
                drift = np.abs(flat - flat[:1]) / np.maximum(np.abs(flat[:1]), 1e-12)
                ax.plot(steps, np.median(drift, axis=1), color=color, label=f"seed {seed}")
                ax.plot(steps, drift.max(axis=1), color=color, ls="--", lw=0.8)
                ax.set_title(f"{name}: |Ω−Ω₀|/Ω₀, median (—) and max (--)", fontsize=8)
                ax.set_xlabel("step")
            elif kind == "phase":
                final = arr[-1].reshape(-1, arr.shape[-1]) if arr.ndim > 2 else arr[-1].reshape(1, -1)
                ax.plot(np.arange(final.shape[-1]), final.mean(axis=0), "o-", ms=2.5, lw=0.9, color=color,
                        label=f"seed {seed}")
                ax.set_title(f"{name} per pair at step {int(steps[-1])} (mean over heads)", fontsize=8)
                ax.set_xlabel("pair index")
            else:
                ax.plot(steps, flat.mean(axis=1), color=color, label=f"seed {seed}")
                ax.fill_between(steps, flat.min(axis=1), flat.max(axis=1), color=color, alpha=0.15, lw=0)
                ax.set_title(f"{name} over training (band: min–max)", fontsize=8)
                ax.set_xlabel("step")
        if kind == "phase":
            offsets = [float((tr[name][-1] - tr[name][0]).mean()) for _, tr in traced if name in tr]
            text = f"mean offset {np.mean(offsets):.2e} rad"
            if phase_ref is not None:
                text += f"\npaper ≈ {phase_ref:.1e} rad"
            ax.text(0.02, 0.97, text, transform=ax.transAxes, va="top", fontsize=7)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6, loc="upper left")
    fig.suptitle(f"{task} · {column}: learned positional parameters (one colour per seed)", fontsize=9)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.15, top=0.84, wspace=0.3)
    path = out / f"params_{file_part(task)}_{file_part(column)}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_attention(sweep: Sweep, task: str, out: Path, dpi: int, layer: int) -> tuple[Path | None, list[str]]:
    """γ sweeps: attention (head mean, one layer) on the first validation example, one panel per γ."""
    problems: list[str] = []
    others = [k for k in sweep.col_keys if k != GAMMA]
    gammas = ordered(sweep.cells.loc[sweep.cells[sweep.row_key] == task, GAMMA])
    here = sweep.cells[sweep.cells[sweep.row_key] == task]
    rows = list(dict.fromkeys(sweep.column_label(v, others) for v in here[others].to_dict("records"))) \
        if others else [""]
    candidates: dict[tuple[str, str], list[Run]] = {}
    for run in sorted(sweep.runs, key=lambda r: value_label(r.config.get("seed"))):
        if sweep.value(run, sweep.row_key) == task and run.status == "completed":
            key = (sweep.column_label({k: sweep.value(run, k) for k in others}, others) if others else "",
                   sweep.value(run, GAMMA))
            candidates.setdefault(key, []).append(run)
    maps: dict[tuple[str, str], np.ndarray] = {}
    for key, runs in candidates.items():
        runs = [r for r in runs if last_checkpoint(r.path).exists()]
        if not runs:
            problems.append(f"{task} {key[0]} γ={key[1]}: no completed run with checkpoints/last.ckpt".replace("  ", " "))
            continue
        from ropelab.analysis import attention_maps  # torch: only when there is a checkpoint to read

        try:
            weights, _tokens = attention_maps.run_attention(runs[0].path)
        except Exception as err:  # an unbuildable scheme or a stale checkpoint: say so, keep the report
            problems.append(f"{runs[0].rel}: {type(err).__name__}: {err}")
            continue
        maps[key] = weights[min(layer, len(weights) - 1) if layer >= 0 else layer].mean(axis=0)
    if not maps:
        return None, problems
    plt = pyplot()
    fig, axes = plt.subplots(len(rows), len(gammas), figsize=(2.3 * len(gammas), 2.4 * len(rows)), squeeze=False)
    for i, r in enumerate(rows):
        for j, g in enumerate(gammas):
            ax = axes[i][j]
            ax.set_xticks([])
            ax.set_yticks([])
            if (r, g) in maps:
                ax.imshow(maps[(r, g)] ** 0.5, cmap="magma", interpolation="nearest")
            else:
                ax.text(0.5, 0.5, "no run", ha="center", va="center", fontsize=7, transform=ax.transAxes)
            ax.set_title(f"{r} γ={g}".strip(), fontsize=7)
    layer_name = "last layer" if layer == -1 else f"layer {layer}"
    fig.suptitle(f"{task}: attention, {layer_name}, mean over heads, √weight (query ↓, key →)", fontsize=8)
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.02, top=0.86, wspace=0.08, hspace=0.25)
    path = out / f"attention_{file_part(task)}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path, problems


def plot_accuracy_curves(sweep: Sweep, task: str, out: Path, dpi: int) -> Path | None:
    """Validation answer accuracy against training examples seen (steps × batch), one line per column: where
    budgets differ between papers, examples are the unit they state (PoPE: 1M examples)."""
    series = []
    for column in sweep.columns():
        curves = {}
        for r in sweep.runs_in(task, column):
            batch = r.config.get("data.batch_size")
            if r.metrics is None or "val/acc" not in r.metrics or not isinstance(batch, int):
                continue
            acc = r.metrics[["step", "val/acc"]].dropna().groupby("step")["val/acc"].last()
            curves[r.rel] = pd.Series(100 * acc.to_numpy(), index=(acc.index + 1) * batch)  # step k has seen k+1 batches
        if curves:
            series.append((column, pd.concat(curves, axis=1)))
    if not series:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (column, data) in enumerate(series):
        plot_band(ax, data, colors[i % len(colors)], f"{column} ({data.shape[1]})", marker=".", ms=3)
    ax.set_title(f"{task}: validation accuracy", fontsize=9)
    ax.set_xlabel("training examples")
    ax.set_ylabel("answer accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.14, top=0.91)
    path = out / f"accuracy_{file_part(task)}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def curves_section(sweep: Sweep, out: Path, dpi: int) -> list[str]:
    figures = []
    for task in sweep.tasks():
        for kind, plot in (("loss curves", plot_curves), ("validation accuracy", plot_accuracy_curves)):
            if path := plot(sweep, task, out, dpi):
                figures.append(f"![{task} {kind}]({path.name})")
    if not figures:
        return []
    return ["## Learning curves", "", "Train loss (smoothed) and validation loss against step; one line per column, "
            "mean over seeds, band = min–max over seeds, dotted = median lock-in step. Validation accuracy against "
            "training examples seen (steps × batch), mean and min–max over seeds.", "", *figures, ""]


def params_section(sweep: Sweep, out: Path, dpi: int, phase_ref: float | None) -> list[str]:
    """Per task × column with positional traces: a summary row (``cells.trace_summary``) and a figure."""
    rows, figures = [], []
    for task in sweep.tasks():
        for column in sweep.columns():
            traced = [(r, t) for r in sweep.runs_in(task, column) if (t := load_trace(r)) is not None and len(t) > 1]
            if not traced:
                continue
            figures.append(f"![{task} {column} parameters]("
                           f"{plot_params(sweep, task, column, traced, out, dpi, phase_ref).name})")
            row = {"task": task, "column": column, "runs": len(traced)}
            for name, (mean, std) in trace_summary([t for _, t in traced]).items():
                row[name] = f"{mean:.3g}" + ("" if math.isnan(std) else f" ± {std:.2g}")
            rows.append(row)
    if not rows:
        return []
    return ["## Learned positional parameters", "",
            "From positional_trace.npz (step 0 and every validation). Ω drift is relative to its initial "
            "value; Φ offset is final − init, averaged over heads and pairs; values at the last snapshot, "
            "mean ± SD over runs"
            + (f" (paper: saw-tooth over pairs, mean offset ≈ {phase_ref:g} rad)." if phase_ref else "."), "",
            markdown_table(pd.DataFrame(rows).set_index("task").fillna(""), "task"), "", *figures, ""]


def attention_section(sweep: Sweep, out: Path, dpi: int, layer: int) -> list[str]:
    figures, problems = [], []
    for task in sweep.tasks():
        path, errors = plot_attention(sweep, task, out, dpi, layer)
        problems += errors
        if path:
            figures.append(f"![{task} attention]({path.name})")
    md = ["## Attention maps by γ", "",
          "Lowest-seed completed run of each column, checkpoints/last.ckpt, first validation example; "
          "weights recomputed by ropelab.attention_maps.", "", *figures, ""]
    return md + [f"- could not draw {p}" for p in problems] + ([""] if problems else [])
