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

``direction``: +1 the paper expects A > B, −1 A < B, 0 no difference ("barely changes"). ``drop`` ({axis, from,
to}) turns each cell into its seeds' relative drop between two settings of an axis. Besides run records
(``results/<table>/<run>/``), two analysis tables read as records: ``<table>/extrapolation`` (``ropelab.extrapolate``:
loss per run × variant × length) and ``<table>/freq_usage`` (``ropelab.freq_usage``: high-frequency share per run ×
layer × side), each carrying its run's machine and commit; so do the mechanism analyses' tables (issue 38),
``resonance`` (``resonance/resonance.csv``), ``depth_manifold`` (``depth_manifold/depth_manifold.csv``) and
``escape_routes`` (``escape_routes/escape_routes_runs.csv``), declarable before their output exists.

The protocol is enforced here, not remembered: a comparison whose records ran at more than one commit or on more
than one CPU kind is refused, with the line that says so, unless the claim's ``equivalent`` says why they may be
pooled; seeds that also ran in a calibration of the same config (``calibration``: table and selection) are flagged;
fewer pairs than ``seeds`` is incomplete (k of n).
"""

from __future__ import annotations

import functools
import json
import math
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
from ropelab.analysis.report.tables import markdown_table
from ropelab.analysis.stats import onset_step, sawtooth, train_loss
from ropelab.core import record as run_record
from ropelab.core.config import flatten
from ropelab.core.errors import ConfigError

FORMS = ("paired", "level", "trend", "composite")
METRICS = ("val/acc", "val/exact", "val/loss", "test/acc", "test/exact", "test/loss", "ood/acc", "ood/exact",
           "ood/loss", "attention/local_mass", "attention/local_mass_over_uniform", "onset", "phase/alternation", "eval/loss", "eval/loss_growth", "freq/high_share",
           "resonance/share", "depth/cos_10_11_centred", "depth/probe", "escape/low_share_weights",
           "escape/exposure_weights")
ACCURACIES = {"val/acc", "val/exact", "test/acc", "test/exact", "ood/acc", "ood/exact"}
CLAIM_KEYS = {"id", "claim", "says", "form", "table", "where", "a", "b", "metric", "direction", "seeds", "learned",
              "floor", "ceiling", "margin", "threshold", "axis", "values", "parts", "name", "equivalent",
              "calibration", "note", "row", "drop", "decimals"}
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
    for rec in run_record.under(results, completed=True):
        if rec.saved_config is not None:
            table = rec.path.parent.relative_to(results).as_posix()
            tables.setdefault(table, []).append(Record(table, rec.path.name, rec.config, rec.summary, rec.path))
    for csv in sorted(results.glob("*/extrapolation/extrapolation.csv")):
        table = csv.parent.relative_to(results).as_posix()
        tables[table] = evaluation_records(csv, table, results)
    for csv in sorted(results.glob("*/freq_usage/freq_usage.csv")):
        table = csv.parent.relative_to(results).as_posix()
        tables[table] = freq_usage_records(csv, table, results)
    for table, (name, reader) in ANALYSIS_TABLES.items():
        if (results / table / name).is_file():
            tables[table] = reader(results / table / name, table, results)
    return tables


def _run_record(results: Path, run: str) -> tuple[Path, dict, dict]:
    """(record folder, its summary, its flat config) of the run an analysis table names (``runs/<table>/<run>``
    is recorded as ``results/<table>/<run>``, or in the table its sweep's preset records into,
    ``conf/experiment/<sweep>.yaml``'s ``record``); empty where it is not recorded."""
    source = Path(run)
    folder = results / source.parent.name / source.name
    preset = ROOT / "conf" / "experiment" / f"{source.parent.name}.yaml"
    if not folder.is_dir() and preset.is_file():
        record = str((yaml.safe_load(preset.read_text()) or {}).get("record") or "")
        if record.startswith("results/"):
            folder = results / record.removeprefix("results/") / source.name
    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").is_file() else {}
    config = flatten(yaml.safe_load((folder / "config.yaml").read_text())) if (folder / "config.yaml").is_file() else {}
    return folder, summary, config


def freq_usage_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.freq_usage``'s table as records: one per run × layer × side (q / k), its metric ``freq/high_share``
    (the share of the heads' mean norm in the highest-frequency third of the channels, ``freq_usage.high_share``)."""
    from ropelab.analysis.freq_usage import high_share  # imports torch: only when a table has frequency usage

    rows = pd.read_csv(csv)
    rows = rows[rows["head"].astype(str) == "mean"]
    out = []
    for (run, layer, side), group in rows.groupby(["run", "layer", "side"], sort=True):
        folder, summary, config = _run_record(results, run)
        share = high_share(group["norm"].to_numpy(float), group["freq"].to_numpy(float))
        config = {**config, "layer": int(layer), "side": side}
        out.append(Record(table, f"{Path(run).name} layer {layer} {side}", config,
                          {**summary, "final": {"freq/high_share": share}}, folder))
    return out


def evaluation_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.extrapolate``'s table as records: one per run × variant (``label``) × length ``factor``, its metrics
    ``eval/loss`` and ``eval/loss_growth`` (the loss minus the same run's at 1×), its machine and commit those of the
    run's own record (``results/<table>/<run>/summary.json``)."""
    rows = pd.read_csv(csv)
    runs = {run: _run_record(results, run) for run in rows["run"].unique()}
    at_1x = rows[rows["factor"] == 1.0].set_index(["label", "seed"])["loss"].to_dict()
    out = []
    for row in rows.itertuples(index=False):
        record_dir, summary, run = runs[row.run]
        source = Path(row.run)
        base = at_1x.get((row.label, row.seed), math.nan)
        summary = {**summary, "final": {"eval/loss": float(row.loss), "eval/loss_growth": float(row.loss) - base}}
        config = {"task.name": row.task, "pos.name": row.pos, "label": row.label, "seed": int(row.seed),
                  "factor": float(row.factor), "trainer.max_steps": run.get("trainer.max_steps"),
                  "data.batch_size": run.get("data.batch_size")}
        out.append(Record(table, f"{source.name} {row.label} ×{row.factor:g}", config, summary, record_dir))
    return out


def _analysis_record(results: Path, table: str, run: str, label: str, config: dict, final: dict) -> Record:
    """One row of an analysis table as a record: its own config keys over its run's, its run's machine and commit."""
    folder, summary, run_config = _run_record(results, run)
    return Record(table, f"{Path(run).name} {label}".strip(), {**run_config, **config}, {**summary, "final": final},
                  folder)


RESONANCE_MOMENTS = {"end": "share_final", "init": "share_init", "random": "null_mean"}


def resonance_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.resonance``'s table as records: one per run × ``moment`` (end: the final Ω's resonance share;
    init: step 0's; random: the matched random spectra's mean), its metric ``resonance/share``, its ``cell`` the
    analysis's group of runs."""
    rows = pd.read_csv(csv)
    return [_analysis_record(results, table, row.run, moment, {"cell": row.cell, "seed": int(row.seed),
                                                                "moment": moment},
                             {"resonance/share": float(getattr(row, column))})
            for row in rows.itertuples(index=False) for moment, column in RESONANCE_MOMENTS.items()]


def depth_manifold_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.depth_manifold``'s table as records: one per run × layer × split (id / ood), its metrics
    ``depth/cos_10_11_centred`` and ``depth/probe``."""
    rows = pd.read_csv(csv)
    return [_analysis_record(results, table, row.run, f"layer {row.layer} {row.split}",
                             {"pos.name": row.scheme, "seed": int(row.seed), "layer": int(row.layer),
                              "split": row.split},
                             {"depth/cos_10_11_centred": float(row.cos_10_11_centred), "depth/probe": float(row.probe)})
            for row in rows.itertuples(index=False)]


def escape_routes_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.escape_routes``' run table as records: one per run, its metrics ``escape/low_share_weights`` and
    ``escape/exposure_weights`` (the declared reading: q, k before momentum)."""
    rows = pd.read_csv(csv)
    return [_analysis_record(results, table, row.run, "",
                             {"task.name": row.task, "pos.freqs": row.profile, "pos.momentum.gamma": float(row.gamma),
                              "seed": int(row.seed)},
                             {"escape/low_share_weights": float(row.low_share_weights),
                              "escape/exposure_weights": float(row.exposure_weights)})
            for row in rows.itertuples(index=False)]


# table under results/ → (the analysis's csv in it, its reader); a declaration may name one before its output exists
ANALYSIS_TABLES = {"resonance": ("resonance.csv", resonance_records),
                   "depth_manifold": ("depth_manifold.csv", depth_manifold_records),
                   "escape_routes": ("escape_routes_runs.csv", escape_routes_records)}


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
    return found | set(ANALYSIS_TABLES)


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
    for key, why in (claim.get("equivalent") or {}).items():
        if key not in EQUIVALENT_KEYS:
            raise _bad(where, "equivalent key", key, sorted(EQUIVALENT_KEYS))
        if not isinstance(why, str) or not why.strip():
            raise ConfigError(f"{where}: equivalent {key} needs the reason they may be pooled, as a sentence")
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
        planned = self.claim.get("seeds") or self.claim.parts[0].get("seeds")
        if not recs:
            table = self.claim.get("table") or self.claim.parts[0].get("table")
            return f"results/{table}: no record of these cells yet; seeds {_spans(sorted(planned))} planned"
        parts = [", ".join(sorted({f"results/{r.table}" for r in recs})),
                 " / ".join(sorted({r.budget for r in recs})),
                 " / ".join(sorted({r.cpu for r in recs})),
                 "commit " + ", ".join(sorted({r.commit for r in recs}))]
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
    """(factor, unit) the claim's numbers are written in: accuracies in points, relative drops in %."""
    leaf = claim if claim.spec.get("form") != "composite" else claim.parts[0]
    if leaf.get("drop"):
        return 100.0, " %"
    return (100.0, " pts") if leaf.get("metric") in ACCURACIES else (1.0, "")


def render(decided: Decided) -> str:
    scale, unit = scale_of(decided.claim)
    if decided.claim.spec.get("form") == "trend":
        unit = f"{unit} per step of {decided.claim.get('axis').rsplit('.', 1)[-1]}"
    return V.render(decided.verdict, unit, scale, decided.claim.get("decimals"))


def decide_all(root: Path) -> list[Decided]:
    """Every declared claim decided, papers in README's order."""
    tables = read_records(root / "results")
    claims = load_claims(root / "conf" / "claims", tables)
    order = list(PAPERS)
    claims.sort(key=lambda c: order.index(c.paper) if c.paper in order else len(order))
    return [decide(c, tables) for c in claims]


# ----------------------------------------------------------------------------------------------- README

PAPERS = {"Bifocal": "the-bifocal-papers-claims-against-ours", "PoPE": "the-pope-papers-claims-against-ours",
          "Momentum": "the-momentum-papers-claims-against-ours", "Length": "length-extrapolation-issue-25"}
COMMAND = "python -m ropelab.claims --write-readme"


def tally(decided: list[Decided]) -> str:
    counts: dict[str, int] = {}
    for d in decided:
        counts[d.verdict.word] = counts.get(d.verdict.word, 0) + 1
    return " · ".join(f"{counts[w]} {w}" for w in V.WORDS if w in counts)


def _table(rows: list[dict], index: str) -> str:
    """A pipe table whose rule line is not padded either: a row that grows leaves every other line as it was."""
    lines = markdown_table(pd.DataFrame(rows).set_index(index), index).split("\n")
    lines[1] = "|" + "---|" * (lines[0].count("|") - 1)
    return "\n".join(lines)


def summary_block(decided: list[Decided]) -> str:
    """README's first screen: the tally, and one row per claim with its verdict word."""
    rows, last = [], None
    for d in decided:
        paper = d.claim.paper
        label = f"[{paper}](#{PAPERS[paper]})" if paper != last and paper in PAPERS else paper
        last = paper
        rows.append({"paper": label, "claim": d.claim.spec["claim"], "verdict": d.verdict.word})
    table = _table(rows, "paper")
    return (f"**{len(decided)} claims computed from the records by `python -m ropelab.claims` "
            f"(`conf/claims/`): {tally(decided)}**\n\n{table}")


def paper_block(decided: list[Decided], paper: str) -> str:
    """A paper's section: per claim the paper's statement, the verdict with its numbers, the conditions."""
    rows = [{"claim (paper)": d.claim.spec["claim"] + (f" — {d.claim.spec['says']}" if d.claim.spec.get("says") else ""),
             "verdict (computed)": render(d), "conditions (from the records)": d.conditions()}
            for d in decided if d.claim.paper == paper]
    return _table(rows, "claim (paper)")


def blocks(decided: list[Decided]) -> dict[str, str]:
    papers = list(dict.fromkeys(d.claim.paper for d in decided))
    return {"summary": summary_block(decided), **{p.lower(): paper_block(decided, p) for p in papers}}


def _markers(name: str) -> tuple[str, str]:
    return (f"<!-- claims:{name} (generated by `{COMMAND}`; edit conf/claims/, not this table) -->",
            f"<!-- /claims:{name} -->")


def with_blocks(readme: str, generated: dict[str, str]) -> str:
    """``readme`` with the text between each block's markers replaced by the generated one; a block whose markers
    are missing is a ConfigError naming it."""
    for name, text in generated.items():
        start, end = _markers(name)
        head, sep, rest = readme.partition(start)
        _, sep2, tail = rest.partition(end)
        if not (sep and sep2):
            raise ConfigError(f"README has no markers for the claims block {name!r}: add the lines {start!r} and {end!r}")
        readme = f"{head}{start}\n{text}\n{end}{tail}"
    return readme


def lines(decided: list[Decided]) -> list[str]:
    return [f"{d.claim.paper} | {d.claim.spec['claim']} | {render(d)} | {d.conditions()}" for d in decided]


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(description="Every declared paper claim (conf/claims/) decided from the records.")
    p.add_argument("--root", type=Path, default=Path("."), help="the checkout (conf/claims/, results/, README.md)")
    p.add_argument("--write-readme", action="store_true", help="rewrite README's generated claims blocks")
    p.add_argument("--check", action="store_true", help="exit 1 when README's claims blocks differ from the records")
    args = p.parse_args(argv)
    try:
        decided = decide_all(args.root)
        readme_path = args.root / "README.md"
        readme = readme_path.read_text()
        updated = with_blocks(readme, blocks(decided))
    except ConfigError as err:
        print(f"error: {err}")
        return 2
    print("\n".join(lines(decided)))
    print(f"\n{len(decided)} claims: {tally(decided)}")
    if args.write_readme and updated != readme:
        readme_path.write_text(updated)
        print(f"wrote {readme_path}")
    if args.check and updated != readme:
        print(f"README's claims blocks differ from the records: run `{COMMAND}`")
        return 1
    return 0
