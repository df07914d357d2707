"""``python -m ropelab.experiments.campaign`` (``ropelab campaign``): every declared job that has no completed
record, trained one thread per job from a worktree at a pinned commit, each record committed as it lands.

What is declared (read, never re-declared here):

- the table presets, conf/experiment/*.yaml that name a ``record:`` table: their ``hydra.sweeper.params`` grid,
  once per entry of their ``variants:`` (override strings; "" is the plain grid; absent = [""]);
- the claims (conf/claims/*.yaml): each claim's compared group is its table's jobs matching its ``where``, its
  ``axis`` ``values``, its ``a``/``b`` selections and its ``seeds``;
- the card suite (conf/card/suite.yaml): every scheme of conf/pos/ on each calibrated task at the planned seeds;
  a card row's group is the task's whole baseline table.

A job is recorded when ``results/<table>/<job>/summary.json`` says completed, in this checkout's files or on the
records branch (``--branch``). The job's folder name is Hydra's (the sorted overrides minus
``ropelab.core.identity.job_name_excludes``), its overrides ``ropelab.core.bookkeeping.sweep_jobs``'. Work is ordered so
that verdicts complete soonest: one group (a claim, a card row, else a preset's grid) whole before the next, the
cheapest group first; cost is each job's steps × the median seconds per step of committed records of the same
setting (a busy host's slow job moves a median little). A group whose records the jobs trained here would not be
one computation with (another CPU kind, a commit no equivalence record joins, another resolved precision: ``held``)
is held back, with the reason in the plan: it completes where its records ran.

Records are committed on their own branch (default ``campaign-records``) without touching any index or work tree
of the repository: the files are hashed into the object store, a tree is built in a temporary index
(``GIT_INDEX_FILE``) from the branch's tree plus the record, ``commit-tree`` makes the commit and ``update-ref``
moves the branch only if it still points where it did (compare-and-swap; a held lock or a lost race retries).
That is one atomic ref update per record: a record is on the branch whole or not at all, and the user's branches,
index and files are never written. (A branch named ``campaign/records`` cannot coexist with a branch named
``campaign``; hence the dash.) Killed at any moment, the jobs in flight are lost; a record written to the worktree
but not yet committed is committed at the next start. Ctrl-C, ``kill`` (SIGTERM) and SIGINT (even to a campaign
started in the background) stop it cleanly: its jobs in flight are ended with it. Another machine resumes from a fresh clone once it has the
branch (``git fetch origin campaign-records:campaign-records``).

    python -m ropelab.experiments.campaign --plan [--tables a,b]
    python -m ropelab.experiments.campaign --jobs 2 [--commit REV] [hydra/launcher=slurm …]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from ropelab.core import identity, record
from ropelab.core.cli import CONF_DIR, REPO
from ropelab.core.cli import at_least
from ropelab.core.errors import ConfigError
from ropelab.core.record import Record, read as read_record

BRANCH = "campaign-records"
CARD = "card"
TOP_UP = " top-up"   # a card task's group of the seeds past the suite's first ones
SUITE_FILE = "conf/card/suite.yaml"
WORKTREE = Path("runs/campaign/worktree")
LOCK_RETRIES = 120


# ----------------------------------------------------------------------------------------------- jobs

@dataclass
class Job:
    table: str                  # results/<table>
    name: str                   # the job's folder (Hydra's override_dirname)
    argv: list[str]             # train.py -m <argv>: one job
    values: dict[str, Any]      # the keys claims select on (task.name, pos.name, seed, the axes …)
    source: str                 # the preset (or card/<task>) that declares it
    groups: list[str] = field(default_factory=list)
    cost: float = 0.0           # estimated CPU-seconds
    env: dict[str, str] = field(default_factory=dict)   # what its process is started with (the pinned precision)
    extrapolate: list[str] = field(default_factory=list)  # a card task's [task, scheme, seed]: see EXTRAPOLATE

    @property
    def key(self) -> str:
        return f"{self.table}/{self.name}"

    @property
    def steps(self) -> int:
        return int(self.values.get("trainer.max_steps") or 0)


def job_name(lines: Iterable[str], excluded: Iterable[str] | None = None) -> str:
    """A job's folder name as Hydra writes it: its override lines, those of excluded keys left out, sorted."""
    skip = set(identity.job_name_excludes() if excluded is None else excluded)
    return ",".join(sorted(line for line in lines if line.split("=", 1)[0].lstrip("+~") not in skip))


def _scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _values(base: dict[str, Any], lines: Iterable[str]) -> dict[str, Any]:
    out = dict(base)
    for line in lines:
        key, _, value = line.partition("=")
        key = key.lstrip("+~")
        if key in ("task", "pos"):
            out[f"{key}.name"] = value
        elif "/" not in key and key != "experiment":
            out[key] = _scalar(value)
    return out


def presets(conf: Path = CONF_DIR) -> dict[str, dict]:
    """preset name → its YAML as written (``record``, ``variants``, …), for the presets that record a table."""
    out = {}
    for path in sorted((conf / "experiment").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text()) or {}
        if raw.get("record"):
            out[path.stem] = raw
    return out


def table_of(preset: dict) -> str:
    return Path(str(preset["record"])).relative_to("results").as_posix()


@functools.cache
def _base_values(overrides: tuple[str, ...]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from ropelab.core.config import compose, flatten

    return flatten(OmegaConf.to_container(compose(list(overrides)), resolve=True))


def preset_jobs(name: str, preset: dict) -> list[Job]:
    """Every job of a preset: its grid once per variant, in Hydra's order."""
    from ropelab.core.bookkeeping import sweep_jobs

    jobs = []
    for variant in preset.get("variants") or [""]:
        argv = [f"experiment={name}", *shlex.split(variant)]
        plain = tuple(a for a in argv if "," not in a.partition("=")[2])
        base = _base_values(plain)
        for lines in sweep_jobs(argv):
            jobs.append(Job(table_of(preset), job_name(lines), lines, _values(base, lines), name))
    return jobs


def card_jobs(suite=None) -> list[Job]:
    """The card suite's baseline table: every scheme of conf/pos/ on each calibrated task at its planned seeds, in
    the order that gives verdicts soonest: rope (what every scheme is compared with, and whose seeds re-plan n) at
    all its seeds first, then every other scheme at the suite's first seeds (the task's group), before the plan's
    top-up seeds (its top-up group, which runs after every card task's first round: see ``order``)."""
    from ropelab.analysis import card_suite
    from ropelab.analysis.card import REFERENCE
    from ropelab.core.cli import group_choices
    from ropelab.experiments import card

    suite = suite or card_suite.load()
    others = [scheme for scheme in group_choices("pos") if scheme != REFERENCE]
    jobs = []
    for spec in suite.tasks.values():
        if not spec.calibrated:
            continue
        base = _base_values((f"task={spec.name}", *spec.overrides()))
        planned = suite.seeds_for(spec.name)
        first = [s for s in planned if s in suite.seeds]
        top_up = [s for s in planned if s not in first]
        rounds = [(planned, REFERENCE, ""), *((first, s, "") for s in others), *((top_up, s, TOP_UP) for s in others)]
        for seeds, scheme, suffix in rounds:
            req = card.Request(suite=suite, scheme=scheme, options={}, how=[], trial={}, specs=[spec])
            for seed in seeds:
                argv = card.train_command(req, spec, [seed], card.RESULTS)[3:]
                name = card.job_name(req, spec, seed)
                job = Job(f"{CARD}/{spec.name}", name, argv, _values(base, [f"pos={scheme}", f"seed={seed}"]),
                          f"card/{spec.name}", groups=[f"{CARD} {spec.name}{suffix}"],
                          extrapolate=[spec.name, scheme, str(seed)] if spec.extrapolation else [])
                jobs.append(job)
    return jobs


def claim_groups(jobs: list[Job], conf: Path = CONF_DIR) -> None:
    """Add to each job the claims whose compared group holds it: its table, ``where``, axis values, ``a``/``b``
    selections (the claim's and its parts'), and planned ``seeds``."""
    from ropelab.analysis.claims import _same

    by_table: dict[str, list[Job]] = {}
    for job in jobs:
        by_table.setdefault(job.table, []).append(job)
    for path in sorted((conf / "claims").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text()) or {}
        for claim in raw.get("claims") or []:
            table = str(claim.get("table") or "").split("/")[0]
            if table not in by_table:
                continue
            dotted = lambda sel: {k: v for k, v in (sel or {}).items() if "." in k}  # noqa: E731
            where = dotted(claim.get("where"))
            picks = []
            for part in [claim, *(claim.get("parts") or [])]:
                scope = {**where, **dotted(part.get("where"))} if part is not claim else where
                cells = [s for s in (part.get("a"), part.get("b")) if s]
                picks += [{**scope, **dotted(s)} for s in cells] or ([scope] if part is not claim else [])
            picks = picks or [where]
            axis, values, seeds = claim.get("axis"), claim.get("values"), claim.get("seeds")

            def holds(job: Job) -> bool:
                v = job.values
                return ((seeds is None or any(_same(v.get("seed"), s) for s in seeds))
                        and (not axis or values is None or any(_same(v.get(axis), x) for x in values))
                        and any(all(_same(v.get(k), x) for k, x in s.items()) for s in picks))

            group = f"claim {raw.get('paper', path.stem)}:{claim.get('id') or claim.get('name')}"
            for job in by_table[table]:
                if holds(job):
                    job.groups.append(group)


def check_tables(tables: list[str] | None, conf: Path = CONF_DIR, card: bool = True, option: str = "--tables") -> None:
    """An unknown table name is one ConfigError naming the declared ones."""
    choices = sorted({table_of(p) for p in presets(conf).values()} | ({CARD} if card else set()))
    for table in tables or []:
        if table not in choices:
            raise ConfigError(f"{option} {table}: no such table: choose from {', '.join(choices)}")


def declared(tables: list[str] | None = None, conf: Path = CONF_DIR, card: bool = True) -> list[Job]:
    """Every declared job (the presets', the card's), with its groups; ``tables`` restricts to those tables
    (results folder names; ``card`` is the card's). An unknown table is one ConfigError naming the choices."""
    found = presets(conf)
    check_tables(tables, conf, card)
    jobs = [j for name, p in found.items() if not tables or table_of(p) in tables for j in preset_jobs(name, p)]
    if card and (not tables or CARD in tables):
        jobs += card_jobs()
    jobs = one_per_folder(jobs)
    claim_groups(jobs, conf)
    for job in jobs:
        if not job.groups:
            job.groups.append(f"table {job.table}")   # the name --tables takes
    return jobs


def one_per_folder(jobs: list[Job]) -> list[Job]:
    """A job two presets declare (a variant of one is the other's grid) is one job; one folder declared at two
    settings is a ConfigError: the second computation could never be recorded there."""
    unique: dict[str, Job] = {}
    for job in jobs:
        first = unique.setdefault(job.key, job)
        if first is job:
            continue
        keys = sorted(set(first.values) | set(job.values))
        if differ := [k for k in keys if not identity.bookkeeping(k)
                      and str(first.values.get(k)) != str(job.values.get(k))]:
            raise ConfigError(f"results/{job.key} is declared by {first.source} and by {job.source} at different "
                              f"settings ({', '.join(differ[:4])}): give one of them its own record: table")
    return list(unique.values())


# ----------------------------------------------------------------------------------------------- records

def git(repo: Path, *args: str, env: dict | None = None, check: bool = True, input: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, input=input,
                          env={**os.environ, **(env or {})})
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip() if done.returncode == 0 else ""


def _completed(text: str) -> bool:
    """A summary.json's text (a blob on a branch) that says completed."""
    try:
        return json.loads(text).get("status") == "completed"
    except (ValueError, AttributeError):
        return False


def recorded_on_branch(repo: Path, branch: str) -> dict[str, dict]:
    """<table>/<job> → summary of every completed record on ``branch`` (empty when it does not exist)."""
    if not git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False):
        return {}
    paths = [p for p in git(repo, "ls-tree", "-r", "--name-only", branch, "--", "results").splitlines()
             if p.endswith("/summary.json")]
    if not paths:
        return {}
    out = subprocess.run(["git", "cat-file", "--batch"], cwd=repo, capture_output=True,
                         input="".join(f"{branch}:{p}\n" for p in paths).encode()).stdout
    found, pos = {}, 0
    for p in paths:
        header_end = out.index(b"\n", pos)
        size = int(out[pos:header_end].split()[2])
        body = out[header_end + 1:header_end + 1 + size].decode(errors="replace")
        pos = header_end + 1 + size + 1
        if _completed(body):
            found[p[len("results/"):-len("/summary.json")]] = json.loads(body)
    return found


def recorded_in(results: Path) -> dict[str, dict]:
    """<table>/<job> → summary of every completed record under a results folder."""
    found = {}
    for summary in Path(results).glob("**/summary.json"):
        if (rec := read_record(summary.parent)).completed:
            found[summary.parent.relative_to(results).as_posix()] = rec.summary
    return found


def merged_into(repo: Path, branch: str, main: str) -> set[str]:
    """<table>/<job> of every record the branch held at its last merge into ``main``: there main's state wins, so a
    record main has removed since (its declaration changed) is not done, though the branch still holds it."""
    base = git(repo, "merge-base", main, branch, check=False)
    paths = git(repo, "ls-tree", "-r", "--name-only", base, "--", "results").splitlines() if base else []
    return {p[len("results/"):-len("/summary.json")] for p in paths if p.endswith("/summary.json")}


def is_ancestor(repo: Path, commit: str, of: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", commit, of], cwd=repo,
                          capture_output=True).returncode == 0


def catch_up(repo: Path, branch: str, main: str) -> None:
    """Move a branch that main has wholly merged up to main: new records then build on main's tree, so a record main
    removed since (its declaration changed) and the campaign records again merges as an addition, not as a
    modify/delete conflict. Compare-and-swap: a record committed meanwhile keeps the branch where it is."""
    head = git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False)
    target = git(repo, "rev-parse", "--verify", "-q", main, check=False)
    if head and target and is_ancestor(repo, head, target):
        git(repo, "update-ref", f"refs/heads/{branch}", target, head, check=False)


def commit_record(repo: Path, branch: str, base: str, folder: Path, rel: str, message: str,
                  retries: int = LOCK_RETRIES) -> str:
    """Commit the files of ``folder`` as ``rel`` (results/<table>/<job>) on ``branch`` (created at ``base``) in
    one ref update; the user's index and files untouched. Retries while a lock is held or the branch moved."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
    blobs = [(git(repo, "hash-object", "-w", str(p.resolve())), f"{rel}/{p.relative_to(folder).as_posix()}")
             for p in files]
    for attempt in range(retries):
        parent = git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False)
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            try:
                git(repo, "read-tree", parent or base, env=env)
                git(repo, "update-index", "--add", "--index-info", env=env,
                    input="".join(f"100644 {blob}\t{path}\n" for blob, path in blobs))
                tree = git(repo, "write-tree", env=env)
                commit = git(repo, "commit-tree", tree, "-p", parent or base, "-m", message)
                git(repo, "update-ref", f"refs/heads/{branch}", commit, parent or "0" * 40)
                return commit
            except RuntimeError:
                time.sleep(min(0.2 * (attempt + 1), 5))
    raise RuntimeError(f"could not commit {rel} on {branch} after {retries} tries (a git lock held?)")


# ----------------------------------------------------------------------------------------------- cost and order

def _per_step(summary: dict) -> float | None:
    wall, steps = summary.get("wall_seconds"), summary.get("steps") or summary.get("max_steps")
    steps = steps and steps - (summary.get("resumed_from_step") or 0)   # a resumed run's wall time is its tail's
    return wall / steps if wall and steps else None


def estimate(jobs: list[Job], recorded: dict[str, dict]) -> None:
    """Each job's CPU-seconds: its steps × the median seconds per step of completed records of the same setting
    (same table and name but the seed), else of the same task and scheme at the same steps, else the same task,
    else every record."""
    by_setting: dict[tuple, list[float]] = {}
    by_task_pos_steps: dict[tuple, list[float]] = {}
    by_task: dict[str, list[float]] = {}
    every: list[float] = []
    for key, summary in recorded.items():
        rate = _per_step(summary)
        if rate is None or (summary.get("machine") or {}).get("gpu"):   # a GPU's seconds are not CPU-seconds
            continue
        table, _, name = key.rpartition("/")
        by_setting.setdefault((table, _unseeded(name)), []).append(rate)
        by_task_pos_steps.setdefault((summary.get("task"), summary.get("pos"), summary.get("max_steps")), []).append(rate)
        by_task.setdefault(summary.get("task"), []).append(rate)
        every.append(rate)
    for job in jobs:
        v = job.values
        for rates in (by_setting.get((job.table, _unseeded(job.name))),
                      by_task_pos_steps.get((v.get("task.name"), v.get("pos.name"), job.steps)),
                      by_task.get(v.get("task.name")), every):
            if rates:
                job.cost = job.steps * statistics.median(rates)
                break


def _unseeded(name: str) -> str:
    return ",".join(p for p in name.split(",") if not p.startswith("seed="))


def held(jobs: list[Job], done: set[str], recorded: dict[str, dict], commit: str, results: Path,
         here: dict | None = None) -> dict[str, str]:
    """group → why its jobs, trained on this machine at ``commit``, would not be one computation with its records
    (``ropelab.core.identity.pairable``): they ran on a CPU kind no committed kind check joins to this one, at
    commits no equivalence record joins to ``commit``, or at settings (the precision ``auto`` resolves to) its jobs
    here would not run at (they would be trials, never recorded). Such a group completes where its records ran. A
    group whose jobs ask for an accelerator this machine lacks is held too."""
    from ropelab.core import machine

    here = machine.describe() if here is None else here
    kind, pinned = identity.kind_of({"machine": here}), commit[:7]
    members: dict[str, list[Job]] = {}
    for job in jobs:
        for group in job.groups:
            members.setdefault(group, []).append(job)
    out = {}
    for group, its in members.items():
        left = [j for j in its if j.key not in done]
        # a preset's grid is compared across its table (its report), a card task's too (every scheme with rope, its
        # top-up with its first round), a claim's within the group
        whole_table = group.startswith(("table ", f"{CARD} "))
        compared = [j for j in jobs if j.table == its[0].table] if whole_table else its
        records = [recorded[j.key] for j in compared if j.key in done and j.key in recorded]
        if not left:
            continue
        try:
            resolved = sorted({_resolved(j) for j in left})
        except ConfigError as err:   # a GPU table on a CPU machine
            out[group] = f"its jobs cannot run here: {err}"
            continue
        if not records:
            continue
        # what its jobs would record here: this machine at the pinned commit, on the device and at the precision
        # auto resolves to (a GPU's records are not joined to a CPU's jobs by a kind check)
        settings = identity.of_record(records[0])
        ours = [{"machine": {**here, "commit": pinned},
                 "identity": {**settings, "trainer.accelerator": device, "trainer.precision": precision}}
                for device, precision in resolved]
        pairing = identity.pairable([*records, *ours], results)
        if set(pairing.failed) == {"settings"} and (ran_at := _records_precision(records, left, here)):
            # a kind check joins the records' kind to this one: its jobs run here at the precision auto gave them
            at_theirs = {**ours[0], "identity": {**ours[0]["identity"], "trainer.precision": ran_at}}
            if identity.pairable([*records, at_theirs], results).ok:
                for job in left:
                    job.env = {machine.AUTO_PRECISION_ENV: ran_at}
                continue
        table = its[0].table   # what reproduce reads
        theirs, mine = [identity.of_record(s) for s in records], [o["identity"] for o in ours]
        keys = identity.varying([*theirs, *mine])
        shown = lambda ids: ", ".join(sorted({identity.show(i, keys) for i in ids}))  # noqa: E731
        if "kinds" in pairing.failed and "settings" in pairing.failed:   # no kind check joins other settings
            out[group] = (f"its {len(records)} records ran on {', '.join(pairing.others('kinds', kind))} at "
                          f"{shown(theirs)}; this machine is {kind} and would run its jobs at {shown(mine)}: "
                          "finish it there")
        elif "kinds" in pairing.failed:   # before commits: no equivalence record finishes it here
            out[group] = (f"its {len(records)} records ran on {', '.join(pairing.others('kinds', kind))}; this "
                          f"machine is {kind}: finish it there, or bound the kinds here (`ropelab reproduce {table} "
                          "--kind-check`, committed)")
        elif "commits" in pairing.failed:
            commits = pairing.others("commits", pinned)
            out[group] = (f"its records ran at {', '.join(commits)}, not the same code as {pinned} nor joined to it "
                          f"by an equivalence record: pin --commit {commits[0]}, or commit "
                          f"{identity.equivalence_command(commits[0], pinned, table)}")
        elif "settings" in pairing.failed:
            out[group] = (f"its records ran at {shown(theirs)}; here its jobs would run at {shown(mine)}: they would be "
                          "trials")
    return out


def differs_at_pin(jobs: list[Job], repo: Path, commit: str) -> dict[str, str]:
    """group → why: the preset that declares its jobs differs between this checkout and the pinned commit, where
    they train, or the card suite declares its jobs otherwise there, or the pinned commit's results/<table> holds
    records this checkout has moved or removed since. The worktree would make them other jobs or none, or check
    them there against those records (trials, never recorded): they wait for a pinned commit that agrees."""
    changed = set(git(repo, "diff", "--name-only", commit, "--", "conf/experiment", "conf/card").split())
    cards = SUITE_FILE in changed and any(job.table.startswith(f"{CARD}/") for job in jobs)
    theirs = _card_jobs_at(repo, commit) if cards else {}
    out = {}
    for job in jobs:
        if job.table.startswith(f"{CARD}/"):
            if SUITE_FILE in changed and theirs.get(job.key) != job.argv:   # a comment or `why` changes no job
                for group in job.groups:
                    out[group] = (f"{SUITE_FILE} here declares its jobs otherwise than at the pinned commit "
                                  f"{commit[:7]}, where they train: commit it, and pin that commit")
        elif (path := f"conf/experiment/{job.source}.yaml") in changed:
            for group in job.groups:
                out[group] = (f"{path} here differs from the pinned commit {commit[:7]}'s, where its jobs train: "
                              "commit it, and pin that commit")
    gone: dict[str, list[str]] = {}   # table → its records at the pin that this checkout no longer holds
    for path in git(repo, "diff", "--name-only", "--no-renames", "--diff-filter=D", commit, "--", "results").split():
        if path.endswith("/summary.json"):
            table, _, name = path[len("results/"):-len("/summary.json")].rpartition("/")
            gone.setdefault(table, []).append(name)
    for job in jobs:
        if names := gone.get(job.table):
            for group in job.groups:
                out[group] = (f"results/{job.table} at the pinned commit {commit[:7]} holds {len(names)} records "
                              f"this checkout has moved or removed (such as {names[0]}); there the jobs would be "
                              "checked against them and become trials: pin a commit after the move")
    return out


def _card_jobs_at(repo: Path, commit: str) -> dict[str, list[str]]:
    """The card's baseline jobs (key → train.py arguments) as the suite at ``commit`` declares them."""
    from ropelab.analysis import card_suite

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "suite.yaml"
        suite = git(repo, "show", f"{commit}:{SUITE_FILE}", check=False)
        if not suite:   # a commit before the card declares none of its jobs
            return {}
        path.write_text(suite)
        return {j.key: j.argv for j in card_jobs(card_suite.load(path))}


def _records_precision(records: list[dict], left: list[Job], here: dict) -> str | None:
    """The one precision ``auto`` resolved to for every record of a group, where this CPU can run it and the jobs
    left ask for ``auto``; else None."""
    from ropelab.core import machine

    if any(str(j.values.get("trainer.precision", "auto")) != "auto" for j in left):
        return None
    return machine.auto_precision_as((identity.of_record(r).get("trainer.precision") for r in records),
                                     (here.get("cpu") or {}).get("flags") or [])


def _resolved(job: Job) -> tuple[str, str]:
    """(device, precision) ``auto`` resolves to on this machine (an accelerator it lacks: a ConfigError)."""
    from ropelab.core import machine

    return machine.choose(str(job.values.get("trainer.accelerator", "auto")),
                          str(job.values.get("trainer.precision", "auto")))[:2]


def order(jobs: list[Job], done: set[str], held: Iterable[str] = ()) -> list[tuple[str, list[Job], float]]:
    """(group, its jobs left, their CPU-seconds), the cheapest group first, every card task's top-up after the
    first rounds (the expensive tasks at the suite's first seeds before the cheap ones at more); a job in several
    groups runs with the first of them to come; a job of a ``held`` group does not run."""
    held = set(held)
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        if job.key not in done and not held.intersection(job.groups):
            for group in job.groups:
                groups.setdefault(group, []).append(job)
    ranked = sorted(groups.items(), key=lambda kv: (kv[0].endswith(TOP_UP), sum(j.cost for j in kv[1]), kv[0]))
    taken: set[str] = set()
    out = []
    for group, members in ranked:
        left = [j for j in members if j.key not in taken]
        taken.update(j.key for j in left)
        if left:
            out.append((group, left, sum(j.cost for j in left)))
    return out


def plan_text(plan: list[tuple[str, list[Job], float]], held: dict[str, str] | None = None) -> str:
    lines = [f"{'group':58} {'jobs':>5} {'CPU-h':>7}"]
    for group, left, seconds in plan:
        lines.append(f"{group[:58]:58} {len(left):5d} {seconds / 3600:7.2f}")
    total = sum(len(left) for _, left, _ in plan)
    lines.append(f"{'total':58} {total:5d} {sum(s for *_, s in plan) / 3600:7.2f}")
    if held:
        lines.append(f"held here, not one computation with their records ({len(held)} groups):")
        lines += [f"  {group}: {why}" for group, why in sorted(held.items())]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- the worktree

def pin(repo: Path, rev: str, main: str = "main") -> str:
    commit = git(repo, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}", check=False)
    if not commit:
        raise ConfigError(f"--commit {rev}: no such commit in {repo}")
    if not is_ancestor(repo, commit, main):
        raise ConfigError(f"--commit {rev} ({commit[:7]}) is not an ancestor of {main}: pin a commit of {main}")
    return commit


def worktree(repo: Path, path: Path, commit: str) -> Path:
    """The worktree at ``path`` checked out at ``commit`` (created if absent); one with uncommitted changes to
    tracked files is refused (its records, untracked, are outputs: those the commit holds, merged since, are taken
    as committed, the others stay)."""
    path = path if path.is_absolute() else repo / path
    if not (path / ".git").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        git(repo, "worktree", "add", "--detach", str(path), commit)
        return path
    if dirty := git(path, "status", "--porcelain", "--untracked-files=no"):
        raise ConfigError(f"worktree {path} has uncommitted changes ({dirty.splitlines()[0].strip()} …): commit or "
                          "discard them; the campaign trains committed code only")
    if git(path, "rev-parse", "HEAD") != commit:   # -f: its untracked records that the commit holds (merged) yield
        git(path, "checkout", "-q", "-f", "--detach", commit)
    return path


# ----------------------------------------------------------------------------------------------- running

# A card task that extrapolates (code_lm) records its loss at each of the suite's factors of the window in
# extrapolation.csv, as `ropelab card` does after training: evaluated from the run's checkpoint by the pinned code (in
# the worktree, one thread as the training), so that the record is one computation, committed whole with it.
EXTRAPOLATE = """\
import sys, torch
from ropelab.analysis import card_suite
from ropelab.experiments import card
torch.set_num_threads(1)   # a pin whose card.extrapolate evaluates at the process's threads
task, scheme, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
suite = card_suite.load()
req = card.Request(suite=suite, scheme=scheme, options={}, how=[], trial={}, specs=[suite.tasks[task]])
job = next(j for j in card.plan_jobs(req, card.RESULTS) if j.seed == seed)
sys.exit(0 if job.state == "recorded" and card.extrapolate(req, job, card.RESULTS) else 1)
"""
EXTRAPOLATION = "extrapolation.csv"


def train_command(job: Job, tree: Path, passthrough: list[str]) -> list[str]:
    train = [sys.executable, str(tree / "train.py"), "-m", *job.argv, "trainer.threads=1", *passthrough]
    if not job.extrapolate:
        return train
    return ["bash", "-c", f"{shlex.join(train)} && {shlex.join([sys.executable, '-c', EXTRAPOLATE, *job.extrapolate])}"]


def finished(record: Path, job: Job) -> Record | None:
    """The job's record, read, where it is whole: completed, with its extrapolation where its task extrapolates."""
    read = read_record(record)
    return read if read.completed and (not job.extrapolate or (record / EXTRAPOLATION).is_file()) else None


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"


def run(jobs: list[Job], plan: list[tuple[str, list[Job], float]], repo: Path, tree: Path, branch: str,
        commit: str, parallel: int, passthrough: list[str], log: Callable[[str], None] = print,
        command: Callable[[Job, Path, list[str]], list[str]] = train_command) -> int:
    """Train the plan's jobs, ``parallel`` at a time, each committed as it lands; 0 when every job was recorded."""
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree}"}
    queue = [(group, job) for group, left, _ in plan for job in left]
    total, left_s = len(queue), sum(s for *_, s in plan)
    done = failed = 0
    spent = estimated_done = 0.0
    started = time.time()
    running: dict[subprocess.Popen, tuple[str, Job, float, Any]] = {}
    logs = tree / "runs" / "campaign" / "logs"
    status = 0
    before = _stop_on_signals()
    try:
        while queue or running:
            while queue and len(running) < parallel:
                group, job = queue.pop(0)
                out = logs / job.table / f"{job.name}.log"
                out.parent.mkdir(parents=True, exist_ok=True)
                handle = open(out, "w")
                proc = subprocess.Popen(command(job, tree, passthrough), cwd=tree, env={**env, **job.env},
                                        stdout=handle, stderr=subprocess.STDOUT,
                                        start_new_session=True)   # a group of its own: a stop ends all of it
                running[proc] = (group, job, time.time(), handle)
                pinned = f" (auto precision as its group's records: {', '.join(job.env.values())})" if job.env else ""
                log(f"start {job.key} [{group}]{pinned}")
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                group, job, t0, handle = running.pop(proc)
                handle.close()
                record = tree / "results" / job.table / job.name
                left_s -= job.cost
                if finished(record, job):
                    commit_record(repo, branch, commit, record, f"results/{job.table}/{job.name}",
                                  f"records: {job.table}/{job.name} (campaign, commit {commit[:7]})")
                    done += 1
                    spent += time.time() - t0
                    estimated_done += job.cost
                else:
                    failed += 1
                    status = 1
                    log(f"NOT recorded {job.key} (exit {proc.returncode}{why_not(tree, job)}; log {out_rel(tree, job)})")
                speed = spent / estimated_done if estimated_done else 1.0
                eta = left_s * speed / parallel
                log(f"{time.strftime('%H:%M:%S')} done {done}/{total} failed {failed} left {len(queue) + len(running)}"
                    f" jobs, {_hours(left_s)} CPU-h; ETA {eta / 3600:.1f} h; {job.key} "
                    f"{time.time() - t0:.0f} s (estimated {job.cost:.0f} s)")
    except KeyboardInterrupt:
        for proc in running:   # a card job's shell and the trainer under it alike
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        log(f"stopped: {len(running)} jobs in flight lost; run again to resume")
        return 130
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    log(f"campaign: {done} recorded, {failed} not, {time.time() - started:.0f} s")
    return status


def _stop_on_signals() -> dict:
    """SIGTERM (``kill``, a machine's shutdown) and SIGINT stop the campaign as Ctrl-C does: the jobs in flight are
    ended, every finished record is already committed. SIGINT too, since a shell that starts a command in the
    background with ``&`` has it ignore SIGINT. Returns the handlers replaced."""
    def stop(signum, frame):
        raise KeyboardInterrupt

    return {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}


def why_not(tree: Path, job: Job) -> str:
    """The trainer's own words on why the job left no record (diverged, a trial, an error), from its log."""
    try:
        lines = Path(out_rel(tree, job)).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    said = [line.strip() for line in lines if line.strip().startswith(("diverged", "trial,", "error:", "failed"))]
    return f": {' / '.join(said[:2])[:400]}" if said else ""


def out_rel(tree: Path, job: Job) -> str:
    return str(tree / "runs" / "campaign" / "logs" / job.table / f"{job.name}.log")


def salvage(jobs: list[Job], done: set[str], repo: Path, tree: Path, branch: str, commit: str,
            log: Callable[[str], None] = print) -> None:
    """Commit records the worktree holds but the branch lacks (a campaign killed between its job's end and the
    commit). Only a record the pinned commit trained is this campaign's output: not an earlier pin's left in a
    reused worktree (its setting since redeclared), nor one the pinned commit holds (committed after it was trained,
    so at a later commit than its own; a link to another table's record, unlinked on main since, included)."""
    for job in jobs:
        record = tree / "results" / job.table / job.name
        whole = job.key not in done and finished(record, job)
        if whole and commit.startswith(whole.commit):
            commit_record(repo, branch, commit, record, f"results/{job.table}/{job.name}",
                          f"records: {job.table}/{job.name} (campaign, commit {commit[:7]})")
            done.add(job.key)
            log(f"committed {job.key} (recorded before the last stop)")


# ----------------------------------------------------------------------------------------------- equivalence

def equivalence(repo: Path, revs: list[str], table: str, count: int, branch: str, main: str,
                log: Callable[[str], None] = print) -> int:
    """Retrain the ``count`` cheapest declared jobs of ``table`` at both commits on this machine (one thread, no
    record) and compare their metrics.csv byte for byte (wall-time columns aside); the outcome is a record,
    results/equivalence/<a>_<b>/summary.json, in this checkout and committed on ``branch``."""
    from ropelab.core import machine
    from ropelab.experiments.reproduce import first_difference

    commits = [pin(repo, rev, main) for rev in revs]
    trees = [worktree(repo, Path(f"runs/campaign/equivalence-{c[:12]}"), c) for c in commits]
    jobs = declared([table])
    estimate(jobs, {**recorded_in(repo / "results"), **recorded_on_branch(repo, branch)})
    chosen = sorted((j for j in jobs if j.table.split("/")[0] == table.split("/")[0]), key=lambda j: (j.cost, j.name))[:count]
    outcomes = []
    for i, job in enumerate(chosen):
        runs_ = []
        # the committed records' resolved precision, not this machine's choice: the check retrains their computation
        precision = (record.read(repo / "results" / job.table / job.name).summary or {}).get("precision")
        pinned = [f"trainer.precision={precision}"] if precision else []
        for commit, tree in zip(commits, trees):
            out = tree / "runs" / "campaign" / "equivalence" / f"job{i}"   # Hydra's grammar refuses = and , in a path
            cmd = [sys.executable, str(tree / "train.py"), *[a for a in job.argv if not a.startswith("hydra.job.")],
                   *pinned, "trainer.threads=1", "record=null", "rerun=true", f"hydra.run.dir={out}"]
            env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree}"}
            done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
            if done.returncode != 0 or not (out / "metrics.csv").is_file():
                raise ConfigError(f"{job.key} at {commit[:7]} did not train: {done.stderr.strip().splitlines()[-1:]}")
            runs_.append(out)
        diff, _ = first_difference(runs_[0], runs_[1])
        outcomes.append({"table": job.table, "job": job.name, "precision": precision or "auto", "match": not diff,
                         **({"differs": diff} if diff else {})})
        log(f"{job.key}: {'byte-identical' if not diff else 'differs: ' + diff}")
    match = bool(outcomes) and all(o["match"] for o in outcomes)
    rel = f"results/{identity.EQUIVALENCE}/{commits[0][:7]}_{commits[1][:7]}"
    folder = repo / rel
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps({
        "status": "completed", "commits": commits, "kind": identity.kind_of({"machine": machine.describe()}),
        "match": match, "jobs": outcomes}, indent=1) + "\n")
    commit_record(repo, branch, commits[1], folder, rel, f"records: {rel} (equivalence check)")
    log(f"equivalence {commits[0][:7]} {commits[1][:7]}: {'the same computation' if match else 'NOT the same'} "
        f"({sum(o['match'] for o in outcomes)}/{len(outcomes)} jobs byte-identical); {rel}, committed on {branch}")
    return 0 if match else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ropelab.experiments.campaign", description=__doc__.splitlines()[0])
    p.add_argument("--plan", action="store_true", help="print the jobs and CPU-hours left by group; train nothing")
    p.add_argument("--tables", default="", help="comma-separated tables (results/<table>; card); default all")
    p.add_argument("--jobs", type=at_least(1), default=1, help="jobs in parallel, one thread each (default 1)")
    p.add_argument("--commit", default="HEAD", help="the commit whose code trains (an ancestor of main)")
    p.add_argument("--main", default="main", help="the branch the pinned commit must be an ancestor of")
    p.add_argument("--branch", default=BRANCH, help=f"the branch records are committed on (default {BRANCH})")
    p.add_argument("--worktree", type=Path, default=WORKTREE, help=f"the worktree (default {WORKTREE})")
    p.add_argument("--equivalence", nargs=2, metavar=("A", "B"), help="are commits A and B one computation? "
                   "retrain --count jobs of --jobs-from at both here; writes results/equivalence/A_B/")
    p.add_argument("--jobs-from", default="", help="the table whose cheapest jobs --equivalence retrains")
    p.add_argument("--count", type=at_least(1), default=2, help="how many jobs --equivalence retrains (default 2)")
    p.add_argument("overrides", nargs="*", help="passed to every job: hydra/launcher=slurm …")
    args = p.parse_args(argv)
    repo = Path(git(Path.cwd(), "rev-parse", "--show-toplevel", check=False) or REPO)
    tables = [t for t in args.tables.split(",") if t] or None
    try:
        return _campaign(args, repo, tables)
    except ConfigError as err:   # bad input: one line, nothing trains
        print(f"error: {err}", file=sys.stderr)
        return 2


def _campaign(args: argparse.Namespace, repo: Path, tables: list[str] | None) -> int:
    if args.equivalence:
        check_tables([args.jobs_from], option="--jobs-from")
        return equivalence(repo, args.equivalence, args.jobs_from, args.count, args.branch, args.main)
    check_tables(tables)
    commit = pin(repo, args.commit, args.main)
    tree = None if args.plan else worktree(repo, args.worktree, commit)
    if tree and not git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{args.branch}", check=False):
        if remote := git(repo, "rev-parse", "--verify", "-q", f"refs/remotes/origin/{args.branch}", check=False):
            git(repo, "update-ref", f"refs/heads/{args.branch}", remote)   # resuming another machine's campaign
    if tree:
        catch_up(repo, args.branch, args.main)
    jobs = declared(tables)
    on_branch = recorded_on_branch(repo, args.branch)
    recorded = {**recorded_in(repo / "results"), **on_branch}
    done = (set(on_branch) - merged_into(repo, args.branch, args.main)) | {
        j.key for j in jobs if read_record(repo / "results" / j.table / j.name).completed}
    if tree is not None:
        salvage(jobs, done, repo, tree, args.branch, commit)
    estimate(jobs, recorded)
    kept_back = {**held(jobs, done, recorded, commit, repo / "results"), **differs_at_pin(jobs, repo, commit)}
    plan = order(jobs, done, kept_back)
    print(plan_text(plan, kept_back), flush=True)
    if args.plan:
        return 0
    return run(jobs, plan, repo, tree, args.branch, commit, args.jobs, args.overrides,
               log=lambda line: print(line, flush=True))


if __name__ == "__main__":
    raise SystemExit(main())
