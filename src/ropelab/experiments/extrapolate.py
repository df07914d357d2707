"""Length extrapolation of trained runs: loss and accuracy at 1×, 2×, 4×, 8× … the training length.

    ropelab extrapolate runs/extrapolation_code_lm --factors 1 2 4 8 \\
        --scaling none linear:auto ntk:auto yarn:auto --out results/extrapolation_code_lm/extrapolation

For every run folder under the paths (a folder with ``config.yaml`` and ``checkpoints/last.ckpt``; a sweep folder
is searched), the run's model is rebuilt from its own config (``ropelab.core.build.model_for``) with a ``max_len`` that
covers the longest length asked for, loaded with the checkpoint's weights, and evaluated on a fixed seeded set of
the task at each length: the task's own length knobs (``Task.length_knobs``: code_lm's ``window``, indirect
indexing's string length, associative recall's pairs, Dyck-3's prefix length, …) multiplied by the factor and
rounded. The set is the run's validation set (``--split val``: the run's seed, ``data.val_size`` examples drawn in
``data.eval_batch_size`` chunks, as training drew it), so at 1× the loss is the run's own validation loss —
written beside it (``val_loss_run``), as it is at a fine-tuned run's own length (4× for one fine-tuned at 4×). The
run's precision (summary.json) is used again: bf16 autocast on the CPU for a bf16-mixed run.

Factors are relative to the *pretraining* length: a run that fine-tuned from another (``init_from=<run folder>``,
e.g. at 4× the window) is scaled from that run's task config, so "rope + YaRN + ft" and "rope" share an x-axis.

``--scaling`` evaluates ``pos=rope`` runs once per variant: ``none`` (as trained), ``linear:S``, ``ntk:S`` or
``yarn:S`` with a factor S, or ``…:auto`` (S = the length factor at each length, ≥ 1: plain rope at 1×). Other
schemes are evaluated once, as trained. A run trained with a scaling keeps it.

A length the scheme cannot represent (learned_abs past its table), or that the task refuses (indirect indexing's
letters are unique: at most 52), is one line on the console and an empty cell with its reason (``note``); nothing
is clamped. Writes ``extrapolation.csv`` (one row per run × variant × length), ``extrapolation.md`` (per task: loss
and accuracy, mean ± SD over seeds, per length; the check at each run's own length; the empty cells) and
``extrapolation_<task>.png`` (loss against length, a line per scheme / variant, the seeds' min–max band).
"""

from __future__ import annotations

import argparse
import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ropelab.core import positional, record
from ropelab.core.cli import at_least
from ropelab.core.errors import ConfigError, require
from ropelab.core.runs import last_checkpoint
import tasks

SCALINGS = ("none", "linear", "ntk", "yarn")
FINE_TUNED, AT_EVALUATION = " +ft", " (eval)"  # label suffixes: a fine-tuned run, a rope scaling added at evaluation
METRICS = ("loss", "acc", "exact")


@dataclass(frozen=True)
class Variant:
    """How a rope run is evaluated: as trained (``scaling=None``), or with a scaling by ``factor`` (None = auto)."""
    scaling: str | None = None
    factor: float | None = None

    @classmethod
    def parse(cls, text: str) -> "Variant":
        name, _, factor = str(text).partition(":")
        require(name in SCALINGS and (name == "none") == (not factor), "--scaling", text,
                "none, or linear|ntk|yarn:<factor >= 1 or auto> (e.g. yarn:4, yarn:auto)")
        if name == "none":
            return cls()
        if factor == "auto":
            return cls(name, None)
        try:
            value = float(factor)
        except ValueError:
            value = float("nan")
        require(value >= 1, "--scaling", text, "a factor >= 1 or auto after the colon (e.g. yarn:4)")
        return cls(name, value)

    def label(self) -> str:
        if self.scaling is None:
            return ""
        return f"+{self.scaling}×{'auto' if self.factor is None else f'{self.factor:g}'}{AT_EVALUATION}"

    def factor_at(self, length_factor: float) -> float:
        return max(1.0, float(length_factor)) if self.factor is None else float(self.factor)


# ------------------------------------------------------------------------------------------------- runs

def find_runs(paths: list[str | Path]) -> tuple[list[Path], list[str]]:
    """(run folders with a config and a checkpoint, one line per folder that has a config but no checkpoint)."""
    found, skipped = [], []
    for path in map(Path, paths):
        require(path.exists(), "path", str(path), "a run folder or a sweep folder of runs")
        for run in [d for d in record.run_dirs(path) if (d / record.CONFIG).is_file()]:
            if last_checkpoint(run).exists():
                found.append(run)
            else:
                skipped.append(f"{run}: no checkpoints/last.ckpt (records keep none: evaluate the runs/ folder)")
    return found, skipped


def load_config(run: Path) -> dict:
    return record.read(run).saved_config


def base_task_config(cfg: dict) -> dict:
    """The task config that 1× means: the pretraining run's, when this run fine-tuned from a run folder."""
    source = cfg.get("init_from")
    if source and (Path(source) / "config.yaml").is_file():
        base = load_config(Path(source))
        if base["task"]["name"] == cfg["task"]["name"]:
            return base["task"]
    return cfg["task"]


def scaled_task_config(task_cfg: dict, factor: float) -> dict:
    """The task config with its length knobs × factor (rounded half up, at least 1); no OOD block."""
    params = {k: v for k, v in task_cfg.items() if k != "ood"}
    cls = tasks.registry()[params["name"]]
    require(bool(cls.length_knobs), "task", params["name"], "a task with a length knob (Task.length_knobs)")
    for knob in cls.length_knobs:
        params[knob] = max(1, int(math.floor(params[knob] * factor + 0.5)))
    return params


def build_task(params: dict):
    p = dict(params)
    return tasks.build(p.pop("name"), **p)


# ------------------------------------------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model, task, seed: int, data: dict, split: str = "val", examples: int | None = None,
             precision: str = "32-true", tokens_per_batch: int | None = None) -> dict[str, float]:
    """Loss, token accuracy and exact match of ``model`` on the fixed ``split`` set of ``task`` (drawn as the
    run's datamodule draws it), computed by the run's own metric (``ropelab.core.lit.AnswerMetrics``). Batches of
    ``data.eval_batch_size`` examples, split further so a batch holds at most ``tokens_per_batch`` tokens."""
    from ropelab.core.data import TaskDataModule
    from ropelab.core.lit import AnswerMetrics

    sizes = dict(data)
    if examples is not None:
        sizes[f"{split}_size"] = examples
    dm = TaskDataModule(task, task, seed, **sizes)
    inputs, targets, groups = dm.fixed_set(split).tensors
    metrics = AnswerMetrics(len(task.vocab))
    batch = dm.eval_batch_size
    if tokens_per_batch:
        batch = max(1, min(batch, tokens_per_batch // inputs.shape[1]))
    device = next(model.parameters()).device
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled="bf16" in str(precision))
    with torch.inference_mode(), autocast:
        for start in range(0, len(inputs), batch):
            sl = slice(start, start + batch)
            x, y, g = inputs[sl].to(device), targets[sl].to(device), groups[sl].to(device)
            metrics.update(model(x), y, g)
    out = {k.split("/")[1]: float(v) for k, v in metrics.compute(split).items()}
    out["examples"] = int(len(inputs))
    return out


def model_for_run(cfg: dict, vocab_size: int, max_len: int, pos_overrides: dict | None = None):
    """The run's Llama at ``max_len`` (its scheme's options overridden by ``pos_overrides``) with the checkpoint's
    weights loaded by the caller; ``init_from`` is not loaded (the checkpoint holds the weights)."""
    from ropelab.core.build import model_for
    from ropelab.core.config import record_config

    run_cfg = record_config(cfg)
    if pos_overrides:
        for key, value in pos_overrides.items():
            run_cfg.pos[key] = value
    return model_for(run_cfg, vocab_size, max_len, init_weights=False)


def load_weights(model, run: Path) -> None:
    model.load_state_dict(record.checkpoint_weights(last_checkpoint(run)))


def label_of(cfg: dict) -> str:
    """The scheme as trained: ``rope``, ``rope+yarn×4``, ``pope +ft``, …"""
    pos = cfg["pos"]
    label = pos["name"]
    if pos.get("scaling"):
        label += f"+{pos['scaling']}×{float(pos.get('scaling_factor', 1)):g}"
    if cfg.get("init_from"):
        label += FINE_TUNED
    return label


def extrapolate_run(run: Path, factors: list[float], variants: list[Variant], split: str = "val",
                    examples: int | None = None, tokens_per_batch: int | None = 2 ** 16,
                    log=print) -> list[dict[str, Any]]:
    """One row per variant × factor for one run folder (empty metrics and a ``note`` where a length cannot be
    evaluated)."""
    rec = record.read(run)
    cfg, summary = rec.saved_config, rec.summary or {}
    precision = summary.get("precision") or "32-true"
    base_cfg = base_task_config(cfg)
    own_task = {k: v for k, v in cfg["task"].items() if k != "ood"}
    tasks_at: dict[float, Any] = {}
    notes: dict[float, str] = {}
    own_lengths = set()  # the factors at which the run itself trained (1×; a fine-tune's own window)
    for f in factors:
        scaled = scaled_task_config(base_cfg, f)
        if scaled == own_task:
            own_lengths.add(f)
        try:
            tasks_at[f] = build_task(scaled)
        except ConfigError as err:
            notes[f] = f"task refuses {f:g}×: {err}"
    base_task = tasks_at.get(1.0) or build_task(scaled_task_config(base_cfg, 1.0))
    train_len = base_task.seq_len
    trained_task, trained_ood = tasks.build_with_ood(cfg["task"])
    trained_max_len = max(trained_task.seq_len, trained_ood.seq_len)
    needed = max([trained_max_len, *(t.seq_len for t in tasks_at.values())])
    limited = positional.registry()[cfg["pos"]["name"]].length_limited
    # the variants are for rope as pretrained: a run trained with a scaling or fine-tuned is evaluated as trained
    plain_rope = cfg["pos"]["name"] == "rope" and not cfg["pos"].get("scaling") and not cfg.get("init_from")
    if cfg["pos"]["name"] == "rope" and not plain_rope and any(v.scaling for v in variants):
        log(f"{run.name}: trained with a scaling or fine-tuned: evaluated as trained only, no --scaling variants")
    rows = []
    for variant in (variants if plain_rope else [Variant()]):
        label = label_of(cfg) + variant.label()
        models: dict[Any, Any] = {}
        for f in factors:
            row = dict(task=cfg["task"]["name"], label=label, pos=cfg["pos"]["name"], seed=cfg["seed"], run=str(run),
                       scaling=variant.scaling or cfg["pos"].get("scaling") or "",
                       scaling_factor=cfg["pos"].get("scaling_factor") if cfg["pos"].get("scaling") else None,
                       train_len=train_len, factor=f,
                       length=tasks_at[f].seq_len if f in tasks_at else None, note=notes.get(f, ""),
                       val_loss_run=None, **{m: None for m in METRICS}, examples=None)
            same_set = examples is None or examples == cfg["data"][f"{split}_size"]
            if (f in own_lengths and f in tasks_at and same_set
                    and (variant.scaling is None or variant.factor_at(f) == 1.0)):  # the same model and set
                row["val_loss_run"] = (summary.get("final") or {}).get(f"{split}/loss")
            if f in tasks_at:
                task = tasks_at[f]
                overrides = None
                if variant.scaling is not None:
                    s = variant.factor_at(task.seq_len / train_len)
                    row["scaling_factor"] = s
                    overrides = dict(scaling=variant.scaling, scaling_factor=s, original_max_len=train_len)
                key = tuple(sorted((overrides or {}).items()))
                try:
                    if key not in models:
                        models.clear()
                        # a scheme whose table cannot grow (learned_abs) keeps the trained size
                        model = model_for_run(cfg, len(task.vocab), trained_max_len if limited else needed, overrides)
                        load_weights(model, run)
                        models[key] = model.eval()
                    model = models[key]
                    if task.seq_len > model.cfg.max_len:
                        row["note"] = (f"pos={cfg['pos']['name']} has no position past {model.cfg.max_len} (its "
                                       f"table): length {task.seq_len} left empty")
                    else:
                        row.update(evaluate(model, task, cfg["seed"], cfg["data"], split, examples, precision,
                                            tokens_per_batch))
                except ConfigError as err:
                    row["note"] = str(err)
            if row["note"]:
                log(f"{run.name} {label} {f:g}×: {row['note']}")
            rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------- outputs

def _cell(values: list[float], digits: int = 3) -> str:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:.{digits}f} (n=1)"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f} (n={len(values)})"


def tables(rows: list[dict], references: Sequence[str] = ("rope",)) -> str:
    """The Markdown report: per task, loss and accuracy per length (mean ± SD over seeds), the loss change from 1×,
    each scheme − each of ``references`` paired by seed (95 % t intervals), the check at each run's own length, the
    empty cells."""
    import pandas as pd

    from ropelab.analysis.report.tables import pipe_table
    from ropelab.analysis.stats import paired_difference

    df = pd.DataFrame(rows)
    lines = ["# Length extrapolation", "",
             "Loss (nats per answer token; code_lm: per character) and answer-token accuracy of each trained run at "
             "each length factor of its (pre)training length, on the run's validation set drawn at that length "
             "(`python -m ropelab.extrapolate`). Mean ± SD over seeds (n). An empty cell is a length the scheme or "
             "the task cannot represent (notes below).", ""]
    for task, part in df.groupby("task", sort=True):
        factors = sorted(part["factor"].unique())
        lengths = {f: sorted({int(v) for v in part.loc[part["factor"] == f, "length"].dropna()}) for f in factors}
        head = [f"{f:g}× ({'/'.join(map(str, lengths[f])) or '–'})" for f in factors]
        for metric, title in (("loss", "loss"), ("acc", "accuracy")):
            lines += [f"## {task}: {title} against length (× training length, tokens)", "",
                      *pipe_table(["scheme", *head], [[label, *(_cell(list(g.loc[g["factor"] == f, metric]))
                                                                for f in factors)]
                                                      for label, g in part.groupby("label", sort=True)],
                                  "l" + "r" * len(head)), ""]
        check = part[part["val_loss_run"].notna() & part["loss"].notna()]
        if len(check):
            lines += [f"## {task}: at the run's own training length, against its own validation loss", "",
                      *pipe_table(["scheme", "seed", "length", "loss here", "the run's val/loss", "difference"],
                                  [[r.label, r.seed, f"{r.factor:g}×", f"{r.loss:.6f}", f"{r.val_loss_run:.6f}",
                                    f"{r.loss - r.val_loss_run:+.2e}"] for r in check.itertuples()], "lrrrrr"), ""]
        growth = []
        for label, g in part.groupby("label", sort=True):
            at1 = g[g["factor"] == 1.0].set_index("run")["loss"]
            cells = []
            for f in factors:
                if f != 1.0:
                    at = g[g["factor"] == f].set_index("run")["loss"]
                    cells.append(_cell(list((at - at1.reindex(at.index)).dropna()), 3))
            growth.append([label, *cells])
        grown = [h for f, h in zip(factors, head) if f != 1.0]
        lines += [f"## {task}: loss at each length − loss at 1× (per run, then mean ± SD)", "",
                  *pipe_table(["scheme", *grown], growth, "l" + "r" * len(grown)), ""]
        for reference in (r for r in references if r in set(part["label"])):
            ref = part[part["label"] == reference]
            paired = [[label, *(paired_difference(
                g[g["factor"] == f].groupby("seed")["loss"].first().to_dict(),
                ref[ref["factor"] == f].groupby("seed")["loss"].first().to_dict()).text("{:+.3f}").replace("–", "")
                for f in factors)] for label, g in part.groupby("label", sort=True) if label != reference]
            lines += [f"## {task}: loss − {reference}'s loss at the same length, paired by seed (mean [95 % t interval])",
                      "", *pipe_table(["scheme", *head], paired, "l" + "r" * len(head)), ""]
        notes = part[part["note"].astype(bool)]
        if len(notes):
            lines += [f"## {task}: empty cells", ""]
            lines += [f"- {r.label}, seed {r.seed}, {r.factor:g}×: {r.note}" for r in notes.itertuples()]
            lines.append("")
    return "\n".join(lines)


def method_of(label: str) -> str:
    """The method a label names, whether scaled at evaluation or fine-tuned: a figure's colour."""
    return label.removesuffix(FINE_TUNED).removesuffix(AT_EVALUATION)


def figure(rows: list[dict], task: str, path: Path) -> None:
    """Loss against length, a line per label with its seeds' min–max band; runs fine-tuned at a longer length get a
    panel of their own (one crowded panel hid them), and a method keeps its colour in both panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df[(df["task"] == task) & df["loss"].notna()]
    methods = sorted({method_of(label) for label in df["label"]})
    palette = plt.get_cmap("tab10").colors + ("black", "navy")  # Dark2's hues were too close to tab10's to tell apart
    colour = {m: palette[i % len(palette)] for i, m in enumerate(methods)}
    fine_tuned = df["label"].str.endswith(FINE_TUNED)
    panels = [(part, title) for part, title in ((df[~fine_tuned], "trained at one length (dashed: rope scaled at "
                                                   "evaluation)"), (df[fine_tuned], "then fine-tuned longer (+ft)"))
              if len(part)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.0 * len(panels), 5.6), sharey=True, squeeze=False)
    for ax, (part, title) in zip(axes[0], panels):
        for label, g in part.groupby("label", sort=True):
            stats = g.groupby("length")["loss"].agg(["mean", "min", "max"]).sort_index()
            style = dict(color=colour[method_of(label)], linestyle="--" if label.endswith(AT_EVALUATION) else "-",
                         marker="s" if label.endswith(FINE_TUNED) else "o")
            ax.plot(stats.index, stats["mean"], **style, label=f"{label} (n={g['seed'].nunique()})")
            ax.fill_between(stats.index, stats["min"], stats["max"], color=style["color"], alpha=0.2)
        for t in sorted(part.loc[part["val_loss_run"].notna(), "length"].unique()):  # where these runs trained
            ax.axvline(t, color="grey", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("test length (tokens); dotted: training length")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    axes[0][0].set_ylabel("validation loss (nats)")
    fig.suptitle(f"{task}: loss against length (line: mean over seeds, band: min–max)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(rows: list[dict], out: Path, references: Sequence[str] = ("rope",)) -> list[Path]:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    written = [out / "extrapolation.csv", out / "extrapolation.md"]
    pd.DataFrame(rows).to_csv(written[0], index=False)
    written[1].write_text(tables(rows, references) + "\n")
    for task in sorted({r["task"] for r in rows}):
        if any(r["task"] == task and r["loss"] is not None for r in rows):
            figure(rows, task, out / f"extrapolation_{task}.png")
            written.append(out / f"extrapolation_{task}.png")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ropelab extrapolate", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="run folders or sweep folders (runs/<name>)")
    parser.add_argument("--factors", nargs="+", type=float, default=None,
                        help="length factors of the (pre)training length (default 1 2 4 8)")
    parser.add_argument("--scaling", nargs="+", default=None,
                        help="variants for pos=rope runs: none, linear|ntk|yarn:<factor|auto> (default none)")
    parser.add_argument("--split", default=None, choices=("val", "test"), help="the fixed set (default val)")
    parser.add_argument("--examples", type=at_least(1), default=None, help="examples per length (default data.val_size)")
    parser.add_argument("--reference", nargs="+", default=["rope"], help="the schemes or variants the others are "
                        "compared with, paired by seed, a table each (default rope; e.g. rope 'rope+yarn×4 (eval)')")
    parser.add_argument("--tables-from", nargs="+", default=None, metavar="CSV", help="rebuild the tables and the "
                        "figure from extrapolation.csv files already written (no evaluation; e.g. with other "
                        "--reference, or merging evaluations of different runs: a later file's row replaces an "
                        "earlier one of the same run, label and factor)")
    parser.add_argument("--threads", type=at_least(1), default=None, help="torch threads")
    parser.add_argument("--out", default=None, help="output folder (default runs/extrapolation/<first path name>; with "
                        "--tables-from, the first CSV's folder)")
    args = parser.parse_args(argv)
    if args.tables_from:
        evaluation_only = {"paths": args.paths, "--factors": args.factors, "--scaling": args.scaling,
                           "--split": args.split, "--examples": args.examples, "--threads": args.threads}
        given = [name for name, value in evaluation_only.items() if value]
        if given:  # they would be silently ignored: the CSVs' rows are what they are
            print(f"error: {', '.join(given)} with --tables-from: it rebuilds tables from CSVs without evaluating; "
                  "drop them, or evaluate the runs without --tables-from")
            return 2
        rows = _rows_from([Path(csv) for csv in args.tables_from])
        if rows is None:
            return 2
        return _write_and_say(rows, Path(args.out) if args.out else Path(args.tables_from[0]).parent, args.reference)
    try:
        require(bool(args.paths), "paths", args.paths, "one or more run or sweep folders (or --tables-from CSV)")
        args.factors, args.scaling, args.split = args.factors or [1, 2, 4, 8], args.scaling or ["none"], args.split or "val"
        variants = [Variant.parse(s) for s in args.scaling]
        require(all(f > 0 for f in args.factors), "--factors", args.factors, "numbers > 0")
        runs_found, skipped = find_runs(args.paths)
    except ConfigError as err:
        print(f"error: {err}")
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    for line in skipped:
        print(line)
    if not runs_found:
        print("error: no run folder with checkpoints/last.ckpt under " + " ".join(args.paths))
        return 2
    rows = []
    for run in runs_found:
        rows += extrapolate_run(run, sorted(set(args.factors)), variants, args.split, args.examples)
    return _write_and_say(rows, Path(args.out) if args.out else Path("runs/extrapolation") / Path(args.paths[0]).name,
                          args.reference)


def _write_and_say(rows: list[dict], out: Path, references: Sequence[str]) -> int:
    for path in write(rows, out, references):
        print(f"wrote {path}")
    return 0


def _rows_from(csvs: list[Path]) -> list[dict] | None:
    """``--tables-from``: the rows of evaluations already run, as ``extrapolate_run`` gave them, merged in the order
    given (a row of the same run, label and factor replaces the earlier one; None: a file is missing)."""
    import pandas as pd

    frames = []
    for csv in csvs:
        if not csv.is_file():
            print(f"error: --tables-from={csv} is not a file: give the extrapolation.csv of an evaluation")
            return None
        frames.append(pd.read_csv(csv, keep_default_na=False, na_values=[""]))
    df = pd.concat(frames, ignore_index=True).drop_duplicates(["run", "label", "factor"], keep="last")
    df["note"] = df["note"].fillna("")
    return df.astype(object).where(df.notna(), None).to_dict("records")


if __name__ == "__main__":
    raise SystemExit(main())
