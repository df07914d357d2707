"""The accuracy of guessing without reading the sequence: the floor a task's accuracy is read against.

Two rules that do not follow the task's structure, and the better of them is the floor ("guess"):
- group mode: see only an example's group (the task's group key: pairs, chain length, length bin) and answer
  every answer token with that group's most frequent answer;
- in-context guess: answer uniformly among the distinct answer tokens that occur in the example's input
  (assoc_recall's values, variable_tracking's chain values; expected accuracy, no sampling of the guess).
A model at the floor has learned which tokens can be answers, not the task; "above chance" means above it.
A task may also name shortcuts (``Task.shortcuts``: indirect indexing's copying of the source letter), printed
beside the floor: a model at a shortcut's level has not learned the task either.

``floor`` gives the floor the claims are read against: exact where the task's distribution can be enumerated or
written in closed form (``EXACT``: global_counting's counts are binomial per length; mod_arith's operand tuples
are few), else estimated from ``SAMPLES`` examples (group mode fitted on one sample and scored on another), and
cached per task setting on disk (``cache_dir``) since sampling 10⁵ examples takes seconds.

    ropelab guess results/momentum_gamma      # one line per task found in the records' configs
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

import tasks
from tasks.base import IGNORE

SAMPLES = 100_000  # a sampled floor's standard error is then ≤ 0.16 points

from ropelab.core import record
from ropelab.core.cli import at_least


def _answers(task, rng, n):
    inputs, targets, groups = task.sample_grouped(rng, n)
    rows, _ = np.nonzero(targets != IGNORE)
    return np.asarray(groups)[rows], targets[targets != IGNORE]


def _context_hits(inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per answer token, the expected hit of a uniform pick among the answer tokens present in its row's input."""
    answer_ids = np.unique(targets[targets != IGNORE])
    size = int(max(inputs.max(initial=0), targets.max(initial=0))) + 1
    present = np.zeros((len(inputs), size), dtype=bool)
    rows = np.repeat(np.arange(len(inputs)), inputs.shape[1])
    ok = inputs.reshape(-1) >= 0
    present[rows[ok], inputs.reshape(-1)[ok]] = True
    candidates = present[:, answer_ids].sum(axis=1)
    r, c = np.nonzero(targets != IGNORE)
    answers = targets[r, c]
    hit = present[r, answers]
    return np.where(hit, 1.0 / np.maximum(candidates[r], 1), 0.0)


def context_guess_accuracy(task, n: int = 20000, seed: int = 0) -> float:
    """Expected accuracy of answering uniformly among the distinct answer tokens in the example's input
    (0 for an answer token that never occurs in inputs, such as global_counting's counts)."""
    inputs, targets, _ = task.sample_grouped(np.random.default_rng([seed, 2]), n)
    return float(np.mean(_context_hits(np.asarray(inputs), np.asarray(targets))))


def group_mode_accuracy(task, n: int = 20000, seed: int = 0) -> float:
    """Accuracy of answering each answer token with its group's most frequent answer (fit and score on two
    independent samples of ``n`` examples)."""
    fit_groups, fit_answers = _answers(task, np.random.default_rng([seed, 0]), n)
    pairs, counts = np.unique(np.stack([fit_groups, fit_answers], axis=1), axis=0, return_counts=True)
    order = np.lexsort((-counts, pairs[:, 0]))  # per group, its most frequent answer first (ties: the smallest)
    pairs = pairs[order]
    first = np.concatenate([[True], pairs[1:, 0] != pairs[:-1, 0]])
    mode = dict(zip(pairs[first, 0].tolist(), pairs[first, 1].tolist()))
    groups, answers = _answers(task, np.random.default_rng([seed, 1]), n)
    guesses = np.array([mode.get(g, -1) for g in groups.tolist()])
    return float(np.mean(guesses == answers))


def guess_accuracy(task, n: int = 20000, seed: int = 0) -> float:
    """The better of the group-mode and in-context guesses, from ``n`` sampled examples."""
    return max(group_mode_accuracy(task, n, seed), context_guess_accuracy(task, n, seed))


# ----------------------------------------------------------------------------------------------- exact floors

def _global_counting_exact(task) -> float:
    """The count of the queried symbol in a length-L sequence is Binomial(L, 1/n_symbols); lengths are uniform and
    grouped in bins, so the group mode scores Σ_bin max_c P(bin, c). The counts never occur in the input: the
    in-context guess scores 0."""
    from scipy.stats import binom

    lengths = np.arange(task.len_min, task.len_max + 1)
    counts = np.arange(task.len_max + 1)
    bins = -(-lengths // task.group_bin)
    joint = binom.pmf(counts[None, :], lengths[:, None], 1 / task.n_symbols) / len(lengths)
    return float(sum(joint[bins == b].sum(axis=0).max() for b in np.unique(bins)))


def _mod_arith_exact(task) -> float:
    """Every operand tuple of every term count, enumerated (7³ at the paper's setting): the group (term count) mode
    and the in-context guess (the answer is a number token, and the operands are number tokens too)."""
    operands = range(task.operand_min, task.operand_max + 1)
    per_terms = 1 / (task.terms_max - task.terms_min + 1)
    group, context = 0.0, 0.0
    for terms in range(task.terms_min, task.terms_max + 1):
        tuples = np.array(list(itertools.product(operands, repeat=terms)))
        answers = tuples.sum(axis=1) % task.modulus
        group += per_terms * np.bincount(answers).max() / len(tuples)
        hits = [(a in row) / len(set(row.tolist())) for row, a in zip(tuples, answers)]
        context += per_terms * float(np.mean(hits))
    return float(max(group, context))


EXACT: dict[str, Callable] = {"global_counting": _global_counting_exact, "mod_arith": _mod_arith_exact}


@dataclass(frozen=True)
class Floor:
    value: float
    how: str  # "exact", or "10⁵ samples"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ropelab" / "floors"


def _cache_key(task_cfg: dict, ood: bool) -> str:
    task = tasks.from_config(task_cfg, ood=ood)
    source = Path(inspect.getsourcefile(type(task))).read_text() + Path(__file__).read_text()  # code changes: resample
    text = json.dumps([task_cfg, ood, SAMPLES, source], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def floor(task_cfg: dict, ood: bool = False) -> Floor:
    """The guess floor of a run's task config (its OOD split's with ``ood``): exact where ``EXACT`` knows the task,
    else from ``SAMPLES`` examples, cached on disk per task setting."""
    task = tasks.from_config(task_cfg, ood=ood)
    if task.name in EXACT:
        return Floor(EXACT[task.name](task), "exact")
    path = cache_dir() / f"{task.name}-{_cache_key(task_cfg, ood)}.json"
    try:
        return Floor(float(json.loads(path.read_text())["floor"]), "10⁵ samples")
    except (OSError, ValueError, KeyError):
        pass
    value = guess_accuracy(task, SAMPLES)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"task": task_cfg, "ood": ood, "floor": value}, default=str))
    except OSError:
        pass  # a read-only home still gets the floor, only slower next time
    return Floor(value, "10⁵ samples")


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
    p.add_argument("--n", type=at_least(1), default=20000, help="examples to fit and to score the guess on")
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
