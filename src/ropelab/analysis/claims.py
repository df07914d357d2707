"""Every paper claim ropelab checks, declared once (``conf/claims/<paper>.yaml``) and decided from the committed
records by the one rule of ``ropelab.analysis.verdict`` (issue 36): no verdict is typed by hand.

A declaration names the paper's statement, the records it reads (a table folder under ``results/`` and a
selection of config values), the metric, the form of the test, the direction the paper expects, the seeds planned
before the runs and the level that counts as learned. Forms:

* ``paired``    — A − B by seed (``a`` / ``b``: the selections of the two cells);
* ``level``     — A against a fixed ``threshold`` (a level, the guess floor, a shortcut's accuracy);
* ``trend``     — per seed, the least-squares slope of the metric over ``axis`` (per step of its ``values``, in
  their order), against 0;
* ``composite`` — several named ``parts`` (each any form, inheriting the claim's keys), combined by ``combine``
  (``all``, the default; ``any``; ``primary`` with ``primary: <part name>``; ``verdict.composite``), corrected for
  multiplicity across its parts by ``multiplicity`` (``bonferroni``, the default: each part's interval at
  1 − α/m; ``none`` only with ``multiplicity_why``, the sentence why the parts are not one family).

A trend tests its declared slope; ``no_reversal: true`` adds "no step the other way": the claim is "partly" when
the slope is reproduced but a neighbouring step excludes 0 on the wrong side (the steps at uncorrected α, the
strict side for the claim).

Floors: every accuracy is read against its task's floor (``floor``, default ``guess``: the better of the guess
rules and the task's named shortcuts, so indirect indexing reads against copying the source letter;
``ropelab.analysis.guess.floor``, exact where the task allows), printed in every row; a number, ``shortcut:<name>``
or ``none`` may be declared instead. A relative drop reads its cells' accuracies at the ``from`` setting against
the floor, and any metric that is not an accuracy may name ``floor_metric`` (``val/acc``: the runs behind an
analysis must have learned for it to say anything). Where ``learned`` is declared, every row prints its solve
counts, 0/3 against 0/3 included.

Pre-registration (``preregistration``): from git history, each row says whether its declaration (the commit that
first introduced its id under conf/claims/, and the last that changed its test, prose keys aside) preceded the
earliest commit adding a record it reads; a shallow clone reads "unknown". A row whose seeds also chose its budget
names its fresh-seed confirmation (``confirm: <claim id>``). ``label: extension`` marks a row the papers do not
state (the project's own extension), ``cite`` where a paper does, ``why`` the one line the declaration is so.

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
import subprocess
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

import tasks

from ropelab.analysis import verdict as V
from ropelab.analysis.guess import floor as task_floor
from ropelab.analysis.report.tables import markdown_table
from ropelab.analysis.stats import onset_step, sawtooth, train_loss
from ropelab.core import record as run_record
from ropelab.core.record import Record
from ropelab.core.errors import ConfigError

FORMS = ("paired", "level", "trend", "composite")
METRICS = ("val/acc", "val/exact", "val/loss", "test/acc", "test/exact", "test/loss", "ood/acc", "ood/exact",
           "ood/loss", "attention/local_mass", "attention/local_mass_over_uniform", "onset", "phase/alternation", "eval/loss", "eval/loss_growth", "freq/high_share",
           "resonance/share", "depth/cos_10_11_centred", "depth/probe", "escape/low_share_weights",
           "escape/exposure_weights")
ACCURACIES = {"val/acc", "val/exact", "test/acc", "test/exact", "ood/acc", "ood/exact"}
CLAIM_KEYS = {"id", "claim", "says", "form", "table", "where", "a", "b", "metric", "direction", "seeds", "learned",
              "floor", "ceiling", "margin", "threshold", "axis", "values", "parts", "name", "equivalent",
              "calibration", "note", "row", "drop", "decimals", "combine", "primary", "multiplicity",
              "multiplicity_why", "no_reversal", "floor_metric", "why", "label", "cite", "confirm"}
PROSE_KEYS = {"claim", "says", "note", "row", "decimals", "why", "label", "cite", "confirm"}  # not the test
MULTIPLICITY = ("bonferroni", "none")
LABELS = ("paper", "extension")
FLOORS = ("a number", "guess", "shortcut:<name>", "none")
DROP_KEYS = {"axis", "from", "to"}
EQUIVALENT_KEYS = {"commits", "cpus"}


# ----------------------------------------------------------------------------------------------- records

def budget(record: Record) -> str:
    return f"{record.config.get('trainer.max_steps')} steps × batch {record.config.get('data.batch_size')}"


def value(record: Record, metric: str) -> float:
    """The record's ``metric``: its summary's final value, or one read from its attention, curves or trace."""
    summary = record.summary or {}
    final = summary.get("final") or {}
    attention = summary.get("attention") or {}
    if metric == "attention/local_mass":
        return float(attention.get("local_mass", math.nan))
    if metric == "attention/local_mass_over_uniform":
        return float(attention.get("local_mass", math.nan)) - float(attention.get("uniform", math.nan))
    if metric == "onset":  # the step the train loss leaves its plateau (ropelab.analysis.stats)
        onset = onset_step(train_loss(record.metrics))
        return math.nan if onset is None else float(onset)
    if metric == "phase/alternation":  # how often neighbouring channel pairs of the final Φ differ in sign
        trace = record.path / "positional_trace.npz"
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
            tables.setdefault(table, []).append(Record(rec.path, rec.summary, rec.saved_config, table))
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


def _run_record(results: Path, run: str) -> Record:
    """The record of the run an analysis table names (``runs/<table>/<run>`` is recorded as
    ``results/<table>/<run>``, or in the table its sweep's preset records into, ``conf/experiment/<sweep>.yaml``'s
    ``record``); its summary and config are None where it is not recorded."""
    source = Path(run)
    folder = results / source.parent.name / source.name
    preset = ROOT / "conf" / "experiment" / f"{source.parent.name}.yaml"
    if not folder.is_dir() and preset.is_file():
        record = str((yaml.safe_load(preset.read_text()) or {}).get("record") or "")
        if record.startswith("results/"):
            folder = results / record.removeprefix("results/") / source.name
    return run_record.read(folder)


def _row(run: Record, table: str, config: dict, final: dict) -> Record:
    """One row of an analysis table as a record of ``table``: selected by ``config``, its metrics ``final``, its
    run's machine and commit."""
    return Record(run.path, {**(run.summary or {}), "final": final}, run.saved_config, table, read_as=config)


def freq_usage_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.freq_usage``'s table as records: one per run × layer × side (q / k), its metric ``freq/high_share``
    (the share of the heads' mean norm in the highest-frequency third of the channels, ``freq_usage.high_share``)."""
    from ropelab.analysis.freq_usage import high_share  # imports torch: only when a table has frequency usage

    rows = pd.read_csv(csv)
    rows = rows[rows["head"].astype(str) == "mean"]
    out = []
    for (run, layer, side), group in rows.groupby(["run", "layer", "side"], sort=True):
        rec = _run_record(results, run)
        share = high_share(group["norm"].to_numpy(float), group["freq"].to_numpy(float))
        out.append(_row(rec, table, {**rec.config, "layer": int(layer), "side": side}, {"freq/high_share": share}))
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
        run = runs[row.run]
        base = at_1x.get((row.label, row.seed), math.nan)
        config = {"task.name": row.task, "pos.name": row.pos, "label": row.label, "seed": int(row.seed),
                  "factor": float(row.factor), "trainer.max_steps": run.config.get("trainer.max_steps"),
                  "data.batch_size": run.config.get("data.batch_size")}
        out.append(_row(run, table, config,
                        {"eval/loss": float(row.loss), "eval/loss_growth": float(row.loss) - base}))
    return out


def _analysis_record(results: Path, table: str, run: str, config: dict, final: dict) -> Record:
    """One row of an analysis table as a record: its own config keys over its run's, its run's machine and commit."""
    rec = _run_record(results, run)
    final = {**((rec.summary or {}).get("final") or {}), **final}  # the run's own metrics stay readable
                                                                    # (``floor_metric``)
    return _row(rec, table, {**rec.config, **config}, final)


RESONANCE_MOMENTS = {"end": "share_final", "init": "share_init", "random": "null_mean"}


def resonance_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.resonance``'s table as records: one per run × ``moment`` (end: the final Ω's resonance share;
    init: step 0's; random: the matched random spectra's mean), its metric ``resonance/share``, its ``cell`` the
    analysis's group of runs."""
    rows = pd.read_csv(csv)
    return [_analysis_record(results, table, row.run, {"cell": row.cell, "seed": int(row.seed), "moment": moment},
                             {"resonance/share": float(getattr(row, column))})
            for row in rows.itertuples(index=False) for moment, column in RESONANCE_MOMENTS.items()]


def depth_manifold_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.depth_manifold``'s table as records: one per run × layer × split (id / ood), its metrics
    ``depth/cos_10_11_centred`` and ``depth/probe``."""
    rows = pd.read_csv(csv)
    return [_analysis_record(results, table, row.run,
                             {"pos.name": row.scheme, "seed": int(row.seed), "layer": int(row.layer),
                              "split": row.split},
                             {"depth/cos_10_11_centred": float(row.cos_10_11_centred), "depth/probe": float(row.probe)})
            for row in rows.itertuples(index=False)]


def escape_routes_records(csv: Path, table: str, results: Path) -> list[Record]:
    """``ropelab.escape_routes``' run table as records: one per run, its metrics ``escape/low_share_weights`` and
    ``escape/exposure_weights`` (the declared reading: q, k before momentum)."""
    rows = pd.read_csv(csv)
    return [_analysis_record(results, table, row.run,
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
        if self.parent is not None and key not in ("form", "parts", "name", "a", "b", "threshold", "combine",
                                                   "primary", "multiplicity", "multiplicity_why", "confirm"):
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
    label = claim.get("label", "paper")
    if label not in LABELS:
        raise _bad(where, "label", label, LABELS)
    floor = claim.get("floor")
    if not (floor is None or isinstance(floor, (int, float)) and not isinstance(floor, bool)
            or floor in ("guess", "none") or isinstance(floor, str) and floor.startswith("shortcut:")):
        raise _bad(where, "floor", floor, FLOORS)
    if claim.get("floor_metric") is not None and claim.get("floor_metric") not in ACCURACIES:
        raise _bad(where, "floor_metric", claim.get("floor_metric"), sorted(ACCURACIES))
    if form == "composite":
        if not claim.parts:
            raise ConfigError(f"{where}: a composite needs parts (a list of claims)")
        combine = claim.spec.get("combine", "all")
        if combine not in V.COMBINE:
            raise _bad(where, "combine", combine, V.COMBINE)
        names = [p.spec.get("name") for p in claim.parts]
        if combine == "primary" and claim.spec.get("primary") not in names:
            raise _bad(where, "primary", claim.spec.get("primary"), names)
        method = claim.spec.get("multiplicity", "bonferroni")
        if method not in MULTIPLICITY:
            raise _bad(where, "multiplicity", method, MULTIPLICITY)
        if method == "none" and not str(claim.spec.get("multiplicity_why") or "").strip():
            raise ConfigError(f"{where}: multiplicity none needs multiplicity_why, the sentence why the parts are "
                              f"not one family")
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
    ids = [c.id for c in claims]
    for claim in claims:
        if claim.spec.get("confirm") is not None and claim.spec["confirm"] not in ids:
            raise _bad(claim.source, "confirm", claim.spec["confirm"], ids)
    return claims


# ----------------------------------------------------------------------------------------------- verdicts

@dataclass
class Decided:
    claim: Claim
    verdict: V.Verdict
    records: list[Record] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    floors: list[str] = field(default_factory=list)   # each distinct floor its leaves read against, as printed
    planned: set[int] = field(default_factory=set)    # the seeds its parts planned, together
    prereg: str = ""                                  # ``preregistration``'s label

    def conditions(self) -> str:
        recs = self.records
        planned = self.planned
        if not recs:
            table = self.claim.get("table") or self.claim.parts[0].get("table")
            parts = [f"results/{table}: no record of these cells yet; seeds {_spans(sorted(planned))} planned"]
        else:
            parts = [", ".join(sorted({f"results/{r.table}" for r in recs})),
                     " / ".join(sorted({budget(r) for r in recs})),
                     " / ".join(sorted({r.hardware for r in recs})),
                     "commit " + ", ".join(sorted({r.commit for r in recs}))]
            run = sorted({r.seed for r in recs} & planned)
            parts.append(f"seeds {_spans(run)} ({len(run)} of {len(planned)} planned)")
        parts.append("; ".join(self.floors))
        if self.prereg:
            parts.append(self.prereg)
        if self.claim.get("label", "paper") == "extension":
            parts.append("the project's own extension (not stated in the papers)")
        if self.claim.spec.get("confirm"):
            parts.append(f"fresh-seed confirmation: {self.claim.spec['confirm']}")
        return "; ".join(p for p in parts + self.flags if p)


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
        return {r.seed: value(r, metric) for r in records if r.seed is not None}
    start = _by_seed(select(records, {drop["axis"]: drop["from"]}), metric)
    end = _by_seed(select(records, {drop["axis"]: drop["to"]}), metric)
    return {s: (start[s] - end[s]) / start[s] for s in start if s in end and start[s]}


@functools.lru_cache(maxsize=None)
def _levels_of(task_json: str, ood: bool) -> dict[str, tuple[float, str]]:
    """level name → (accuracy, how it is known): ``guess`` the better of the guess floor and the task's shortcuts
    (``Task.shortcuts``, in closed form), ``shortcut:<name>`` each shortcut."""
    task_cfg = json.loads(task_json)
    guess = task_floor(task_cfg, ood)
    levels = {f"shortcut:{k}": (float(v), f"shortcut {k}, exact")
              for k, v in tasks.from_config(task_cfg, ood=ood).shortcuts().items()}
    return {"guess": max([(guess.value, f"guess, {guess.how}"), *levels.values()]), **levels}


def _task_levels(record: Record, ood: bool = False) -> dict[str, tuple[float, str]]:
    task_cfg = record.saved_config["task"]
    return _levels_of(json.dumps(task_cfg, sort_keys=True, default=str), ood)


def level_value(spec: Any, records: list[Record], where: str, metric: str = "") -> float | None:
    """A floor or threshold: a number, ``guess`` (the task's floor) or ``shortcut:<name>`` (a shortcut's accuracy),
    read for the task of the compared records (its OOD split for an ``ood/`` metric)."""
    return _level(spec, records, where, metric)[0]


def _level(spec: Any, records: list[Record], where: str, metric: str = "") -> tuple[float | None, str]:
    if spec is None or spec == "none":
        return None, ""
    if isinstance(spec, (int, float)):
        return float(spec), "declared"
    if not records:
        return None, ""
    levels = _task_levels(records[0], metric.startswith("ood/"))
    if spec not in levels:
        raise _bad(where, "level", spec, ["a number", *levels])
    return levels[spec]


def _protocol(claim: Claim, used: list[Record]) -> str | None:
    """The line that refuses the comparison, or None when its records may be pooled (the one rule:
    ``ropelab.core.identity.pairable``)."""
    from ropelab.core.identity import pairable

    pairing = pairable([r.summary for r in used], declared=claim.get("equivalent") or {})
    return None if pairing.ok else pairing.reason


def _calibration_flags(claim: Claim, used: list[Record], tables: dict[str, list[Record]]) -> list[str]:
    flags = []
    seeds = {r.seed for r in used}
    for cal in claim.get("calibration") or []:
        overlap = sorted(seeds & {r.seed for r in select(tables[cal["table"]], cal.get("where") or {})})
        if overlap:
            flags.append(f"⚠ seeds {', '.join(map(str, overlap))} also chose the budget (results/{cal['table']})")
            if not claim.get("confirm"):
                flags.append("⚠ no fresh-seed confirmation declared (confirm:)")
    return flags


def _mean(values: dict[int, float]) -> float:
    finite = [v for v in values.values() if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _unique(items) -> list:
    return list(dict.fromkeys(items))


def decide(claim: Claim, tables: dict[str, list[Record]], alpha: float = V.ALPHA) -> Decided:
    """The claim's verdict; ``alpha``: its intervals' error rate (a composite's parts share α, ``multiplicity``)."""
    form = claim.spec["form"]
    if form == "composite":
        combine = claim.spec.get("combine", "all")
        family = 1 if combine == "primary" or claim.spec.get("multiplicity") == "none" else len(claim.parts)
        decided = [decide(part, tables, alpha / family) for part in claim.parts]
        verdict = V.composite(((part.spec.get("name", part.id), d.verdict) for part, d in zip(claim.parts, decided)),
                              combine, claim.spec.get("primary"))
        records = list({id(r): r for d in decided for r in d.records}.values())
        flags = _unique(f for d in decided for f in d.flags)
        floors = _unique(f for d in decided for f in d.floors)
        return Decided(claim, verdict, records, flags, floors, set().union(*(d.planned for d in decided)))
    metric, direction, planned = claim.get("metric"), claim.get("direction"), claim.get("seeds")
    pool = [r for r in select(tables.get(claim.get("table")) or [], claim.get("where") or {}) if r.seed in planned]
    floor_metric = claim.get("floor_metric") or (metric if metric in ACCURACIES else None)
    floor, how = _level(claim.get("floor", "guess" if floor_metric else None), pool, claim.source,
                        floor_metric or "")
    if floor_metric is None:
        floor_text = f"no floor ({metric} is not an accuracy)"
    elif floor is None:
        floor_text = "floor: none declared" if claim.get("floor") == "none" else ""
    else:
        floor_text = f"floor {100 * floor:.1f} % ({how}" + (f", on {floor_metric})" if floor_metric != metric else ")")
    margin = claim.get("margin")
    margin = float(margin) if margin is not None else (0.05 if floor_metric else 0.0)
    drop = claim.get("drop")
    kwargs = dict(direction=direction, planned=len(planned), floor=floor, ceiling=claim.get("ceiling", 1.0 if floor_metric else None),
                  margin=margin, learned=None if drop else claim.get("learned"), alpha=alpha)

    def side(records: list[Record]) -> float:
        """The mean that says whether a side learned: its floor metric, at the drop's starting setting."""
        if drop:
            records = select(records, {drop["axis"]: drop["from"]})
        return _mean(_by_seed(records, floor_metric)) if floor_metric else math.nan

    if drop:
        pool = [r for r in pool if any(_same(r.config.get(drop["axis"]), v) for v in (drop["from"], drop["to"]))]
    if form == "paired":
        a, b = select(pool, claim.spec["a"]), select(pool, claim.spec["b"])
        used = a + b
        refusal = _protocol(claim, used)
        if drop or floor_metric != metric:
            kwargs["sides"] = (side(a), side(b))
        verdict = V.refused(refusal, len(planned)) if refusal else \
            V.paired(_by_seed(a, metric, drop), _by_seed(b, metric, drop), **kwargs)
    elif form == "level":
        a = select(pool, claim.spec.get("a") or {})
        used = a
        refusal = _protocol(claim, used)
        threshold = level_value(claim.spec["threshold"], a or pool, claim.source, metric)
        if drop or floor_metric != metric:
            kwargs["sides"] = (side(a), threshold if floor_metric == metric else side(a))
        verdict = V.refused(refusal, len(planned)) if refusal else V.level(_by_seed(a, metric, drop), threshold, **kwargs)
    else:  # trend
        verdict, used = _trend(claim, pool, planned, kwargs)
    return Decided(claim, verdict, used, _calibration_flags(claim, used, tables), [floor_text] if floor_text else [],
                   set(planned))


def _trend(claim: Claim, pool: list[Record], planned: list[int], kwargs: dict) -> tuple[V.Verdict, list[Record]]:
    """Per seed, the least-squares slope over the axis's steps against 0; the cells all at the floor (or all at the
    ceiling) say nothing; with ``no_reversal``, each neighbouring step is also read (uncorrected α, the strict side
    for the claim), and a step excluding 0 on the wrong side makes a reproduced slope "partly"."""
    metric, axis, values = claim.get("metric"), claim.get("axis"), claim.get("values")
    cells = [_by_seed(select(pool, {axis: v}), metric) for v in values]
    used = [r for v in values for r in select(pool, {axis: v})]
    seeds = [s for s in planned if all(s in c and math.isfinite(c[s]) for c in cells)]
    steps = np.arange(len(values), dtype=float)
    slopes = {s: float(np.polyfit(steps, [c[s] for c in cells], 1)[0]) for s in seeds}
    refusal = _protocol(claim, used)
    if refusal:
        return V.refused(refusal, len(planned)), used
    means = [_mean({s: c[s] for s in seeds}) for c in cells] if seeds else [math.nan]
    floor, ceiling, margin = kwargs["floor"], kwargs["ceiling"], kwargs["margin"]
    sides = math.nan
    if floor is not None and all(m <= floor + margin for m in means):
        sides = max(means)
    elif ceiling is not None and all(m >= ceiling - margin for m in means):
        sides = min(means)
    kwargs = {**kwargs, "learned": None, "sides": (sides, sides)}
    verdict = V.level(slopes, 0.0, **kwargs) if slopes else V.paired({}, {}, **kwargs)
    if not claim.get("no_reversal") or not slopes:
        return verdict, used
    short = axis.rsplit(".", 1)[-1].replace("gamma", "γ")
    step_kwargs = {**kwargs, "alpha": V.ALPHA, "sides": None, "planned": None}
    against = [f"{short} {hi:g} − {lo:g}" for (lo, c0), (hi, c1) in zip(zip(values, cells), zip(values[1:], cells[1:]))
               if V.paired({s: c1[s] for s in seeds}, {s: c0[s] for s in seeds}, **step_kwargs).word == "opposite"]
    if not against:
        return replace(verdict, note=f"no step the other way ({len(values) - 1} steps)"), used
    word = "partly" if verdict.word == "reproduced" else verdict.word
    return replace(verdict, word=word, note=f"steps the other way: {', '.join(against)}"), used


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
    """Every declared claim decided, papers in README's order, each labelled by ``preregistration``."""
    tables = read_records(root / "results")
    claims = load_claims(root / "conf" / "claims", tables)
    order = list(PAPERS)
    claims.sort(key=lambda c: order.index(c.paper) if c.paper in order else len(order))
    decided = [decide(c, tables) for c in claims]
    preregistration(root, decided)
    return decided


# ----------------------------------------------------------------------------------------------- pre-registration

AFTER = ("declared after the data", "edited after the data")


def _git(root: Path, *args: str, stdin: str | None = None) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], input=stdin, capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _test_of(spec: dict) -> str:
    """A declaration without its prose: what its test is, to tell an edit of the test from an edit of the words."""
    def strip(d):
        return {k: ([strip(p) for p in v] if k == "parts" else v) for k, v in d.items() if k not in PROSE_KEYS}
    return json.dumps(strip(spec), sort_keys=True, default=str)


def _commits(root: Path, *pathspec: str, added_only: bool = False) -> list[tuple[str, int, list[str]]]:
    """(commit, committer time, files) oldest first, for the commits touching ``pathspec``."""
    out = _git(root, "log", "--reverse", "--format=%x00%H %ct", "--name-only", "--no-renames",
               *(["--diff-filter=A"] if added_only else []), "--", *pathspec) or ""
    found = []
    for chunk in out.split("\x00")[1:]:
        head, *files = chunk.strip().split("\n")
        commit, when = head.split()
        found.append((commit, int(when), [f for f in files if f]))
    return found


def _declaration_history(root: Path) -> tuple[dict, dict, dict]:
    """claim id → (time, commit) it first appeared under conf/claims/; → the last commit that changed its test;
    → its test as last committed."""
    commits = _commits(root, "conf/claims")
    wanted = [(c, when, f) for c, when, files in commits for f in files if f.endswith(".yaml")]
    try:
        blobs = subprocess.run(["git", "-C", str(root), "cat-file", "--batch"], capture_output=True, timeout=120,
                               input="".join(f"{c}:{f}\n" for c, _, f in wanted).encode()).stdout
    except (OSError, subprocess.TimeoutExpired):
        blobs = b""
    first: dict[str, tuple[int, str]] = {}
    changed: dict[str, tuple[int, str]] = {}
    test: dict[str, str] = {}
    pos = 0
    for commit, when, _ in wanted:
        end = blobs.find(b"\n", pos)
        if end < 0:
            break
        header = blobs[pos:end].split()
        pos = end + 1
        if len(header) < 3 or header[1] == b"missing":
            continue
        size = int(header[2])
        raw = blobs[pos:pos + size].decode()
        pos += size + 1
        try:
            doc = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        except yaml.YAMLError:
            continue
        for spec in doc.get("claims") or []:
            cid = str(spec.get("id"))
            first.setdefault(cid, (when, commit[:7]))
            if test.get(cid) != (t := _test_of(spec)):
                if cid in test:
                    changed[cid] = (when, commit[:7])
                test[cid] = t
    return first, changed, test


def _record_source(record: Record, root: Path) -> str:
    """The committed file a record is read from: a run's summary.json, or an analysis table's csv."""
    table = record.table
    for suffix, name in (("/extrapolation", "extrapolation.csv"), ("/freq_usage", "freq_usage.csv")):
        if table.endswith(suffix):
            return f"results/{table}/{name}"
    if table in ANALYSIS_TABLES:
        return f"results/{table}/{ANALYSIS_TABLES[table][0]}"
    try:
        return (record.path / "summary.json").resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return (record.path / "summary.json").as_posix()


def preregistration(root: Path, decided: list[Decided]) -> str:
    """Label each row with whether its declaration preceded its records, from git history (committer times): the
    commit that first introduced its id under conf/claims/, and the last that changed its test (prose keys aside),
    against the earliest commit adding any record it reads. Uncommitted declarations and records count as now.
    Returns "" or the one line saying why every row reads "unknown" (no git, or a shallow clone)."""
    shallow = (_git(root, "rev-parse", "--is-shallow-repository") or "").strip()
    if shallow != "false":
        why = ("pre-registration unknown: shallow git history (git fetch --unshallow)" if shallow == "true"
               else "pre-registration unknown: no git history")
        for d in decided:
            d.prereg = "pre-registration unknown"
        return why
    first, changed, tests = _declaration_history(root)
    added: dict[str, tuple[int, str]] = {}
    for commit, when, files in _commits(root, ":(glob)results/**/summary.json", ":(glob)results/**/*.csv",
                                        added_only=True):
        for f in files:
            added.setdefault(f, (when, commit[:7]))
    now = (2 ** 62, "uncommitted")
    for d in decided:
        cid = d.claim.id
        declared = first.get(cid, now)
        edited = changed.get(cid)
        if cid in tests and tests[cid] != _test_of(d.claim.spec):
            edited = now
        if not d.records:
            d.prereg = "declared before its records (none yet)"
            continue
        data = min(added.get(_record_source(r, root), now) for r in d.records)
        if declared >= data:
            d.prereg = f"declared after the data: declared in {declared[1]}, first record in {data[1]}"
        elif edited is not None and edited >= data:
            d.prereg = f"edited after the data: test changed in {edited[1]}, first record in {data[1]}"
        else:
            d.prereg = f"pre-registered: declared in {declared[1]}, before its first record ({data[1]})"
    return ""


# ----------------------------------------------------------------------------------------------- README

PAPERS = {"Bifocal": "the-bifocal-papers-claims-against-ours", "PoPE": "the-pope-papers-claims-against-ours",
          "Momentum": "the-momentum-papers-claims-against-ours", "Length": "length-extrapolation-issue-25"}
COMMAND = "ropelab claims --write-readme"


def _words(decided: list[Decided]) -> str:
    counts: dict[str, int] = {}
    for d in decided:
        counts[d.verdict.word] = counts.get(d.verdict.word, 0) + 1
    return " · ".join(f"{counts[w]} {w}" for w in V.WORDS if w in counts)


def tally(decided: list[Decided]) -> str:
    """The words over all rows, then those of the rows declared (or whose test was edited) after their data."""
    after = [d for d in decided if d.prereg.startswith(AFTER)]
    unknown = [d for d in decided if d.prereg == "pre-registration unknown"]
    text = _words(decided)
    if unknown:
        return f"{text}; pre-registration unknown for {len(unknown)}"
    return f"{text}; declared or edited after the data: {len(after)}" + (f" ({_words(after)})" if after else "")


def _table(rows: list[dict], index: str) -> str:
    """A pipe table whose rule line is not padded either: a row that grows leaves every other line as it was."""
    frame = pd.DataFrame(rows)
    frame[index] = frame[index].map(lambda v: str(v).replace("|", "\\|"))  # markdown_table escapes the others
    lines = markdown_table(frame.set_index(index), index).split("\n")
    lines[1] = "|" + "---|" * (lines[0].count("|") - 1)
    return "\n".join(lines)


def summary_block(decided: list[Decided]) -> str:
    """README's first screen: the tally, and one row per claim with its verdict word."""
    rows, last = [], None
    for d in decided:
        paper = d.claim.paper
        label = f"[{paper}](#{PAPERS[paper]})" if paper != last and paper in PAPERS else paper
        last = paper
        rows.append({"paper": label, "claim": d.claim.spec["claim"], "verdict": d.verdict.word,
                     "declared": d.prereg.split(":")[0]})
    table = _table(rows, "paper")
    return (f"**{len(decided)} claims computed from the records by `ropelab claims` "
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
    if unknown := preregistration(args.root, []):
        print(unknown)
    print(f"\n{len(decided)} claims: {tally(decided)}")
    if args.write_readme and updated != readme:
        readme_path.write_text(updated)
        print(f"wrote {readme_path}")
    if args.check and updated != readme:
        print(f"README's claims blocks differ from the records: run `{COMMAND}`")
        return 1
    return 0
