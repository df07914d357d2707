"""The benchmark card, from records alone: one scheme (with its options) on every task of the suite against rope and
against the best baseline, paired by seed; every scheme × task as a heat map of the difference from rope; a ranking
with its uncertainty. Verdict words and numbers are the project's one rule (``ropelab.analysis.verdict``).

Records: ``<results>/<task>/<job>/`` (``python -m ropelab.card`` trains them). A column is a scheme with the
``pos.`` options its records hold beyond the scheme's defaults (``rope pos.momentum.gamma=0.5``); the baselines are
the schemes at their defaults. A column is compared with rope only where its records' configs equal rope's but for
``pos.`` (and the seed): any other difference (a budget, a model) is a trial, and its row says so in one line and
compares nothing.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy.stats import rankdata

from ropelab.analysis import card_records, guess
from ropelab.analysis.card_suite import Suite, TaskSpec
from ropelab.analysis.report.figures import pyplot
from ropelab.analysis.report.sweep import SCHEME_ORDER
from ropelab.analysis.report.tables import markdown_table
from ropelab.analysis.stats import first_step_at, metric_curve
from ropelab.analysis.verdict import calibration_state, paired, render
from ropelab.core import identity
from ropelab.core.record import Record
import tasks

EXTRAPOLATION = "extrapolation.csv"   # in a code_lm record: loss per factor of the window (ropelab.card)
REFERENCE = "rope"
BOOTSTRAP = 2000
# the rule's words (ropelab.analysis.verdict.WORDS) for an interval clear of 0, and for one that includes it
DETECTED_WORDS = ("reproduced", "opposite")
NO_DIFFERENCE = "no difference detected"
# a card asks whether the scheme is better than the baseline: +1 (A > B) where the metric is higher-better
SIGN = {"higher": 1, "lower": -1}
# a card's words, not a paper's: the rule's "reproduced" (the expected direction, here "better") and "opposite"
CARD_WORDS = {"reproduced": "better", "opposite": "worse"}


def card_render(v, unit: str = "") -> str:
    """The rule's line in a card's words: better, worse, no difference detected (MDE), …"""
    return render(v, unit=unit, words=CARD_WORDS)


@dataclass
class Column:
    """One scheme with its options on one task: its records, one per seed."""

    label: str
    scheme: str
    options: dict[str, Any]
    records: list[Record] = field(default_factory=list)

    @property
    def seeds(self) -> list[int]:
        return sorted(r.seed for r in self.records)

    def values(self, metric: str, scale: float = 1.0) -> dict[int, float]:
        out = {}
        for r in self.records:
            v = (r.summary.get("final") or {}).get(metric)
            if isinstance(v, (int, float)) and math.isfinite(v):
                out[r.seed] = scale * float(v)
        return out

    def extrapolated(self, factor: float, metric: str = "loss") -> dict[int, float]:
        out = {}
        for r in self.records:
            path = r.path / EXTRAPOLATION
            if path.is_file():
                rows = pd.read_csv(path)
                hit = rows[(rows["factor"] == factor) & rows[metric].notna()]
                if len(hit):
                    out[r.seed] = float(hit[metric].iloc[0])
        return out

    def steps_to(self, metric: str, level: float) -> dict[int, float]:
        out = {}
        for r in self.records:
            if r.metrics is not None:
                out[r.seed] = first_step_at(metric_curve(r.metrics, metric), level)
        return out


def _value(text: str) -> Any:
    return yaml.safe_load(text)


def options_of(record: Record) -> dict[str, Any]:
    """The record's ``pos.`` keys that differ from its scheme's defaults."""
    base = card_records.defaults(record.config["task.name"], record.config["pos.name"])
    return {k: v for k, v in sorted(record.config.items())
            if k.startswith("pos.") and k != "pos.name" and base.get(k) != v}


def label_of(scheme: str, options: dict[str, Any]) -> str:
    return " ".join([scheme, *(f"{k}={_plain(v)}" for k, v in options.items())])


def _plain(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def columns(records: list[Record]) -> dict[str, Column]:
    """Completed records grouped by scheme and options, in the report's scheme order."""
    out: dict[str, Column] = {}
    for r in records:
        if not r.completed:
            continue
        opts = options_of(r)
        label = label_of(r.config["pos.name"], opts)
        out.setdefault(label, Column(label, r.config["pos.name"], opts)).records.append(r)
    order = {s: i for i, s in enumerate(SCHEME_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[1].scheme, len(order)), kv[0])))


def wanted_column(records: list[Record], scheme: str, options: dict[str, str]) -> Column:
    """The card's own column: records of ``scheme`` whose ``pos.`` options are the card's (given as override lines,
    compared as values) and the scheme's defaults otherwise."""
    want = {k: _value(line.split("=", 1)[1]) for k, line in options.items()}
    found = None
    for col in columns(records).values():
        if col.scheme == scheme and {k: v for k, v in col.options.items()} == {
                k: v for k, v in want.items() if card_records.defaults(col.records[0].config["task.name"], scheme).get(k) != v}:
            found = col
    if found is None:
        opts = {k: v for k, v in want.items()}
        found = Column(label_of(scheme, opts), scheme, opts)
    return found


# ----------------------------------------------------------------------------------------------- floors

def floors(record: Record) -> tuple[float, float]:
    """(in distribution, OOD) accuracy floor of the record's task: the guess floor or a named shortcut's level,
    whichever is higher (a model at either has not learned the task)."""
    return _floors(json.dumps(record.saved_config["task"], sort_keys=True))


@functools.cache
def _floors(task_json: str) -> tuple[float, float]:
    saved = json.loads(task_json)
    out = []
    for ood in (False, True):
        task = tasks.from_config(saved, ood=ood)
        out.append(max([guess.guess_accuracy(task), *task.shortcuts().values()]))
    return out[0], out[1]


# ----------------------------------------------------------------------------------------------- one task

@dataclass
class TaskCard:
    spec: TaskSpec
    mine: Column | None
    columns: dict[str, Column]
    refusal: str = ""              # a trial or missing records: the row compares nothing, and says why
    rows: list[dict] = field(default_factory=list)   # metric → the numbers and verdicts
    floor: tuple[float, float] | None = None

    @property
    def rope(self) -> Column | None:
        return self.columns.get(REFERENCE)


def _scale(spec: TaskSpec) -> tuple[float, str]:
    return (100.0, " pts") if spec.is_accuracy else (1.0, "")


def _compare(spec: TaskSpec, suite: Suite, a: dict, b: dict, floor: float | None, level: float | None,
             direction: str | None = None):
    scale, _ = _scale(spec)
    acc = spec.is_accuracy
    return paired(a, b, direction=SIGN[direction or spec.direction], planned=len(suite.seeds_for(spec.name)),
                  floor=floor * scale if acc and floor is not None else None,
                  ceiling=suite.ceiling * scale if acc else None,
                  margin=suite.margin * scale if acc else 0.0,
                  learned=level * scale if acc and level is not None else None)


def best_baseline(spec: TaskSpec, cols: dict[str, Column], exclude: str) -> Column | None:
    """The baseline (a scheme at its defaults, not the card's own) with the best mean in-distribution metric."""
    scale, _ = _scale(spec)
    best, best_mean = None, None
    for col in cols.values():
        if col.options or col.label == exclude:
            continue
        vals = list(col.values(spec.metric, scale).values())
        if not vals:
            continue
        mean = float(np.mean(vals))
        if best is None or (mean > best_mean if spec.direction == "higher" else mean < best_mean):
            best, best_mean = col, mean
    return best


def refusal(mine: Column, rope: Column | None) -> str:
    """Why ``mine`` cannot be compared with rope: no records, or configs that differ beyond ``pos.``."""
    if rope is None or not rope.records:
        return "no baseline records of rope on this task yet (ropelab campaign --tables card): nothing compared"
    if not mine.records:
        return f"no records of {mine.label} on this task: nothing compared"
    differ = card_records.differences(mine.records[0].config, rope.records[0].config,
                                      card_records.HOW_IT_RAN | {"seed"}, but=("pos.",))
    if differ:
        shown = ", ".join(f"{k}={a} (baselines: {b})" for k, (a, b) in list(differ.items())[:3])
        return (f"trial: {shown}{' …' if len(differ) > 3 else ''} — a card compares only runs whose config equals "
                f"the baselines' but for pos: not compared")
    return ""


def incomplete_baseline(rope: Column | None, seeds: list[int]) -> str:
    """Why the baseline cell gives no verdict yet: rope lacks some of the planned seeds."""
    have = set(rope.seeds) if rope is not None else set()
    missing = [s for s in seeds if s not in have]
    return (f"baseline incomplete: rope has {len(seeds) - len(missing)} of {len(seeds)} planned seeds (missing "
            f"{', '.join(map(str, missing[:5]))}{' …' if len(missing) > 5 else ''}): no verdict yet") if missing else ""


def missing_baselines(spec: TaskSpec, cols: dict[str, Column], seeds: list[int]) -> list[str]:
    """The schemes of conf/pos/ whose baseline cell on the task lacks some planned seed."""
    from ropelab.core.cli import group_choices

    return [s for s in group_choices("pos") if not (s in cols and set(seeds) <= set(cols[s].seeds))]


def computation(mine: Column, rope: Column, results: Path) -> str:
    """Why the two columns are not one computation (``ropelab.core.identity.pairable``: commits and machine kinds
    joined only by committed checks), with what would join them, else ""."""
    from ropelab.core.identity import commit_of, equivalence_command, kind_of, pairable

    pairing = pairable([r.summary for r in [*mine.records, *rope.records]])
    if pairing.ok:
        return ""
    join = ""
    theirs = sorted({commit_of(r.summary) for r in rope.records})
    ours = sorted({commit_of(r.summary) for r in mine.records})
    if "commits" in pairing.failed and len(theirs) == 1 and len(ours) == 1 and theirs != ours:
        join = (f"; {equivalence_command(theirs[0], ours[0], 'card')} checks whether the baselines' commit and "
                "the card's compute the same")
    if "kinds" in pairing.failed:
        join = (f"; the baselines ran on {', '.join(sorted({kind_of(r.summary) for r in rope.records}))}: a card "
                f"compares there, or here after a kind check (`ropelab reproduce card/{rope.records[0].summary.get('task')} "
                "--kind-check`, committed)")
    return f"not one computation: {pairing.reason}{join}"


def task_card(suite: Suite, spec: TaskSpec, results: Path, scheme: str, options: dict[str, str],
              mine_records: Path | None = None) -> TaskCard:
    if not spec.calibrated:
        return TaskCard(spec, None, {}, refusal=f"not calibrated: {spec.why}")
    cols = columns(card_records.records_under(results / spec.name))
    own = card_records.records_under((mine_records or results) / spec.name)
    mine = wanted_column(own, scheme, options)
    card = TaskCard(spec, mine, cols)
    card.refusal = refusal(mine, card.rope) or incomplete_baseline(card.rope, suite.seeds_for(spec.name)) \
        or computation(mine, card.rope, results)
    if card.refusal:
        return card
    card.floor = floors(card.rope.records[0]) if spec.is_accuracy else None
    scale, unit = _scale(spec)
    lacking = missing_baselines(spec, cols, suite.seeds_for(spec.name))
    best = None if lacking else best_baseline(spec, cols, exclude=mine.label)
    metrics = [(spec.metric, "in distribution", 0), *([(spec.ood, "OOD", 1)] if spec.ood else [])]
    for metric, what, i in metrics:
        a, r = mine.values(metric, scale), card.rope.values(metric, scale)
        floor = card.floor[i] if card.floor else None
        level = spec.level if i == 0 else None
        row = {"metric": metric, "what": what, "mine": a, "rope": r, "unit": unit,
               "vs_rope": _compare(spec, suite, a, r, floor, level)}
        if lacking:
            row["best_missing"] = lacking
        if best is not None:
            row["best"] = best.label
            row["best_values"] = best.values(metric, scale)
            row["vs_best"] = _compare(spec, suite, a, row["best_values"], floor, level)
        if level is not None:
            row["steps"] = mine.steps_to(metric, level)
            row["rope_steps"] = card.rope.steps_to(metric, level)
        card.rows.append(row)
    for factor in spec.extrapolation:
        a, r = mine.extrapolated(factor), card.rope.extrapolated(factor)
        card.rows.append({"metric": f"loss at {factor:g}×", "what": "extrapolation", "mine": a, "rope": r,
                          "unit": "", "vs_rope": _compare(spec, suite, a, r, None, None, "lower")})
    return card


# ----------------------------------------------------------------------------------------------- text

def _mean_sd(values: dict[int, float], digits: int = 1) -> str:
    if not values:
        return "–"
    v = np.asarray(list(values.values()))
    sd = f" ± {v.std(ddof=1):.{digits}f}" if len(v) > 1 else ""
    return f"{v.mean():.{digits}f}{sd} (n={len(v)})"


def _solve(values: dict[int, float], level: float | None) -> str:
    if level is None or not values:
        return ""
    return f", solved {sum(v >= level for v in values.values())}/{len(values)}"


def _steps(steps: dict[int, float]) -> str:
    got = [s for s in steps.values() if not math.isnan(s)]
    return f"{np.mean(got):,.0f} ({len(got)}/{len(steps)})" if got else f"none (0/{len(steps)})"


def task_rows(card: TaskCard, label: str) -> list[dict]:
    """The card's table rows of one task (one per metric), or one row saying why it compares nothing."""
    spec = card.spec
    if card.refusal:   # the scheme's own numbers show as soon as they exist
        scale, _ = _scale(spec)
        level = spec.level * scale if spec.level is not None and spec.calibrated else None
        own = card.mine.values(spec.metric, scale) if card.mine is not None and spec.calibrated else {}
        rope = card.rope.values(spec.metric, scale) if card.rope is not None and spec.calibrated else {}
        digits = 1 if spec.is_accuracy else 3
        return [{"task": spec.name, "metric": spec.metric if spec.calibrated else "–",
                 label: _mean_sd(own, digits) + _solve(own, level), "rope": _mean_sd(rope, digits) + _solve(rope, level),
                 f"{label} − rope": card.refusal, "n · MDE": "–", "best baseline": "–", f"{label} − best": "–"}]
    digits = 1 if spec.is_accuracy else 3
    scale, _ = _scale(spec)
    out = []
    for row in card.rows:
        level = spec.level * scale if row.get("steps") is not None else None
        mine = _mean_sd(row["mine"], digits) + _solve(row["mine"], level)
        rope = _mean_sd(row["rope"], digits) + _solve(row["rope"], level)
        if row.get("steps") is not None:
            mine += f"; to {spec.level:g}: {_steps(row['steps'])}"
            rope += f"; to {spec.level:g}: {_steps(row['rope_steps'])}"
        v = row["vs_rope"]
        achieved = f"{v.mde:.{digits}f}{row['unit']}" if v.mde is not None else "–"
        out.append({"task": spec.name, "metric": f"{row['metric']} ({row['what']})", label: mine, "rope": rope,
                    f"{label} − rope": card_render(row["vs_rope"], unit=row["unit"]),
                    "n · MDE": f"{v.n if v.n >= v.planned else f'{v.n} of {v.planned}'} · {achieved}",
                    "best baseline": (f"{row['best']}: {_mean_sd(row['best_values'], digits)}" if "best" in row
                                      else f"incomplete: {', '.join(row['best_missing'])} lack planned seeds"
                                      if row.get("best_missing") else "–"),
                    f"{label} − best": card_render(row["vs_best"], unit=row["unit"]) if "vs_best" in row else "–"})
    return out


# ----------------------------------------------------------------------------------------------- all schemes

def difference_matrix(suite: Suite, cards: list[TaskCard], extra: Column | None = None) -> pd.DataFrame:
    """Column label × task: the verdict of (column − rope) on the in-distribution metric, for every baseline and the
    card's own column (None where a task compares nothing)."""
    rows: dict[str, dict[str, Any]] = {}
    for card in cards:
        if not card.spec.calibrated or card.rope is None or not card.rope.records:
            continue
        scale, _ = _scale(card.spec)
        floor = floors(card.rope.records[0])[0] if card.spec.is_accuracy else None
        cols = dict(card.columns)
        if card.mine is not None and card.mine.records and not card.refusal:
            cols.setdefault(card.mine.label, card.mine)
        for label, col in cols.items():
            if label == REFERENCE or refusal(col, card.rope):
                continue
            rows.setdefault(label, {})[card.spec.name] = _compare(
                card.spec, suite, col.values(card.spec.metric, scale), card.rope.values(card.spec.metric, scale),
                floor, card.spec.level)
    return pd.DataFrame.from_dict(rows, orient="index")


def is_detected(v) -> bool:
    """A verdict whose interval the rule read as a difference (either way), not "no difference" or "says nothing"."""
    return v.word in DETECTED_WORDS


def heat_map(matrix: pd.DataFrame, suite: Suite, out: Path, title: str) -> Path | None:
    """Difference from rope per scheme × task: a difference the rule detects coloured by how much better (blue) or
    worse (red) it is relative to the largest on that task, ``*`` marking it; one it does not detect white; grey a
    cell it says nothing of."""
    if matrix.empty:
        return None
    plt = pyplot()
    tasks_ = list(matrix.columns)
    schemes = list(matrix.index)
    oriented = np.full((len(schemes), len(tasks_)), np.nan)
    text = [["" for _ in tasks_] for _ in schemes]
    for j, task in enumerate(tasks_):
        spec = suite.tasks[task]
        sign = 1.0 if spec.direction == "higher" else -1.0
        diffs = [matrix.iloc[i, j].diff for i in range(len(schemes)) if _has(matrix.iloc[i, j])]
        span = max([abs(d) for d in diffs if d is not None and math.isfinite(d)] or [1.0]) or 1.0
        for i in range(len(schemes)):
            v = matrix.iloc[i, j]
            if not _has(v) or v.diff is None or not math.isfinite(v.diff):
                text[i][j] = v.word if _has(v) else ""
                continue
            # colour encodes the verdict: a difference the rule does not detect is drawn as none (white)
            oriented[i, j] = sign * v.diff / span if is_detected(v) else 0.0
            text[i][j] = f"{v.diff:+.{1 if spec.is_accuracy else 3}f}{'*' if is_detected(v) else ''}"
    fig, ax = plt.subplots(figsize=(max(1.3 * len(tasks_) + 2.5, 6.5), 0.45 * len(schemes) + 1.8))
    ax.set_facecolor("0.85")
    ax.imshow(np.ma.masked_invalid(oriented), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    for i in range(len(schemes)):
        for j in range(len(tasks_)):
            dark = math.isfinite(oriented[i, j]) and abs(oriented[i, j]) > 0.6
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(len(tasks_)), [f"{t}\n({'pts' if suite.tasks[t].is_accuracy else suite.tasks[t].metric})"
                                       for t in tasks_], fontsize=7)
    ax.set_yticks(range(len(schemes)), schemes, fontsize=7)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    path = out / "heatmap.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _has(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def ranking(suite: Suite, cards: list[TaskCard], extra: Column | None = None, seed: int = 0) -> pd.DataFrame:
    """Mean rank over the tasks (1 = best on a task's in-distribution metric) of every column with the same seeds
    as rope on every compared task, with a 95 % bootstrap interval: seeds resampled per task, the same draw for
    every column (the pairing kept), ``BOOTSTRAP`` draws from a fixed generator."""
    per_task = []
    for card in cards:
        if not card.spec.calibrated or card.rope is None or not card.rope.records:
            continue
        scale, _ = _scale(card.spec)
        cols = {label: col for label, col in card.columns.items() if not col.options and not refusal(col, card.rope)
                or label == REFERENCE}
        if card.mine is not None and card.mine.records and not card.refusal:
            cols.setdefault(card.mine.label, card.mine)
        seeds = sorted(set.intersection(*(set(c.values(card.spec.metric, scale)) for c in cols.values())))
        if len(seeds) < 2:
            continue
        values = np.array([[c.values(card.spec.metric, scale)[s] for s in seeds] for c in cols.values()])
        per_task.append((list(cols), values, 1.0 if card.spec.direction == "higher" else -1.0))
    if not per_task:
        return pd.DataFrame()
    labels = sorted(set.intersection(*(set(l) for l, _, _ in per_task)), key=lambda l: per_task[0][0].index(l))
    rng = np.random.default_rng(seed)

    def mean_rank(draw: list[np.ndarray] | None) -> np.ndarray:
        total = np.zeros(len(labels))
        for (cols, values, sign), idx in zip(per_task, draw or [None] * len(per_task)):
            rows = [cols.index(l) for l in labels]
            v = values[rows][:, idx] if idx is not None else values[rows]
            total += rankdata(-sign * v.mean(axis=1))
        return total / len(per_task)

    point = mean_rank(None)
    draws = np.array([mean_rank([rng.integers(0, v.shape[1], v.shape[1]) for _, v, _ in per_task])
                      for _ in range(BOOTSTRAP)])
    low, high = np.percentile(draws, [2.5, 97.5], axis=0)
    best = (draws == draws.min(axis=1, keepdims=True)).mean(axis=0)
    table = pd.DataFrame({"scheme": labels, "mean rank": point, "95 % interval": [f"[{a:.2f}, {b:.2f}]" for a, b in
                                                                                 zip(low, high)],
                          "P(ranked first)": best, "tasks": len(per_task)})
    return table.sort_values("mean rank", kind="stable").reset_index(drop=True).round({"mean rank": 2,
                                                                                   "P(ranked first)": 2})


# ----------------------------------------------------------------------------------------------- writing

def _spread(cards: list[TaskCard]) -> str:
    """One line when a task's compared records ran at more than one commit or on more than one machine kind: what
    joins them into one computation (``ropelab.core.identity.pairable``; where nothing does, that task is refused)."""
    from ropelab.core.identity import ONE_COMPUTATION, pairable

    joins = set()
    for card in cards:
        if card.refusal:
            continue
        pairing = pairable([r.summary for r in [*card.mine.records, *card.rope.records]])
        if pairing.ok and pairing.reason != ONE_COMPUTATION:
            joins.add(pairing.reason)
    return f"Compared records of several commits or machines are one computation: {'; '.join(sorted(joins))}." \
        if joins else ""


def _machines(cards: list[TaskCard]) -> list[str]:
    seen, counted = {}, set()
    for card in cards:
        for col in ([card.mine] if card.mine else []) + list(card.columns.values()):
            for r in col.records:
                if r.path.resolve() in counted:
                    continue
                counted.add(r.path.resolve())
                key = (identity.kind_of(r.summary), r.commit)
                seen[key] = seen.get(key, 0) + 1
    return [f"- {kind}, commit {commit}: {n} records" for (kind, commit), n in sorted(seen.items())]


def write_card(suite: Suite, specs: list[TaskSpec], results: Path, scheme: str, options: dict[str, str],
               trial: list[str], trial_records: Path, out: Path, full: bool = True, tier: str = "") -> Path:
    """The card of ``scheme`` with ``options`` into ``out``/card.md (card-<tasks>.md for a TASKS restriction), its
    heat map and numbers; returns the markdown file."""
    out.mkdir(parents=True, exist_ok=True)
    cards = [task_card(suite, spec, results, scheme, options, trial_records if trial else None) for spec in specs]
    label = label_of(scheme, {k: _value(v.split("=", 1)[1]) for k, v in options.items()})
    stem = "card" if full else "card-" + "-".join(s.name for s in specs)
    md = [f"# Benchmark card: {label}", "",
          f"Suite: `{_rel(suite.path)}` (seeds from {suite.seeds[0]}, n per task as planned"
          + (f"; tier {tier}: at least {len(suite.seeds)}" if tier not in ("", "full") else "")
          + f"); baselines: `{_rel(results)}`"
          + (f"; this scheme's records: `{_rel(trial_records)}`" if trial else "") + "."
          + ("" if full else f" Tasks: {', '.join(s.name for s in specs)} only.")
          + (f" Tier: **{tier}**." if tier else "") + " Per task: n (every seed recorded, paired by seed; \"k of n\""
          " where fewer than planned) and the MDE the records achieved (the smallest difference they detect at 80 %"
          " power).", ""]
    if spread := _spread(cards):
        md += [spread, ""]
    if trial:
        md += [f"**Trial** ({' '.join(trial)}): not the suite's setting — compared with nothing.", ""]
    md += ["Verdicts: the project's one rule (`ropelab.analysis.verdict`), A − B paired by seed, asking whether A "
           f"({label}) is better than B: **better**, **worse**, or no difference detected with the smallest "
           "difference n detects (MDE); says nothing where both sides sit at the floor or the ceiling "
           "(accuracy floor: the guess or a shortcut's level, whichever is higher). Accuracies in points, losses in "
           "nats (lower is better).", "",
           "## Per task", "",
           markdown_table(pd.DataFrame([r for c in cards for r in task_rows(c, label)]).set_index("task"), "task"), ""]
    matrix = difference_matrix(suite, cards)
    figure = heat_map(matrix, suite, out, f"scheme − rope, paired by seed (card: {label})\nblue better, red worse, "
                                          "* a difference the rule detects, grey: nothing compared")
    if figure is not None:
        md += ["## Every scheme × task: difference from rope", "", f"![heat map]({figure.name})", "",
               markdown_table(matrix.map(lambda v: card_render(v) if _has(v) else "–").rename_axis("scheme"), "scheme"), ""]
    ranks = ranking(suite, cards)
    if not ranks.empty:
        md += ["## Ranking", "", "Mean rank over the compared tasks (1 = best in distribution); 95 % bootstrap "
               f"interval over seeds ({BOOTSTRAP} draws, seeds resampled per task, the same for every scheme); a scheme "
               "without records on every compared task is left out.", "",
               markdown_table(ranks.set_index("scheme"), "scheme"), ""]
    md += ["## Machines and code", "", *(_machines(cards) or ["- no records"]), ""]
    path = out / f"{stem}.md"
    path.write_text("\n".join(md))
    _numbers(cards).to_csv(out / f"{stem}.csv", index=False)
    return path


def write_cross_table(suite: Suite, specs: list[TaskSpec], results: Path, out: Path,
                      name: str = "cross_table.md") -> Path:
    """Every baseline on every task: mean ± SD and solve rate, the best scheme per task and its difference from rope,
    the heat map and the ranking; into ``out``/cross_table.md."""
    out.mkdir(parents=True, exist_ok=True)
    cards = [task_card(suite, spec, results, REFERENCE, {}) for spec in specs]
    rows = []
    for card in cards:
        spec = card.spec
        if not spec.calibrated:
            rows.append({"task": spec.name, "metric": "–", "—": card.refusal})
            continue
        scale, _ = _scale(spec)
        row = {"task": spec.name, "metric": spec.metric}
        for label, col in card.columns.items():   # every scheme's numbers as soon as they exist
            if not col.options:
                vals = col.values(spec.metric, scale)
                row[label] = _mean_sd(vals, 1 if spec.is_accuracy else 3) + _solve(
                    vals, spec.level * scale if spec.level is not None else None)
        if card.rope is None:
            rows.append({**row, "—": card.refusal})
            continue
        if spec.is_accuracy:   # the calibration's pick, checked on the baselines' fresh seeds
            fresh = card.rope.values(spec.metric, 1.0)
            row["rope's seeds here"] = calibration_state(fresh.values(), floors(card.rope.records[0])[0],
                                                         suite.margin, suite.ceiling) if fresh else "–"
        best = best_baseline(spec, card.columns, exclude="")
        if best is not None and best.label == REFERENCE:
            row["best"] = REFERENCE
        elif best is not None:
            v = _compare(spec, suite, best.values(spec.metric, scale), card.rope.values(spec.metric, scale),
                         floors(card.rope.records[0])[0] if spec.is_accuracy else None, spec.level)
            row["best"] = f"{best.label}: {card_render(v, unit=' pts' if spec.is_accuracy else '')} vs rope"
        rows.append(row)
    md = [f"# Cross-table: every scheme × the suite's tasks", "",
          f"Suite `{_rel(suite.path)}`, records `{_rel(results)}`, seeds from {suite.seeds[0]} (n per task as planned). "
          "\"rope's seeds here\": the calibration's rule on rope's baseline seeds (fresh, never the calibration's): "
          f"partial where every seed is {100 * suite.margin:g} points clear of the floor and of the ceiling, as the "
          "setting was picked to be; floor or ceiling where a seed is not, and the task's differences there say less.",
          "",
          markdown_table(pd.DataFrame(rows).set_index("task").fillna("–"), "task"), ""]
    matrix = difference_matrix(suite, cards)
    figure = heat_map(matrix, suite, out, "scheme − rope, paired by seed\nblue better, red worse, * a difference "
                                          "the rule detects, grey: nothing compared")
    if figure is not None:
        md += [f"![heat map]({figure.name})", ""]
    ranks = ranking(suite, cards)
    if not ranks.empty:
        md += ["## Ranking", "", markdown_table(ranks.set_index("scheme"), "scheme"), ""]
    md += ["## Machines and code", "", *(_machines(cards) or ["- no records"]), ""]
    path = out / name
    path.write_text("\n".join(md))
    return path


def _numbers(cards: list[TaskCard]) -> pd.DataFrame:
    rows = []
    for card in cards:
        for row in card.rows:
            for who in ("vs_rope", "vs_best"):
                if who in row:
                    v = row[who]
                    rows.append({"task": card.spec.name, "metric": row["metric"], "against": who[3:],
                                 **{k: getattr(v, k, None) for k in ("word", "diff", "low", "high", "n", "planned",
                                                                     "mde", "solve", "solve_p", "reason")}})
    return pd.DataFrame(rows)


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
