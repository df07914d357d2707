"""Smoke matrix: one training step of every scheme on every task, at the default (or a tiny) config.

    ropelab smoke                 # default model config; writes results/smoke/smoke.{md,json}
    ropelab smoke --tiny --out DIR

Each cell builds the run ``python train.py task=T pos=P`` would (``ropelab.core.build``), takes the training step
every run takes (``ropelab.core.lit.train_step``) on its first training batch and reports the loss before the
step (≈ ln |vocab| at init) and the step's wall time; a cell that raises shows the error instead. It checks that ``python train.py task=T pos=P`` can work for every pair
without paying Lightning's start-up 81 times.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from ropelab.analysis.report.tables import pipe_table
from ropelab.core import positional
from ropelab.core.build import build
from ropelab.core.config import compose
from ropelab.core.lit import Member, answer_loss, train_step
from ropelab.core.runs import atomic_write_text
import tasks

TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.mlp_hidden=64", "data.batch_size=4"]


def one_step(task_name: str, pos_name: str, overrides: list[str]) -> dict:
    cfg = compose([f"task={task_name}", f"pos={pos_name}", *overrides])
    built = build(cfg)
    member = Member.of(built.lit, cfg.trainer.gradient_clip_val)
    inputs, targets = next(iter(built.datamodule.train_dataloader()))
    start = time.perf_counter()
    loss, = train_step([member], lambda: answer_loss(built.model(inputs), targets).reshape(1), 0)
    seconds = time.perf_counter() - start
    return {"loss": loss, "seconds": seconds, "finite": math.isfinite(loss)}


def matrix(overrides: list[str]) -> dict[str, dict[str, dict]]:
    results: dict[str, dict[str, dict]] = {}
    for task_name in tasks.names():
        results[task_name] = {}
        for pos_name in positional.names():
            try:
                results[task_name][pos_name] = one_step(task_name, pos_name, overrides)
            except Exception as err:  # shown in the table, not hidden
                results[task_name][pos_name] = {"error": f"{type(err).__name__}: {err}"}
    return results


def markdown(results: dict[str, dict[str, dict]], header: str) -> str:
    schemes = positional.names()
    rows = [[task_name, *(f"{c['loss']:.3f} ({c['seconds']:.2f}s)" if "loss" in c else f"ERROR {c['error'][:40]}"
                          for c in (row[s] for s in schemes))] for task_name, row in results.items()]
    lines = [header, "", "Loss before the step (s per step)", "",
             *pipe_table(["task", *schemes], rows, "l" * (len(schemes) + 1))]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny model (for tests)")
    parser.add_argument("--out", type=Path, default=Path("results/smoke"))
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = TINY if args.tiny else []
    results = matrix(overrides)
    header = (f"# Smoke matrix: one training step per task × scheme\n\n`python -m ropelab.smoke{' --tiny' if args.tiny else ''}`"
              f" on {time.strftime('%Y-%m-%d')}, {torch.get_num_threads()} torch threads, "
              f"{'tiny' if args.tiny else 'default'} model config, batch from data.batch_size.")
    text = markdown(results, header)
    atomic_write_text(args.out / "smoke.md", text)
    atomic_write_text(args.out / "smoke.json", json.dumps(results, indent=1) + "\n")
    print(text)
    failed = sum("error" in c or not c["finite"] for row in results.values() for c in row.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
