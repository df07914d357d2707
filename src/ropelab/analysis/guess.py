"""The accuracy of guessing without reading the sequence: the floor a task's accuracy is read against.

Two rules that do not follow the task's structure, and the better of them is the floor ("guess"):
- group mode: see only an example's group (the task's group key: pairs, chain length, length bin) and answer
  every answer token with that group's most frequent answer (counted on one sample, scored on another);
- in-context guess: answer uniformly among the distinct answer tokens that occur in the example's input
  (assoc_recall's values, variable_tracking's chain values; expected accuracy, no sampling of the guess).
A model at the floor has learned which tokens can be answers, not the task; "above chance" means above it.
A task may also name shortcuts (``Task.shortcuts``: indirect indexing's copying of the source letter), printed
beside the floor: a model at a shortcut's level has not learned the task either.

    python -m ropelab.guess results/momentum_gamma      # one line per task found in the records' configs
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

import numpy as np

import tasks
from tasks.base import IGNORE

from ropelab.core import record


def _answers(task, rng, n):
    inputs, targets, groups = task.sample_grouped(rng, n)
    rows, _ = np.nonzero(targets != IGNORE)
    return np.asarray(groups)[rows], targets[targets != IGNORE]


def context_guess_accuracy(task, n: int = 20000, seed: int = 0) -> float:
    """Expected accuracy of answering uniformly among the distinct answer tokens in the example's input
    (0 for an answer token that never occurs in inputs, such as global_counting's counts)."""
    inputs, targets, _ = task.sample_grouped(np.random.default_rng([seed, 2]), n)
    vocabulary = set(targets[targets != IGNORE].tolist())
    hits = []
    for row_in, row_t in zip(inputs, targets):
        candidates = vocabulary & set(row_in.tolist())
        for answer in row_t[row_t != IGNORE].tolist():
            hits.append(1.0 / len(candidates) if answer in candidates else 0.0)
    return float(np.mean(hits))


def guess_accuracy(task, n: int = 20000, seed: int = 0) -> float:
    """The better of the group-mode and in-context guesses: the task's floor."""
    return max(group_mode_accuracy(task, n, seed), context_guess_accuracy(task, n, seed))


def group_mode_accuracy(task, n: int = 20000, seed: int = 0) -> float:
    """Accuracy of answering each answer token with its group's most frequent answer (fit and score on two
    independent samples of ``n`` examples)."""
    fit_groups, fit_answers = _answers(task, np.random.default_rng([seed, 0]), n)
    counts: dict = defaultdict(Counter)
    for g, a in zip(fit_groups.tolist(), fit_answers.tolist()):
        counts[g][a] += 1
    mode = {g: c.most_common(1)[0][0] for g, c in counts.items()}
    groups, answers = _answers(task, np.random.default_rng([seed, 1]), n)
    guesses = np.array([mode.get(g, -1) for g in groups.tolist()])
    return float(np.mean(guesses == answers))


def _task_configs(configs: Iterable[dict]) -> dict[str, dict]:
    """The task sections of the runs whose configs (config.yaml as saved) are given, one per task (per rung of a
    ladder)."""
    found: dict[str, dict] = {}
    for config in configs:
        task_cfg = config["task"]
        rung = task_cfg.get("rung")
        found.setdefault(task_cfg["name"] + (f" rung {rung}" if rung is not None else ""), task_cfg)
    return dict(sorted(found.items()))


def baselines(configs: Iterable[dict], n: int = 20000) -> dict[str, float]:
    """Guess accuracy (the floor) per task (per rung) of the runs whose configs are given."""
    return {name: guess_accuracy(tasks.from_config(cfg), n) for name, cfg in _task_configs(configs).items()}


def shortcut_levels(configs: Iterable[dict]) -> dict[str, dict[str, float]]:
    """Each task's (rung's) named shortcuts (``Task.shortcuts``) for the runs whose configs are given; tasks that
    name none are left out."""
    return {name: levels for name, cfg in _task_configs(configs).items() if (levels := tasks.from_config(cfg).shortcuts())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("record_root", type=Path, help="a folder of run records, e.g. results/momentum_gamma")
    p.add_argument("--n", type=int, default=20000, help="examples to fit and to score the guess on")
    args = p.parse_args(argv)
    configs = [r.saved_config for r in record.under(args.record_root) if r.saved_config]
    for name, acc in baselines(configs, args.n).items():
        print(f"{name}: guess accuracy {100 * acc:.1f} %")
    for name, levels in shortcut_levels(configs).items():
        for shortcut, acc in levels.items():
            print(f"{name}: shortcut {shortcut!r} {100 * acc:.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
