"""Every paper claim ropelab checks, declared once (``conf/claims/<paper>.yaml``) and decided from the committed
records by the one rule of ``ropelab.analysis.verdict`` (issue 36): no verdict is typed by hand.

A declaration names the paper's statement, the records it reads (a table folder under ``results/`` and a
selection of config values), the metric, the form of the test, the direction the paper expects, the seeds planned
before the runs and the level that counts as learned. Forms:

* ``paired``    — A − B by seed (``a`` / ``b``: the selections of the two cells);
* ``level``     — A against a fixed ``threshold`` (a level, the guess floor, a shortcut's accuracy);
* ``trend``     — per seed, the least-squares slope of the metric over ``axis`` (per step of its ``values``, in
  their order), against 0;
* ``composite`` — several named ``parts`` (each any form, inheriting the claim's keys): "partly" when they
  disagree.

The protocol is enforced here, not remembered: a comparison whose records ran at more than one commit or on more
than one CPU kind is refused, with the line that says so, unless the claim's ``equivalent`` says why they may be
pooled; seeds that also ran in a calibration of the same config (``calibration``: table and selection) are flagged;
fewer pairs than ``seeds`` is incomplete (k of n).
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

import tasks

from ropelab.analysis import verdict as V
from ropelab.analysis.guess import guess_accuracy
from ropelab.analysis.stats import onset_step, sawtooth, train_loss
from ropelab.core.config import flatten
from ropelab.core.errors import ConfigError

FORMS = ("paired", "level", "trend", "composite")
METRICS = ("val/acc", "val/exact", "val/loss", "test/acc", "test/exact", "test/loss", "ood/acc", "ood/exact",
           "ood/loss", "attention/local_mass", "attention/local_mass_over_uniform", "onset", "phase/alternation")
ACCURACIES = {"val/acc", "val/exact", "test/acc", "test/exact", "ood/acc", "ood/exact"}
CLAIM_KEYS = {"id", "claim", "says", "form", "table", "where", "a", "b", "metric", "direction", "seeds", "learned",
              "floor", "ceiling", "margin", "threshold", "axis", "values", "parts", "name", "equivalent",
              "calibration", "note", "row", "drop"}
DROP_KEYS = {"axis", "from", "to"}
GUESS_EXAMPLES = 4000  # enough for the floor to ±1 point; the command stays well under a minute
EQUIVALENT_KEYS = {"commits", "cpus"}


# ----------------------------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Record:
    table: str
    rel: str
    config: dict[str, Any]
    summary: dict
    path: Path

    @property
    def seed(self) -> int | None:
        return self.config.get("seed")

    @property
    def commit(self) -> str:
        return str((self.summary.get("machine") or {}).get("commit") or "unknown")[:7]

    @property
    def cpu(self) -> str:
        machine = self.summary.get("machine") or {}
        return str((machine.get("cpu") or {}).get("model") or self.summary.get("accelerator") or "unknown")

    @property
    def budget(self) -> str:
        return f"{self.config.get('trainer.max_steps')} steps × batch {self.config.get('data.batch_size')}"

    def value(self, metric: str) -> float:
        final = self.summary.get("final") or {}
        attention = self.summary.get("attention") or {}
        if metric == "attention/local_mass":
            return float(attention.get("local_mass", math.nan))
        if metric == "attention/local_mass_over_uniform":
            return float(attention.get("local_mass", math.nan)) - float(attention.get("uniform", math.nan))
        if metric == "onset":  # the step the train loss leaves its plateau (ropelab.analysis.stats)
            metrics = pd.read_csv(self.path / "metrics.csv") if (self.path / "metrics.csv").is_file() else None
            onset = onset_step(train_loss(metrics))
            return math.nan if onset is None else float(onset)
        if metric == "phase/alternation":  # how often neighbouring channel pairs of the final Φ differ in sign
            trace = self.path / "positional_trace.npz"
            if not trace.is_file():
                return math.nan
            with np.load(trace) as z:
                return float(sawtooth(z["phase"][-1], permutations=0)["alternation"]) if "phase" in z.files else math.nan
        return float(final.get(metric, math.nan))


def read_records(results: Path) -> dict[str, list[Record]]:
    """Every completed record under ``results``, by table (its folder relative to ``results``: a calibration task
    is ``calibration/mod_arith``). A linked run folder reads in each table that links it."""
    tables: dict[str, list[Record]] = {}
    for dirpath, dirnames, filenames in os.walk(results, followlinks=True):
        dirnames[:] = sorted(n for n in dirnames if n not in ("report", "checkpoints") and not n.startswith("."))
        if "summary.json" not in filenames or "config.yaml" not in filenames:
            continue
        d = Path(dirpath)
        summary = json.loads((d / "summary.json").read_text())
        if summary.get("status") != "completed":
            continue
        config = flatten(yaml.load((d / "config.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
        table = d.parent.relative_to(results).as_posix()
        tables.setdefault(table, []).append(Record(table, d.name, config, summary, d))
        dirnames[:] = []
    return tables


def _same(value: Any, wanted: Any) -> bool:
    try:
        return float(value) == float(wanted)
    except (TypeError, ValueError):
        return str(value) == str(wanted)


def select(records: list[Record], where: dict[str, Any]) -> list[Record]:
    return [r for r in records if all(_same(r.config.get(k), v) for k, v in where.items())]


# ----------------------------------------------------------------------------------------------- declarations

@dataclass
class Claim:
    paper: str
    spec: dict[str, Any]
    source: str
    parent: "Claim | None" = None

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.spec:
            return self.spec[key]
        if self.parent is not None and key not in ("form", "parts", "name", "a", "b", "threshold"):
            return self.parent.get(key, default)
        return default

    @property
    def id(self) -> str:
        return self.spec.get("id") or self.spec.get("name") or "?"

    @cached_property
    def parts(self) -> list["Claim"]:
        return [Claim(self.paper, p, f"{self.source}: part {p.get('name', i)}", self)
                for i, p in enumerate(self.spec.get("parts") or [])]


def _bad(where: str, key: str, value: Any, valid) -> ConfigError:
    return ConfigError(f"{where}: {key} {value!r} is not one of: {', '.join(map(str, valid))}")


ROOT = Path(__file__).resolve().parents[3]  # the checkout: conf/ and results/ sit at its root


def _schemes() -> list[str]:
    return sorted(p.stem for p in (ROOT / "conf" / "pos").glob("*.yaml"))


NAMED = {"pos.name": _schemes, "task.name": lambda: sorted(tasks.names())}


@functools.cache
def planned_tables() -> set[str]:
    """The tables a preset records into (``record: results/<table>`` in conf/experiment/): valid before they hold a
    record, so a claim can be declared before its runs."""
    found = set()
    for preset in (ROOT / "conf" / "experiment").glob("*.yaml"):
        record = (yaml.safe_load(preset.read_text()) or {}).get("record")
        if isinstance(record, str) and record.startswith("results/"):
            found.add(record.removeprefix("results/"))
    return found


def validate(claim: Claim, tables: dict[str, list[Record]]) -> None:
    """One line naming the first bad key of the declaration and the valid choices (ConfigError)."""
    where = claim.source
    for key in claim.spec:
        if key not in CLAIM_KEYS:
            raise _bad(where, "key", key, sorted(CLAIM_KEYS))
    form = claim.spec.get("form")
    if form not in FORMS:
        raise _bad(where, "form", form, FORMS)
    if form == "composite":
        if not claim.parts:
            raise ConfigError(f"{where}: a composite needs parts (a list of claims)")
        for part in claim.parts:
            validate(part, tables)
        return
    table = claim.get("table")
    if table not in tables and table not in planned_tables():
        raise _bad(where, "table", table, sorted(set(tables) | planned_tables()))
    metric = claim.get("metric")
    if metric not in METRICS:
        raise _bad(where, "metric", metric, METRICS)
    if claim.get("direction") not in V.DIRECTIONS:
        raise _bad(where, "direction", claim.get("direction"), V.DIRECTIONS)
    drop = claim.get("drop")
    if drop is not None and set(drop) != DROP_KEYS:
        raise _bad(where, "drop keys", sorted(drop), sorted(DROP_KEYS))
    if not isinstance(claim.get("seeds"), list) or not claim.get("seeds"):
        raise ConfigError(f"{where}: seeds must list the seeds planned before the runs")
    records = tables.get(table) or []
    known = set().union(*(r.config for r in records)) if records else None
    for selection in ("where", "a", "b"):
        chosen = claim.get(selection) if selection == "where" else claim.spec.get(selection)
        for key, value in (chosen or {}).items():
            if known is not None and key not in known:
                raise _bad(where, f"{selection} key", key, sorted(k for k in known if not k.startswith("logger")))
            if key in NAMED and str(value) not in NAMED[key]():
                raise _bad(where, f"{selection} {key}", value, NAMED[key]())
    if form == "paired" and not (claim.spec.get("a") and claim.spec.get("b")):
        raise ConfigError(f"{where}: a paired claim needs a and b (the selections of the two cells)")
    if form == "level" and claim.spec.get("threshold") is None:
        raise ConfigError(f"{where}: a level claim needs threshold")
    if form == "trend" and not (claim.get("axis") and claim.get("values")):
        raise ConfigError(f"{where}: a trend claim needs axis and values")
    for key in (claim.get("equivalent") or {}):
        if key not in EQUIVALENT_KEYS:
            raise _bad(where, "equivalent key", key, sorted(EQUIVALENT_KEYS))
    for cal in claim.get("calibration") or []:
        if cal.get("table") not in tables:
            raise _bad(where, "calibration table", cal.get("table"), sorted(t for t in tables if t.startswith("calibration")))


def load_claims(folder: Path, tables: dict[str, list[Record]]) -> list[Claim]:
    claims = []
    for path in sorted(folder.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text()) or {}
        for i, spec in enumerate(doc.get("claims") or []):
            claim = Claim(doc.get("paper", path.stem), spec, f"{path.name}: claim {spec.get('id', i)}")
            validate(claim, tables)
            claims.append(claim)
    return claims


# ----------------------------------------------------------------------------------------------- verdicts

@dataclass
class Decided:
    claim: Claim
    verdict: V.Verdict
    records: list[Record] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    def conditions(self) -> str:
        recs = self.records
        if not recs:
            return ""
        parts = [", ".join(sorted({f"results/{r.table}" for r in recs})),
                 " / ".join(sorted({r.budget for r in recs})),
                 " / ".join(sorted({r.cpu for r in recs})),
                 "commit " + ", ".join(sorted({r.commit for r in recs}))]
        planned = self.claim.get("seeds") or self.claim.parts[0].get("seeds")
        run = sorted({r.seed for r in recs})
        parts.append(f"seeds {_spans(run)} ({len(run)} of {len(planned)} planned)")
        return "; ".join(parts + self.flags)


def _spans(seeds: list[int]) -> str:
    """0, 1, 2, 5 → "0–2, 5"."""
    out, start = [], None
    for i, s in enumerate(seeds):
        if start is None:
            start = s
        if i + 1 == len(seeds) or seeds[i + 1] != s + 1:
            out.append(f"{start}" if start == s else f"{start}–{s}")
            start = None
    return ", ".join(out)


def _by_seed(records: list[Record], metric: str, drop: dict | None = None) -> dict[int, float]:
    """metric by seed; with ``drop`` ({axis, from, to}), the relative drop (m(from) − m(to)) / m(from) of each
    seed between the two settings of the axis."""
    if drop is None:
        return {r.seed: r.value(metric) for r in records if r.seed is not None}
    start = _by_seed(select(records, {drop["axis"]: drop["from"]}), metric)
    end = _by_seed(select(records, {drop["axis"]: drop["to"]}), metric)
    return {s: (start[s] - end[s]) / start[s] for s in start if s in end and start[s]}


@functools.lru_cache(maxsize=None)
def _task_levels(rec_path: Path) -> dict[str, float]:
    """The guess floor (``ropelab.analysis.guess``) and the named shortcuts (``Task.shortcuts``) of a record's task."""
    task_cfg = yaml.safe_load((rec_path / "config.yaml").read_text())["task"]
    task = tasks.from_config(task_cfg)
    return {"guess": guess_accuracy(task, GUESS_EXAMPLES), **{f"shortcut:{k}": v for k, v in task.shortcuts().items()}}


def level_value(spec: Any, records: list[Record], where: str) -> float | None:
    """A floor or threshold: a number, ``guess`` (the task's guess accuracy) or ``shortcut:<name>`` (a shortcut's
    accuracy), read for the task of the compared records."""
    if spec is None or isinstance(spec, (int, float)):
        return spec
    if not records:
        return None
    levels = _task_levels(records[0].path)
    if spec not in levels:
        raise _bad(where, "level", spec, ["a number", *levels])
    return float(levels[spec])


def _protocol(claim: Claim, used: list[Record]) -> str | None:
    """The line that refuses the comparison, or None when its records may be pooled."""
    equivalent = claim.get("equivalent") or {}
    commits, cpus = sorted({r.commit for r in used}), sorted({r.cpu for r in used})
    if len(commits) > 1 and "commits" not in equivalent:
        counts = ", ".join(f"{c} ({sum(r.commit == c for r in used)} runs)" for c in commits)
        return f"pairs records of {len(commits)} code versions: {counts}; rerun at one commit, or declare them equivalent and why"
    if len(cpus) > 1 and "cpus" not in equivalent:
        return f"pairs records of {len(cpus)} CPU kinds: {', '.join(cpus)}; rerun on one, or declare them equivalent and why"
    return None


def _calibration_flags(claim: Claim, used: list[Record], tables: dict[str, list[Record]]) -> list[str]:
    flags = []
    seeds = {r.seed for r in used}
    for cal in claim.get("calibration") or []:
        overlap = sorted(seeds & {r.seed for r in select(tables[cal["table"]], cal.get("where") or {})})
        if overlap:
            flags.append(f"⚠ seeds {', '.join(map(str, overlap))} also chose the budget (results/{cal['table']})")
    return flags


def decide(claim: Claim, tables: dict[str, list[Record]]) -> Decided:
    form = claim.spec["form"]
    if form == "composite":
        decided = [decide(part, tables) for part in claim.parts]
        verdict = V.composite((part.spec.get("name", part.id), d.verdict) for part, d in zip(claim.parts, decided))
        records = [r for d in decided for r in d.records]
        flags = sorted({f for d in decided for f in d.flags})
        return Decided(claim, verdict, records, flags)
    metric, direction, planned = claim.get("metric"), claim.get("direction"), claim.get("seeds")
    pool = [r for r in select(tables.get(claim.get("table")) or [], claim.get("where") or {}) if r.seed in planned]
    kwargs = dict(direction=direction, planned=len(planned), floor=level_value(claim.get("floor"), pool, claim.source),
                  ceiling=claim.get("ceiling"),
                  margin=float(claim.get("margin") or 0.0), learned=claim.get("learned"))
    if form == "paired":
        a, b = select(pool, claim.spec["a"]), select(pool, claim.spec["b"])
        used = a + b
        refusal = _protocol(claim, used)
        drop = claim.get("drop")
        verdict = V.refused(refusal, len(planned)) if refusal else \
            V.paired(_by_seed(a, metric, drop), _by_seed(b, metric, drop), **kwargs)
    elif form == "level":
        a = select(pool, claim.spec.get("a") or {})
        used = a
        refusal = _protocol(claim, used)
        verdict = V.refused(refusal, len(planned)) if refusal else \
            V.level(_by_seed(a, metric), level_value(claim.spec["threshold"], a or pool, claim.source), **kwargs)
    else:  # trend
        axis, values = claim.get("axis"), claim.get("values")
        cells = [_by_seed(select(pool, {axis: v}), metric) for v in values]
        used = [r for v in values for r in select(pool, {axis: v})]
        seeds = [s for s in planned if all(s in c and math.isfinite(c[s]) for c in cells)]
        steps = np.arange(len(values), dtype=float)
        slopes = {s: float(np.polyfit(steps, [c[s] for c in cells], 1)[0]) for s in seeds}
        refusal = _protocol(claim, used)
        kwargs.update(floor=None, ceiling=None)
        verdict = V.refused(refusal, len(planned)) if refusal else (
            V.level(slopes, 0.0, **kwargs) if slopes else V.paired({}, {}, **kwargs))
    return Decided(claim, verdict, used, _calibration_flags(claim, used, tables))


def scale_of(claim: Claim) -> tuple[float, str]:
    metric = claim.get("metric") if claim.spec.get("form") != "composite" else claim.parts[0].get("metric")
    return (100.0, " pts") if metric in ACCURACIES else (1.0, "")


def render(decided: Decided) -> str:
    scale, unit = scale_of(decided.claim)
    return V.render(decided.verdict, unit, scale)


def decide_all(root: Path) -> list[Decided]:
    tables = read_records(root / "results")
    return [decide(c, tables) for c in load_claims(root / "conf" / "claims", tables)]
