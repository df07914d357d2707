"""The benchmark card (issue 37): one scheme on every task of the suite (``conf/card/suite.yaml``) against the
baselines (every scheme of conf/pos/ at its defaults, on the same setting and seeds), verdict per task.

    python -m ropelab.card score rope_copy [--tasks dyck3,mod_arith] [--args "pos.momentum.gamma=0.5"]
    python -m ropelab.card baselines          # every scheme of conf/pos/, then the cross-table (results/card/report)
    python -m ropelab.card plan               # the suite's plan block: n, the seed SD, the MDE n detects
    python -m ropelab.card cost               # CPU-hours of the baseline table and of one card, from recorded wall times

``score`` checks the scheme, the tasks and every override before anything trains (one line naming the bad one and
the valid choices), then trains only the missing jobs of that scheme through the normal Hydra multirun
(``train.py -m task=… <setting> pos=… seed=…``) into ``results/card/<task>/<job>``: recorded jobs are skipped, a job
whose very config a committed record of another table holds is linked to it, code_lm's runs are evaluated at 1×, 2×, 4×, 8× their window (``extrapolation.csv`` in the
record, from the run's checkpoint). The card is then written from the records alone (``ropelab.analysis.card``).
Overrides under ``pos.`` (momentum: ``pos.momentum.gamma=0.5``) make a card of that scheme with those options; how
a job runs (threads, compile, launcher) changes nothing; anything else (a budget, a model size) makes a trial:
trained into runs/card_trial/, never results/, and its card says in one line that it compares nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ropelab.analysis import card as card_report
from ropelab.analysis import card_records, card_suite
from ropelab.analysis.card_suite import Suite, TaskSpec
from ropelab.analysis.report.tables import markdown_table
from ropelab.core import identity, record, runs
from ropelab.core.cli import REPO, group_choices
from ropelab.core.errors import ConfigError

RESULTS = Path("results/card")
PILOT = 5   # seeds of rope's source records from which the plan takes the seed SD as observed
TRIALS = Path("runs/card_trial")
RESERVED = {"task": "TASKS (the suite's tasks)", "pos": "POS", "seed": "the suite's seeds",
            "record": "the card (results/card, or runs/card_trial for a trial)", "name": "the card"}


# ----------------------------------------------------------------------------------------------- the request

def parse_overrides(text: str | list[str] | None) -> list[tuple[str, str]]:
    """``"pos.base=500 trainer.threads=1"`` → [(key, line)], parsed as Hydra parses a command line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    items = shlex.split(text) if isinstance(text, str) else list(text or [])
    try:
        parsed = OverridesParser.create().parse_overrides(items)
    except OverrideParseException as err:
        raise ConfigError(f"ARGS: {err.override}: {' '.join(err.message.split())}") from None
    for override in parsed:
        if override.is_sweep_override():
            raise ConfigError(f"ARGS: {override.input_line} sweeps: a card takes one value per option "
                              "(one card per value)")
    return [(o.key_or_group, o.input_line) for o in parsed]


def how_to_run_keys() -> set[str]:
    """Keys that say how a job runs, not what it trains: conf/config.yaml's job-name exclude_keys, but for the
    optimiser's kernel, which changes the numbers."""
    return set(identity.job_name_excludes()) - {"optim.fused", "experiment", "name", "record"}


@dataclass(frozen=True)
class Request:
    suite: Suite
    scheme: str
    options: dict[str, str]  # pos.* key → override line: the card's scheme options
    how: list[str]           # how the jobs run: passed on, no effect on what is compared
    trial: dict[str, str]    # any other key → override line: the jobs are a trial
    specs: list[TaskSpec]

    @property
    def label(self) -> str:
        return " ".join([self.scheme, *self.options.values()])

    @property
    def key(self) -> str:
        """The card's folder name: its job names' scheme part (``pos.momentum.gamma=0.5,pos=rope``)."""
        return ",".join(sorted([f"pos={self.scheme}", *self.options.values(), *self.trial.values()]))


def scheme_options(scheme: str) -> list[str]:
    """Every ``pos.…`` key the scheme takes (its conf/pos/<scheme>.yaml and momentum's, from conf/config.yaml)."""
    return sorted(k for k in card_records.defaults(_any_task(), scheme) if k.startswith("pos.") and k != "pos.name")


def _any_task() -> str:
    return group_choices("task")[0]


def request(scheme: str, tasks: str | list[str] | None, args: str | list[str] | None,
            suite: Suite | None = None) -> Request:
    """Check POS, TASKS and ARGS (one ConfigError naming the first bad one and the valid choices), before anything
    trains."""
    suite = suite or card_suite.load()
    schemes = group_choices("pos")
    if scheme not in schemes:
        raise ConfigError(f"POS={scheme!r} is not a scheme: choose one of {', '.join(schemes)}")
    names = [t for t in (tasks.split(",") if isinstance(tasks, str) else tasks or []) if t]
    specs = suite.select(names)
    options, how, trial = {}, [], {}
    runs_how = how_to_run_keys()
    takes = scheme_options(scheme)
    for key, line in parse_overrides(args):
        if key in RESERVED:
            raise ConfigError(f"ARGS: {line}: {key} is set by {RESERVED[key]}, not by ARGS")
        if key.startswith("pos."):
            if key not in takes:
                raise ConfigError(f"ARGS: {key} is not an option of pos={scheme}: its options are {', '.join(takes)}")
            options[key] = line
        elif key in runs_how or key.startswith("hydra."):
            how.append(line)
        else:
            known = card_records.defaults(specs[0].name, scheme)
            if key not in known and not any(k.startswith(f"{key}.") for k in known):
                raise ConfigError(f"ARGS: {key} is not a known key (a scheme option is pos.<option>; how a job runs: "
                                  f"{', '.join(sorted(runs_how))})")
            trial[key] = line
    req = Request(suite=suite, scheme=scheme, options=options, how=how, trial=trial, specs=specs)
    from ropelab.core.build import check_config
    from ropelab.core.config import compose

    for spec in req.specs:  # every value, as training would check it
        if spec.calibrated:
            try:
                check_config(compose(job_overrides(req, spec, suite.seeds[0])))
            except ConfigError as err:
                raise ConfigError(f"{spec.name}: {err}") from None
    return req


# ----------------------------------------------------------------------------------------------- the jobs

def setting(req: Request, spec: TaskSpec) -> dict[str, str]:
    """key → override line: the suite's setting for the task, a trial's overrides in place of its values."""
    lines = dict(zip(spec.setting or {}, spec.overrides()))
    return {**lines, **req.trial}


def job_overrides(req: Request, spec: TaskSpec, seed: int) -> list[str]:
    return [f"task={spec.name}", f"pos={req.scheme}", f"seed={seed}", *setting(req, spec).values(),
            *req.options.values()]


def job_name(req: Request, spec: TaskSpec, seed: int) -> str:
    """The job's folder name as Hydra writes it (its overrides, sorted, but for the suite's setting keys, which
    every job of the task shares: they are in its config.yaml, checked against the suite)."""
    return ",".join(sorted([f"task={spec.name}", f"pos={req.scheme}", f"seed={seed}", *req.options.values(),
                            *req.trial.values()]))


def excluded_from_names(req: Request, spec: TaskSpec) -> list[str]:
    return [*identity.job_name_excludes(), *[k for k in spec.setting or {} if k not in req.trial]]


@dataclass
class Job:
    spec: TaskSpec
    seed: int
    name: str
    record: Path
    config: dict
    state: str = "missing"   # missing | recorded | linked | stale (recorded at another setting)
    detail: str = ""

    @property
    def needs_extrapolation(self) -> bool:
        return bool(self.spec.extrapolation) and not (self.record / card_report.EXTRAPOLATION).is_file()


def plan_jobs(req: Request, results: Path) -> list[Job]:
    """Every job of the request's calibrated tasks and its state: recorded (its record holds this very config),
    stale (a record of another config under the name: the suite changed — refused), or missing."""
    jobs = []
    root = records_root(req, results)
    for spec in req.specs:
        if not spec.calibrated:
            continue
        base = card_records.job_config(job_overrides(req, spec, req.suite.seeds[0]))
        for seed in req.suite.seeds_for(spec.name):
            config = {**base, "seed": seed}
            job = Job(spec, seed, job_name(req, spec, seed), root / spec.name / job_name(req, spec, seed), config)
            if (saved := record.read(job.record)).completed:
                kept = card_records.over_defaults(saved)
                differ = card_records.differences(config, kept.config) if kept else {"config.yaml": ("?", "unreadable")}
                job.state = "linked" if job.record.is_symlink() else "recorded"
                if differ:
                    job.state, job.detail = "stale", _difference_text(differ)
            jobs.append(job)
    return jobs


def _difference_text(differ: dict[str, tuple]) -> str:
    return ", ".join(f"{k} {b!r} (the suite: {a!r})" for k, (a, b) in list(differ.items())[:4])


def link_identical(jobs: list[Job], results_root: Path = Path("results"), exclude: Path = RESULTS) -> None:
    """Link each missing job to a committed record of another table that holds its very config (same seed)."""
    missing = [j for j in jobs if j.state == "missing"]
    if not missing or not results_root.is_dir():
        return
    wanted = {(j.spec.name, j.seed) for j in missing}
    candidates = []
    for table in sorted(p for p in results_root.iterdir() if p.is_dir()):
        if table.resolve() == exclude.resolve():
            continue
        for rec in record.under(table, completed=True):
            if (rec.summary.get("task"), rec.summary.get("seed")) in wanted and not rec.path.is_symlink():
                if (found := card_records.over_defaults(rec)) is not None:
                    candidates.append(found)
    for job in missing:
        for found in candidates:
            if card_records.identical(job.config, found.config):
                job.record.parent.mkdir(parents=True, exist_ok=True)
                job.record.symlink_to(os.path.relpath(found.path, job.record.parent), target_is_directory=True)
                job.state, job.detail = "linked", str(found.path)
                break


def train_command(req: Request, spec: TaskSpec, seeds: list[int], results: Path,
                  needs_checkpoint: bool = False) -> list[str]:
    """One Hydra multirun of the task's missing seeds: the jobs land in runs/card[_trial]/<task>/<job>, their
    records in <root>/<task>/<job>."""
    name = f"{'card_trial' if req.trial else 'card'}/{spec.name}"
    record = records_root(req, results) / spec.name
    return [sys.executable, str(REPO / "train.py"), "-m", f"task={spec.name}", f"pos={req.scheme}",
            f"seed={','.join(map(str, seeds))}", *setting(req, spec).values(), *req.options.values(),
            *(h for h in req.how if not h.startswith("trainer.threads=")), "trainer.threads=1",   # the baselines' computation: one thread per job, as every table ran
            f"name={name}", f"record={record}",
            f"hydra.job.config.override_dirname.exclude_keys=[{','.join(excluded_from_names(req, spec))}]",
            *(["needs_checkpoint=true"] if needs_checkpoint else [])]


def records_root(req: Request, results: Path) -> Path:
    """Where the request's records are read: the card's results, or a trial's scratch records."""
    return TRIALS / "records" if req.trial else results


def run_dir(req: Request, job: Job) -> Path:
    return runs.RUNS_ROOT / ("card_trial" if req.trial else "card") / job.spec.name / job.name


def extrapolate(req: Request, job: Job, results: Path, log=print) -> bool:
    """code_lm: the loss at each of the suite's factors of the window, from the run folder's checkpoint, into the
    record's extrapolation.csv. False when the checkpoint is gone."""
    import torch

    from ropelab.experiments.extrapolate import Variant, extrapolate_run

    folder = run_dir(req, job)
    record = records_root(req, results) / job.spec.name / job.name
    if not runs.last_checkpoint(folder).is_file() or record.is_symlink():
        return False
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # one thread, as the baselines' evaluation (the campaign's) and every job's training
    try:
        rows = extrapolate_run(folder, list(job.spec.extrapolation), [Variant()], log=log)
    finally:
        torch.set_num_threads(threads)
    frame = pd.DataFrame(rows).drop(columns=["run"])
    runs.atomic_write_text(record / card_report.EXTRAPOLATION, frame.to_csv(index=False, float_format="%.6g"))
    return True


def baselines_precision(req: Request, spec: TaskSpec, results: Path) -> dict[str, str]:
    """The environment that has ``auto`` precision resolve as it did for the task's baselines (one precision, that
    this CPU runs), so that the card's jobs are one computation with them; {} where the request sets a precision
    or the baselines leave auto to decide."""
    from ropelab.core import machine

    if "trainer.precision" in req.trial or any(line.startswith("trainer.precision=") for line in req.how):
        return {}
    ran = [identity.of_record(r.summary).get("trainer.precision")
           for r in card_records.records_under(results / spec.name) if r.completed]
    precision = machine.auto_precision_as(ran, machine.cpu()["flags"]) if ran else None
    return {machine.AUTO_PRECISION_ENV: precision} if precision else {}


def train_missing(req: Request, results: Path, dry_run: bool = False, log=print) -> int:
    """Train (or link) what the request lacks; 0 when every job ended recorded."""
    jobs = plan_jobs(req, results)
    if stale := [j for j in jobs if j.state == "stale"]:
        raise ConfigError(f"{stale[0].record} was recorded at another setting: {stale[0].detail} — the suite changed "
                          f"since; move results/card/{stale[0].spec.name}/ away to train it afresh")
    if not req.trial and not dry_run:
        link_identical(jobs)
    status = 0
    for spec in req.specs:
        if not spec.calibrated:
            log(f"{spec.name}: not calibrated, nothing to train ({spec.why})")
            continue
        mine = [j for j in jobs if j.spec is spec]
        todo = [j for j in mine if j.state == "missing" or j.needs_extrapolation]
        done = len(mine) - len(todo)
        log(f"{spec.name}: {done}/{len(mine)} recorded" + (f" ({sum(j.state == 'linked' for j in mine)} linked)"
                                                            if any(j.state == "linked" for j in mine) else ""))
        if not todo:
            continue
        cmd = train_command(req, spec, [j.seed for j in todo], results,
                            needs_checkpoint=any(j.needs_extrapolation for j in todo))
        log("  " + shlex.join([runs.python_command(), *[str(runs.shorter(Path(c))) if c == cmd[1] else c
                                                          for c in cmd[1:]]]))
        if dry_run:
            continue
        if subprocess.run(cmd, env={**os.environ, **baselines_precision(req, spec, results)}).returncode != 0:
            status = 1
        for job in todo:
            if spec.extrapolation and record.read(records_root(req, results) / spec.name / job.name).completed:
                if not extrapolate(req, job, results, log):
                    log(f"  {job.name}: no checkpoint in {run_dir(req, job)}: no extrapolation")
                    status = 1
    return status


# ----------------------------------------------------------------------------------------------- commands

def score(req: Request, results: Path = RESULTS, dry_run: bool = False, train: bool = True, log=print,
          tier: str = "") -> int:
    status = train_missing(req, results, dry_run, log) if train else 0
    if dry_run:
        return status
    out = card_report.write_card(req.suite, req.specs, results, scheme=req.scheme, options=req.options,
                                 trial=list(req.trial.values()), trial_records=records_root(req, results),
                                 out=card_folder(req, results), full=len(req.specs) == len(req.suite.tasks),
                                 tier=tier)
    log(f"card: {runs.shorter(out)}")
    return status


def card_folder(req: Request, results: Path) -> Path:
    return (TRIALS if req.trial else results) / "cards" / req.key


def baselines(suite: Suite, tasks: str | None, args: str | None, results: Path = RESULTS, dry_run: bool = False,
              log=print) -> int:
    """Every scheme of conf/pos/ at its defaults on the suite, then the cross-table report."""
    status = 0
    for scheme in group_choices("pos"):
        req = request(scheme, tasks, args, suite)
        if req.trial:
            raise ConfigError(f"ARGS: {' '.join(req.trial.values())}: the baselines train the suite as declared "
                              "(how a job runs only: threads, compile, launcher)")
        status |= train_missing(req, results, dry_run, log)
    if not dry_run:
        out = card_report.write_cross_table(suite, suite.select(tasks.split(",") if tasks else None), results,
                                            results / "report")
        log(f"cross-table: {runs.shorter(out)}")
    return status


def plan(suite: Suite, write: bool = True, log=print, results: Path = RESULTS) -> dict:
    """Per calibrated task: rope's seed SD at the suite's setting, from the source records and the card's own rope
    baselines (other seeds), and n. From fewer than ``PILOT`` seeds the SD is too uncertain to plan on (2 seeds
    understate it as often as not): n is the pilot, ``PILOT`` seeds, and the MDE shown is the one at the SD's upper
    95 % bound; ``card plan`` again once the pilot is recorded plans from its SD. From ``PILOT`` seeds or more, n is
    the fewest seeds (at least the pilot, at most ``max_seeds``) whose MDE (the rule's, 80 % power) is at most the
    suite's ``useful`` for the unit. The paired SD is taken as √2 × that SD (two independent seeds' spread; pairing
    by seed can only shrink it), so the MDE is an upper estimate."""
    from scipy.stats import chi2

    from ropelab.analysis.verdict import mde

    out = {}
    for spec in suite.tasks.values():
        if not spec.calibrated:
            continue
        rope = card_records.job_config([f"task={spec.name}", "pos=rope", f"seed={suite.seeds[0]}", *spec.overrides()])
        source = {}
        for r in [*card_records.records_under(Path(spec.source or "")),
                  *card_records.records_under(Path(results) / spec.name)]:
            if r.completed and r.config.get("pos.name") == "rope" and card_records.same_setting(rope, r.config) \
                    and spec.metric in r.summary.get("final", {}):
                source.setdefault(r.seed, r)
        values = [r.summary["final"][spec.metric] for r in source.values()]
        scale, unit = (100.0, "pts") if spec.is_accuracy else (1.0, spec.metric)
        observed = float(pd.Series(values).std(ddof=1)) * scale if len(values) > 1 else math.nan
        pilot = len(values) < PILOT
        sd = observed * math.sqrt((len(values) - 1) / chi2.ppf(0.05, len(values) - 1)) \
            if pilot and math.isfinite(observed) else observed
        useful = suite.useful.get(unit)
        ladder = range(max(len(suite.seeds), PILOT), max(suite.max_seeds, PILOT) + 1)
        fits = [n for n in ladder if useful is not None and mde(n, math.sqrt(2) * sd) <= useful]
        enough = PILOT if pilot else fits[0] if fits else ladder[-1] if useful is not None else PILOT
        # the plan only adds seeds: dropping seeds already planned (and trained) after seeing them chooses the data
        n = max(enough, int((suite.plan.get(spec.name) or {}).get("n") or 0))
        cap = 100.0 if spec.is_accuracy else math.inf   # no difference of two accuracies exceeds 100 points
        entry = {"n": n, "mde": _rounded(min(mde(n, math.sqrt(2) * sd), cap)), "unit": unit, "useful": useful,
                 "mde_at_3": _rounded(min(mde(3, math.sqrt(2) * sd), cap)), "sd": _rounded(sd), "sd_observed": _rounded(observed),
                 "sd_from": (f"{len(values)} seeds" if not pilot else
                             f"upper 95 % bound of the SD of {len(values)} seeds"),
                 "paired_sd": _rounded(math.sqrt(2) * sd), "source": spec.source,
                 "source_seeds": sorted(source)}
        if pilot:
            entry["note"] = (f"pilot: rope's SD rests on {len(values)} seeds; n = {PILOT} first, then "
                             "`python -m ropelab.card plan` plans from their SD")
        elif not fits:
            entry["note"] = f"no n up to {suite.max_seeds} detects {useful} {unit}: n = {n}"
        if n > enough:
            entry["note"] = f"n = {enough} would do; n stays at the earlier plan's {n}: the plan never drops seeds"
        out[spec.name] = entry
        log(f"{spec.name}: rope SD {entry['sd']} {unit} over seeds {entry['source_seeds']} of {spec.source}; "
            f"n = {n} detects {entry['mde']} {unit} (n = 3: {entry['mde_at_3']})" +
            (f" — {entry['note']}" if "note" in entry else ""))
    log(plan_table(suite, out))
    if write:
        card_suite.write_plan(suite.path, out)
        log(f"written: the plan block of {runs.shorter(suite.path)}")
    return out


def plan_table(suite: Suite, planned: dict) -> str:
    rows = [{"task": name, "rope's seed SD (source, seeds)": f"{p['sd']} {p['unit']} ({p['source']}, {p['source_seeds']})",
             "MDE at n = 3": p["mde_at_3"], "n": p["n"], "MDE at n": p["mde"], "note": p.get("note", "")}
            for name, p in planned.items()]
    return markdown_table(pd.DataFrame(rows).set_index("task"), "task")


def _rounded(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(f"{x:.3g}")


def cost(suite: Suite, log=print) -> pd.DataFrame:
    """CPU-seconds per job of each scheme on each calibrated task, from committed records of the same setting (any
    seed, any table; their median, so one job slowed by a busy host moves it little): the scheme's own where recorded, else rope's × the scheme's median ratio to rope over the
    settings where both are recorded, else rope's (labelled)."""
    schemes = group_choices("pos")
    everything = card_records.records_under(Path("results"))
    rows = []
    for spec in suite.tasks.values():
        if not spec.calibrated:
            continue
        for scheme in schemes:
            want = card_records.job_config([f"task={spec.name}", f"pos={scheme}", f"seed={suite.seeds[0]}",
                                            *spec.overrides()])
            same = [r.summary["wall_seconds"] for r in everything if r.completed and r.summary.get("wall_seconds")
                    and r.config.get("pos.name") == scheme and r.config.get("task.name") == spec.name
                    and card_records.same_setting(want, r.config)]
            rows.append({"task": spec.name, "pos": scheme, "recorded": len(same),
                         "wall_s": float(pd.Series(same).median()) if same else math.nan})
    table = pd.DataFrame(rows)
    ratios = _scheme_ratios(everything)
    rope = table[table["pos"] == "rope"].set_index("task")["wall_s"]
    source = []
    for i, row in table.iterrows():
        if row["recorded"]:
            source.append(f"recorded ({row['recorded']})")
        elif row["pos"] in ratios and not math.isnan(rope.get(row["task"], math.nan)):
            table.loc[i, "wall_s"] = rope[row["task"]] * ratios[row["pos"]]
            source.append(f"rope × {ratios[row['pos']]:.2f}")
        else:
            table.loc[i, "wall_s"] = rope.get(row["task"], math.nan)
            source.append("as rope")
    table["source"] = source
    table["seeds"] = [len(suite.seeds_for(t)) for t in table["task"]]
    table["job_s"] = table["wall_s"] * table["seeds"]
    fewest = len(suite.seeds)

    def one_card(rows: pd.DataFrame, column: str, seeds: int = 1) -> float:   # the mean scheme's hours
        return rows.groupby("task", sort=False)[column].mean().sum() * seeds / 3600

    hours = {"planned": (table["job_s"].sum() / 3600, one_card(table, "job_s")),
             f"{fewest} seeds each": (table["wall_s"].sum() * fewest / 3600, one_card(table, "wall_s", fewest))}
    per_card = (table.groupby("task", sort=False)["job_s"].mean() / 3600).round(2)
    for tier, names in suite.tiers.items():   # a tier's card at the fewest seeds (Suite.for_tier)
        rows = table[table["task"].isin(names)]
        hours[f"tier {tier} ({', '.join(names)}) at {fewest} seeds"] = (rows["job_s"].sum() / 3600,
                                                                        one_card(rows, "wall_s", fewest))
    seeds = ", ".join(f"{t} {len(suite.seeds_for(t))}" for t in table["task"].unique())
    lines = [markdown_table(table.assign(wall_s=table["wall_s"].round(0), job_s=table["job_s"].round(0))
                            .set_index("task"), "task"), ""]
    for which, (whole, one) in hours.items():
        count = len(suite.tiers[which.split()[1]]) if which.startswith("tier ") else table["task"].nunique()
        lines.append(f"{which}: baseline table ({len(schemes)} schemes × {count} tasks) "
                     f"{whole:.1f} CPU-hours; one card (the mean scheme) {one:.1f} CPU-hours = {60 * one:.0f} "
                     "CPU-minutes")
    lines += [f"planned seeds: {seeds}; one card by task (CPU-hours): "
              + ", ".join(f"{t} {h:g}" for t, h in per_card.items()),
             "source: summary.json wall_seconds of committed records of the same setting (any seed); two one-thread "
             "jobs at a time on the 2-core machine that made them"]
    log("\n".join(lines))
    return table


def _scheme_ratios(records: list) -> dict[str, float]:
    """scheme → median over settings (task × every other key) of its mean wall time / rope's there."""
    frame = pd.DataFrame([{"pos": r.config["pos.name"], "wall": r.summary["wall_seconds"],
                           "setting": card_records.setting_key(r.config)}
                          for r in records if r.completed and r.summary.get("wall_seconds")])
    if frame.empty:
        return {}
    means = frame.groupby(["setting", "pos"])["wall"].mean().unstack()
    if "rope" not in means:
        return {}
    return {p: float((means[p] / means["rope"]).median()) for p in means if p != "rope" and means[p].notna().any()
            and (means[p] / means["rope"]).notna().any()}


# ----------------------------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ropelab.card", description=__doc__.splitlines()[0])
    p.add_argument("--suite", type=Path, default=card_suite.SUITE, help="the suite file (default conf/card/suite.yaml)")
    p.add_argument("--results", type=Path, default=RESULTS, help="the card's records (default results/card)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="one scheme's card: train what is missing, then write the card")
    s.add_argument("pos", help="the scheme (a conf/pos/<name>.yaml)")
    for q in (s, b := sub.add_parser("baselines", help="every scheme of conf/pos/ at its defaults, then the cross-table")):
        q.add_argument("--tasks", default="", help="comma-separated tasks of the suite (default: all)")
        q.add_argument("--args", default="", help="overrides: pos.<option>=… (a card of that option); how jobs run")
        q.add_argument("--dry-run", action="store_true", help="print what would train; train and write nothing")
    s.add_argument("--no-train", action="store_true", help="write the card from the records there are")
    s.add_argument("--tier", default="", help="quick (the cheap tasks) or full (default: full, or TASKS)")
    sub.add_parser("readme", help="results/card/README.md: the baseline table, its heat map and ranking")
    pl = sub.add_parser("plan", help="the suite's plan block from the source records")
    pl.add_argument("--print", action="store_true", help="print only; leave the suite file as it is")
    sub.add_parser("cost", help="CPU-hours of the baseline table and of one card, from recorded wall times")
    args = p.parse_args(argv)
    try:
        suite = card_suite.load(args.suite)
        if args.command == "score":
            tasks = args.tasks or (suite.tier(args.tier) if args.tier else None)
            suite = suite.for_tier(args.tier)
            return score(request(args.pos, tasks, args.args, suite), args.results, args.dry_run,
                         train=not args.no_train, tier=args.tier or ("" if args.tasks else "full"))
        if args.command == "readme":
            out = card_report.write_cross_table(suite, list(suite.tasks.values()), args.results, args.results,
                                                name="README.md")
            print(f"written: {runs.shorter(out)}")
            return 0
        if args.command == "baselines":
            return baselines(suite, args.tasks or None, args.args, args.results, args.dry_run)
        if args.command == "plan":
            plan(suite, write=not args.print)
            return 0
        cost(suite)
        return 0
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
