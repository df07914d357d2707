"""What a job is: the config keys that name it, the settings that change what it computes without naming it, and
the bookkeeping that changes neither. One place for the three lists: conf/config.yaml's
``hydra.job.config.override_dirname.exclude_keys`` is ``${ropelab_job_name_excludes:}`` (below), the sweep report
leaves the same keys out of its columns (``ropelab.analysis.report.sweep.IGNORED_KEYS``), and a resume compares a
run's config with the command's on everything but ``BOOKKEEPING``.

A job's *identity* is ``COMPUTE`` resolved (``auto`` → what ran: fused or not, compiled or not, the precision, the
thread count, the device), written to summary.json as ``identity``. A record made before a setting was recorded
reads as the behaviour it had then (``of_record``): no ``optim.fused`` → the unfused AdamW, no ``compile`` →
not compiled. A sweep job whose identity is none of its table's records' is a trial (never recorded), and a table
whose records disagree is *mixed* (``table``, ``describe``).
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

# keys that change neither what a job computes nor its name: where it lands, whether it runs again, what it prints
BOOKKEEPING = ("name", "resume", "record", "record_also", "variants", "rerun", "retry_failed", "needs_checkpoint",
               "trainer.progress", "logger")
# command-line choices of how a sweep is launched (no config keys of a job)
LAUNCH = ("experiment", "hydra/launcher", "hydra.launcher.n_jobs", "hydra.launcher.pack")
# settings that change the numbers a job computes (float rounding compounds over hundreds of steps into another
# run), compared as resolved values between a job and its table; auto resolves per machine
COMPUTE = ("optim.fused", "trainer.compile", "trainer.precision", "trainer.threads", "trainer.accelerator",
           "trainer.devices")
# a precision override has always named its job folder (trainer.precision=32-true,…): kept so, folder names stay
NAMED = ("trainer.precision",)


def job_name_excludes() -> list[str]:
    """The keys left out of a sweep job's folder name (Hydra's ``override_dirname.exclude_keys``)."""
    return [*LAUNCH, *BOOKKEEPING, *(k for k in COMPUTE if k not in NAMED)]


def bookkeeping(key: str) -> bool:
    """A flattened config key (``logger.csv._target_``, ``trainer.progress``) that changes nothing computed."""
    return key in BOOKKEEPING or key.split(".", 1)[0] in ("logger", "hydra")


def _dotted(config: Mapping[str, Any] | None, key: str, default: Any = None) -> Any:
    node: Any = config or {}
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def of_record(summary: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A run's identity from its summary.json (and config.yaml): its ``identity`` where it wrote one, else read
    from what it did write, each setting absent there at the behaviour it had before it existed."""
    if summary.get("identity"):
        return dict(summary["identity"])
    fused = summary.get("fused_adamw")
    if fused is None:  # recorded since optim.fused existed; before it, AdamW ran its unfused kernel
        configured = _dotted(config, "optim.fused", False)
        fused = configured if isinstance(configured, bool) else False
    compiled = summary.get("compile")
    if compiled is None:  # before trainer.compile existed nothing compiled
        configured = _dotted(config, "trainer.compile", False)
        compiled = configured if isinstance(configured, bool) else False
    return {"optim.fused": bool(fused), "trainer.compile": bool(compiled),
            "trainer.precision": summary.get("precision") or _dotted(config, "trainer.precision"),
            "trainer.threads": summary.get("threads") or _dotted(config, "trainer.threads"),
            "trainer.accelerator": summary.get("accelerator") or _dotted(config, "trainer.accelerator"),
            "trainer.devices": summary.get("devices") or _dotted(config, "trainer.devices", 1)}


def read(record: Path) -> dict[str, Any] | None:
    """The identity of the completed run or record in folder ``record``, else None."""
    import yaml

    try:
        summary = json.loads((Path(record) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if summary.get("status") != "completed":
        return None
    try:
        config = yaml.safe_load((Path(record) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        config = None
    return of_record(summary, config)


def _key(identity: Mapping[str, Any]) -> tuple:
    return tuple((k, identity.get(k)) for k in COMPUTE)


def table(folder: Path, leave_out: Iterable[str] = ()) -> Counter:
    """How many completed records of the table in ``folder`` (its job folders; those named in ``leave_out``
    aside) ran under each identity: one key = consistent, several = mixed."""
    skip = set(leave_out)
    counts: Counter = Counter()
    for job in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else ():
        if job.name in skip or job.name.startswith(".") or not job.is_dir():
            continue
        if (found := read(job)) is not None:
            counts[_key(found)] += 1
    return counts


def show(identity: Mapping[str, Any] | tuple, keys: Iterable[str] = COMPUTE) -> str:
    """``optim.fused=false trainer.threads=1`` for the ``keys`` of an identity (a dict or ``table``'s key)."""
    values = dict(identity)
    return " ".join(f"{k}={word(values.get(k))}" for k in keys)


def word(value: Any) -> str:
    """A value as the command line writes it: true, false, null, 1, bf16-mixed."""
    return {True: "true", False: "false", None: "null"}.get(value, str(value)) if not isinstance(value, (int, float)) \
        or isinstance(value, bool) else str(value)


def differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return [k for k in COMPUTE if a.get(k) != b.get(k)]


def describe(counts: Counter) -> str:
    """One phrase for ``table``'s counts: the one identity, or "mixed: n × …; m × …" naming only the keys that
    differ."""
    if not counts:
        return "no completed records"
    return show(next(iter(counts))) if len(counts) == 1 else f"mixed: {mixture(counts)}"


def varying(identities: Iterable[Mapping[str, Any] | tuple]) -> list[str]:
    """The keys of ``COMPUTE`` on which ``identities`` (dicts, or ``table``'s keys) differ."""
    kinds = [dict(k) for k in identities]
    return [k for k in COMPUTE if len({kind.get(k) for kind in kinds}) > 1]


def mixture(counts: Counter) -> str:
    """"n × …; m × …" for several identities, naming only the keys that differ."""
    return "; ".join(f"{n} × {show(k, varying(counts))}" for k, n in counts.most_common())


def trial_reason(expected: Mapping[str, Any], folder: Path, job: str, counts: Counter | None = None) -> str:
    """Why a job with identity ``expected`` is a trial in the table ``folder`` ("" if it is not): its identity is
    none of the table's records' (its own earlier record, ``job``, aside; ``counts``: ``table``'s, if read)."""
    counts = table(folder, leave_out=(job,)) if counts is None else counts
    if not counts or _key(expected) in counts:
        return ""
    nearest = min(counts, key=lambda k: len(differing(expected, dict(k))))
    keys = differing(expected, dict(nearest))
    theirs = describe(counts) if len(counts) > 1 else show(nearest, keys)
    return (f"{show(expected, keys)} differs from {folder}'s records ({theirs}): what it computes is not the "
            f"table's; a trial, not recorded (set {show(nearest, keys)} to add to the table)")


# ------------------------------------------------------------------------------------- one computation per comparison
# Records pair (a claim's A − B, a card's scheme − baseline, a reproduction's seed spread) only where they are one
# computation: one commit, or commits a committed equivalence record shows to compute the same (the same jobs
# retrained at both on one machine gave byte-identical metrics.csv); one kind of machine, or kinds a committed kind
# check bounds (the same jobs trained on both, their paired differences within the seed spread).
EQUIVALENCE = "equivalence"   # results/equivalence/<commit7>_<commit7>/summary.json
KIND_CHECK = "kind_check"     # results/kind_check/<kind slug>__<kind slug>/summary.json


def commit_of(summary: Mapping[str, Any]) -> str:
    return str((summary.get("machine") or {}).get("commit") or "unknown")[:7]


def kind_of(summary: Mapping[str, Any]) -> str:
    """The machine kind a record ran on: the GPU, or the CPU model and its fastest matmul flag; with torch's version."""
    from ropelab.core.machine import label

    made = summary.get("machine") or {}
    return f"{label(made)} torch {made.get('torch', '?')}" if made else str(summary.get("accelerator") or "unknown")


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in ".-" else "_" for ch in text).strip("_")


def _checks(results: Path, folder: str) -> list[dict]:
    out = []
    for path in sorted((Path(results) / folder).glob("*/summary.json")):
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if summary.get("status") == "completed":
            out.append({**summary, "path": str(path.parent)})
    return out


def joined(items: list[str], links: list[tuple[str, str]]) -> bool:
    """Every item reachable from the first through ``links`` (pairs shown to be the same computation)."""
    seen, todo = {items[0]}, [items[0]]
    while todo:
        here = todo.pop()
        for a, b in links:
            for x, y in ((a, b), (b, a)):
                if x == here and y not in seen:
                    seen.add(y)
                    todo.append(y)
    return set(items) <= seen


def equivalence_command(earlier: str, later: str, table: str | Path) -> str:
    """The command that commits an equivalence record joining ``earlier`` to ``later``, retraining jobs of ``table``
    (its records' folder: results/pope_baselines, card/code_lm; the card's tables are declared as "card")."""
    declared_as = "card" if Path(table).parent.name == "card" else Path(table).name
    return f"`ropelab campaign --equivalence {earlier} {later} --jobs-from {declared_as}`"


def equivalent_commits(results: Path) -> list[tuple[str, str]]:
    """Pairs of commits (7 characters) a committed equivalence record shows to compute the same."""
    return [(str(c["commits"][0])[:7], str(c["commits"][1])[:7]) for c in _checks(results, EQUIVALENCE)
            if c.get("match") is True and len(c.get("commits") or []) == 2]


# what a run computes with: two commits whose files here are identical in git run the same code (a commit that
# adds records or rewrites a README changes none of them)
CODE = ("train.py", "src", "tasks", "conf", "pyproject.toml")


@functools.cache
def code_of(commit: str, repo: Path) -> str | None:
    """The git object ids of ``CODE`` at ``commit`` in ``repo``; None where git does not know the commit."""
    done = subprocess.run(["git", "rev-parse", *(f"{commit}:{path}" for path in CODE)],
                          cwd=repo, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def commit_links(commits: Iterable[str], results: Path) -> list[tuple[str, str]]:
    """Pairs of commits that are one computation: joined by an equivalence record under ``results``, or running
    the same code (``CODE`` identical in the git repository that holds ``results``)."""
    checked = equivalent_commits(results)
    commits = sorted(set(commits).union(*checked))   # a commit may share its code with one a check names
    repo = Path(results).resolve().parent
    code = {c: code_of(c, repo) for c in commits} if (repo / ".git").exists() else {}
    return [*checked,
            *((a, b) for i, a in enumerate(commits) for b in commits[i + 1:] if code.get(a) and code.get(a) == code.get(b))]


def bounded_kinds(results: Path) -> list[tuple[str, str, str]]:
    """(kind, kind, what the check says the kind moves) for each committed kind check that bounds the effect."""
    return [(c["kinds"][0], c["kinds"][1], c.get("says", "")) for c in _checks(results, KIND_CHECK)
            if c.get("bounded") is True and len(c.get("kinds") or []) == 2]


ONE_COMPUTATION = "one commit, one machine kind"   # the reason records pair with nothing to join


@dataclass(frozen=True)
class Pairing:
    """Whether records may be compared with one another: ``reason`` says why (not) in one line; ``failed`` maps each
    axis no committed check joins ("commits", "kinds", "settings") to its values, each with its number of records."""
    ok: bool
    reason: str
    failed: dict[str, dict[str, int]] = field(default_factory=dict)

    def others(self, axis: str, than: str) -> list[str]:
        """The values on a failed ``axis`` other than ``than`` (this machine's kind, the pinned commit)."""
        return [v for v in self.failed.get(axis, {}) if v != than]


def pairable(records: Iterable[Any], results: Path | None = None, declared: Iterable[str] = ()) -> Pairing:
    """Whether ``records`` may be compared with one another, and why not. A record is its summary.json (a dict) or
    anything with a ``summary``. Several commits pair only where committed equivalence records join them (or git
    shows them the same code); several machine kinds only where committed kind checks join them; several resolved
    settings never. ``declared`` ("commits", "cpus"): a claim's own declaration that they may, said in the reason.
    ``results``: the folder of the check records (default the checkout's results/). Equivalence records:
    ``equivalence_command``; kind checks: ``ropelab reproduce TABLE --kind-check``."""
    results = Path(results) if results is not None else Path(__file__).resolve().parents[3] / "results"
    summaries = [r if isinstance(r, Mapping) else r.summary for r in records]
    commits = Counter(commit_of(s) for s in summaries)
    kinds = Counter(kind_of(s) for s in summaries)
    computations = Counter(_key(of_record(s)) for s in summaries)
    said, failed, why = [], {}, []
    if len(commits) > 1:
        if "commits" in declared:
            said.append(f"{len(commits)} commits, declared equivalent")
        elif not joined(sorted(commits), commit_links(commits, results)):
            failed["commits"] = dict(sorted(commits.items()))
            runs = ", ".join(f"{c} ({n} runs)" for c, n in failed["commits"].items())
            why.append(f"pairs records of {len(commits)} code versions: {runs}; rerun at one commit, or declare them "
                       "equivalent and why")
        else:
            said.append(f"{len(commits)} commits ({', '.join(sorted(commits))}) shown equivalent (the same code, or "
                        f"results/{EQUIVALENCE}/)")
    if len(kinds) > 1:
        bounds = bounded_kinds(results)
        if "cpus" in declared:
            said.append(f"{len(kinds)} machine kinds, declared equivalent")
        elif not joined(sorted(kinds), [(a, b) for a, b, _ in bounds]):
            failed["kinds"] = dict(sorted(kinds.items()))
            why.append(f"pairs records of {len(kinds)} CPU kinds: {', '.join(sorted(kinds))}; rerun on one, or "
                       "declare them equivalent and why")
        else:
            said.append(f"{len(kinds)} machine kinds, their effect bounded: "
                        + "; ".join(s for a, b, s in bounds if a in kinds and b in kinds))
    if len(computations) > 1:   # what auto resolved to (bf16 on one kind, fp32 on another) no check joins
        failed["settings"] = {show(k, varying(computations)): n for k, n in computations.most_common()}
        why.append(f"pairs records of settings that change what a run computes: {mixture(computations)}")
    if failed:
        return Pairing(False, why[0], failed)
    return Pairing(True, "; ".join(said) or ONE_COMPUTATION)


def _register() -> None:
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("ropelab_job_name_excludes", job_name_excludes, replace=True)


_register()
