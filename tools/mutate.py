"""`make mutate`: mutation testing of the core math with mutmut, and its record in results/mutation/.

What it does (README, "Testing"):

1. exports the committed HEAD (src, tasks, tests, conf, train.py, pyproject.toml) into a scratch folder,
   build/mutate/ (git-ignored, with a git repository of its own so that tests/conftest.py's "no test writes into
   the checkout" check looks at the scratch copy, not at this checkout: you can keep working while it runs);
2. runs ``mutmut run`` there, configured by pyproject.toml's [tool.mutmut]: the files in ``only_mutate`` are
   mutated, and each mutant is run against the tests in ``pytest_add_cli_args_test_selection`` that execute
   the mutated function (mutmut's own coverage map), under a CPU-time limit;
3. writes results/mutation/summary.json and results/mutation/README.md from mutmut's result files: tool and
   version, date, machine, scope, test command, counts, score, wall time and the commit measured, each survivor
   with its diff, and what results/mutation/triage.toml lists: the mutants that are equivalent (with the reason),
   those that stay alive because killing them is out of the fast tests' reach (why; they count against the score)
   and the functions of the mutated files that are not core math (counted apart, not in the score).

Resumable: mutmut keeps each mutant's result in build/mutate/mutants/; run it again and only unchecked mutants
run. When the mutated sources (or pyproject.toml) changed since the last run the scratch results are dropped (all
mutants again); when only the tests changed, the mutants not killed (survivors, timeouts, "no tests") are run
again against the new tests first, then the unchecked ones.

    python tools/mutate.py [--max-children N] [--only GLOB ...] [--fresh] [--record-only]

``--only 'ropelab.core.positional.*'`` runs the mutants whose names match (the record then says which files
were checked in full and which not at all); ``--record-only`` rewrites the record from the results as they are.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter, defaultdict
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "build" / "mutate"
RECORD = ROOT / "results" / "mutation"
EXPORTED = ["src", "tasks", "tests", "conf", "train.py", "pyproject.toml", ".gitignore"]
MUTATED = ["src", "tasks", "pyproject.toml"]  # a change here (or in [tool.mutmut]) invalidates every result
RERUN = {"survived", "timeout", "no tests", "suspicious", "segfault"}  # re-checked when only the tests changed
DETECTED = {"killed", "timeout", "segfault"}  # timeouts and crashes: the tests noticed the mutant


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def tree_ids(paths: list[str]) -> dict[str, str]:
    return {p: git("rev-parse", f"HEAD:{p}") for p in paths}


def load_state() -> dict:
    path = SCRATCH / "mutate-state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_state(state: dict) -> None:
    (SCRATCH / "mutate-state.json").write_text(json.dumps(state, indent=2) + "\n")


def export_head(fresh: bool) -> tuple[dict, bool]:
    """Lay HEAD's files into the scratch folder; returns (state, whether the tests changed since the results)."""
    state = {} if fresh else load_state()
    sources, tests = tree_ids(MUTATED), tree_ids(["tests"])
    if fresh or state.get("sources") != sources:
        shutil.rmtree(SCRATCH, ignore_errors=True)
        state = {"sources": sources, "wall_s": 0.0, "passes": []}
    SCRATCH.mkdir(parents=True, exist_ok=True)
    for name in EXPORTED:
        target = SCRATCH / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    archive = subprocess.run(["git", "archive", "HEAD", *EXPORTED], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(SCRATCH)], input=archive, check=True)
    if not (SCRATCH / ".git").exists():
        git("init", "-q", cwd=SCRATCH)
    with open(SCRATCH / ".gitignore", "a") as f:
        f.write("\nmutants/\nmutate-state.json\n")
    checked_with = state.get("rechecked_with", state.get("tests"))  # the tests the results were last checked with
    state.update(tests=tests, commit=git("rev-parse", "HEAD"))
    save_state(state)
    return state, checked_with not in (None, tests)


def mutmut(*args: str) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "WANDB_MODE": "offline",
           "PYTHONDONTWRITEBYTECODE": "1"}
    exe = Path(sys.executable).parent / "mutmut"
    print("+ mutmut", " ".join(args), flush=True)
    return subprocess.run([str(exe), *args], cwd=SCRATCH, env=env).returncode


def results() -> dict[str, dict]:
    """mutant name → {file, status, duration}, from mutmut's .meta files."""
    from mutmut.stats import status_by_exit_code

    out = {}
    mutants = SCRATCH / "mutants"
    for meta in sorted(mutants.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        source = str(meta.relative_to(mutants))[: -len(".meta")]
        for name, code in data["exit_code_by_key"].items():
            out[name] = {"file": source, "status": status_by_exit_code[code],
                         "duration_s": data.get("durations_by_key", {}).get(name)}
    return out


def diffs(names: list[str], by_name: dict[str, dict]) -> dict[str, str]:
    """The unified diff of each mutant (mutmut's ``show``), its changed lines only."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    out, cwd = {}, os.getcwd()
    os.chdir(SCRATCH)
    try:
        for name in names:
            text = get_diff_for_mutant(name, path=by_name[name]["file"])
            out[name] = "\n".join(line for line in text.splitlines()
                                  if line[:1] in "+-" and not line.startswith(("+++", "---")))
    finally:
        os.chdir(cwd)
    return out


def module_of(name: str) -> str:
    return name.partition("__mutmut_")[0].rsplit(".", 1)[0].replace(".x_", ".").replace(".xǁ", ".")


def machine() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"unknown CPU, {os.cpu_count()} cores"


def write_record(state: dict) -> dict:
    config = tomllib.loads((SCRATCH / "pyproject.toml").read_text())["tool"]["mutmut"]
    triage = tomllib.loads((RECORD / "triage.toml").read_text())
    equivalent = {e["name"]: e["why"] for e in triage.get("equivalent", [])}
    hard = {e["name"]: e["why"] for e in triage.get("hard", [])}
    by_name = results()
    unknown = sorted((set(equivalent) | set(hard)) - set(by_name))
    if unknown:
        sys.exit(f"results/mutation/triage.toml names mutants that do not exist: {', '.join(unknown)}")
    out_of_scope = []
    for rule in triage.get("out_of_scope", []):
        names = [n for n in by_name if fnmatch.fnmatch(n, rule["glob"])
                 and not (rule.get("except") and fnmatch.fnmatch(n, rule["except"]))]
        out_of_scope.append({**rule, "mutants": len(names)})
        for n in names:
            del by_name[n]
    line_rules = triage.get("out_of_scope_lines", [])
    if line_rules:  # mutants that change a line matching a pattern (the diff's removed lines)
        every = diffs(sorted(by_name), by_name)
        for rule in line_rules:
            pattern = re.compile(rule["pattern"])
            names = [n for n in sorted(by_name) if any(pattern.search(line[1:]) for line in every[n].splitlines()
                                                       if line.startswith("-"))]
            out_of_scope.append({"glob": f"lines matching {rule['pattern']}", "why": rule["why"],
                                 "mutants": len(names)})
            for n in names:
                del by_name[n]
    for name, r in by_name.items():
        if name in equivalent:
            r["equivalent"] = equivalent[name]
    counts = Counter(r["status"] for r in by_name.values())
    eq_survived = sum(1 for r in by_name.values() if "equivalent" in r and r["status"] not in DETECTED)
    checked = [r for r in by_name.values() if r["status"] not in ("not checked", "skipped")]
    candidates = [r for r in checked if not ("equivalent" in r and r["status"] not in DETECTED)]
    detected = sum(1 for r in candidates if r["status"] in DETECTED)
    score = detected / len(candidates) if candidates else None

    per_file: dict[str, Counter] = defaultdict(Counter)
    for r in by_name.values():
        per_file[r["file"]][r["status"]] += 1
        per_file[r["file"]]["mutants"] += 1
        per_file[r["file"]]["equivalent"] += int("equivalent" in r and r["status"] not in DETECTED)
    files = {}
    for f, c in sorted(per_file.items()):
        cand = c["mutants"] - c["not checked"] - c["skipped"] - c["equivalent"]
        det = sum(c[s] for s in DETECTED)
        files[f] = {"mutants": c["mutants"], "checked": c["mutants"] - c["not checked"] - c["skipped"],
                    "killed": c["killed"], "timeout": c["timeout"], "survived": c["survived"] - c["equivalent"],
                    "no_tests": c["no tests"], "equivalent": c["equivalent"],
                    "score": round(det / cand, 4) if cand else None}
    fully = [f for f, v in files.items() if v["checked"] == v["mutants"]]
    partly = [f for f, v in files.items() if 0 < v["checked"] < v["mutants"]]
    unchecked = [f for f, v in files.items() if v["checked"] == 0]

    not_killed = sorted(n for n, r in by_name.items() if r["status"] in RERUN - DETECTED and "equivalent" not in r)
    shown = diffs(not_killed + sorted(equivalent), by_name)
    selection = config["pytest_add_cli_args_test_selection"]
    summary = {
        "tool": f"mutmut {version('mutmut')}",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
        "commit": state["commit"],
        "machine": machine(),
        "command": "make mutate (python tools/mutate.py" + (f" {' '.join(state['args'])}" if state.get("args") else "")
                   + ")",
        "scope": {"mutated": config["only_mutate"], "excluded": config.get("do_not_mutate", []),
                  "files_checked_in_full": fully, "files_checked_in_part": partly, "files_not_checked": unchecked},
        "test_command": "pytest " + " ".join(config.get("pytest_add_cli_args", [])) + " -q -m 'not slow' <the tests "
                        "of the selection that execute the mutated function>; selection: " + " ".join(selection),
        "timeout": f"CPU time (estimated test time + {config.get('timeout_constant', 1.0)} s) × "
                   f"{config.get('timeout_multiplier', 15.0)} × 2 per mutant",
        "counts": {"mutants": len(by_name), "checked": len(checked), "killed": counts["killed"],
                   "timeout": counts["timeout"], "segfault": counts["segfault"],
                   "survived": counts["survived"] - eq_survived, "no_tests": counts["no tests"],
                   "suspicious": counts["suspicious"], "equivalent": eq_survived,
                   "not_checked": counts["not checked"] + counts["skipped"]},
        "score": round(score, 4) if score is not None else None,
        "score_definition": "(killed + timeout + segfault) / (checked − equivalent); 'no tests' and survivors "
                            "count against it",
        "wall_s": round(state.get("wall_s", 0.0), 1),
        "passes": state.get("passes", []),
        "per_file": files,
        "remaining": {n: {"status": by_name[n]["status"], "diff": shown[n], **({"hard": hard[n]} if n in hard else {})}
                      for n in not_killed},
        "equivalent": {n: {"why": equivalent[n], "status": by_name[n]["status"], "diff": shown[n]}
                       for n in sorted(equivalent)},
        "out_of_scope": out_of_scope,
    }
    RECORD.mkdir(parents=True, exist_ok=True)
    (RECORD / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    (RECORD / "README.md").write_text(markdown(summary))
    return summary


def markdown(s: dict) -> str:
    from ropelab.analysis.report.tables import pipe_table

    c = s["counts"]
    pct = f"{100 * s['score']:.1f} %" if s["score"] is not None else "–"
    lines = [
        "# Mutation testing of the core math",
        "",
        f"Written by `{s['command']}` — do not edit by hand; the equivalent mutants are listed in "
        "[triage.toml](triage.toml), which the command reads with the functions that are not core math.",
        "",
        f"- tool: {s['tool']}; date: {s['date']}; commit measured: `{s['commit']}`",
        f"- machine: {s['machine']}; wall time of the mutation runs: {s['wall_s'] / 60:.1f} min "
        f"({len(s['passes'])} pass{'es' if len(s['passes']) != 1 else ''})",
        f"- test command: `{s['test_command']}`",
        f"- timeout: {s['timeout']}",
        f"- mutated: {', '.join(f'`{p}`' for p in s['scope']['mutated'])} (not: "
        f"{', '.join(f'`{p}`' for p in s['scope']['excluded'])})",
        f"- not core math, counted apart: " + "; ".join(f"`{o['glob']}`" + (f" except `{o['except']}`" if o.get("except")
                                                   else "") + f" ({o['mutants']} mutants): {o['why']}"
                                                   for o in s["out_of_scope"]),
        f"- files checked in full: {len(s['scope']['files_checked_in_full'])}; in part: "
        f"{', '.join(s['scope']['files_checked_in_part']) or 'none'}; not checked: "
        f"{', '.join(s['scope']['files_not_checked']) or 'none'}",
        "",
        f"**Score: {pct}** of the non-equivalent checked mutants killed ({s['score_definition']}).",
        "",
        *pipe_table(["mutants", "checked", "killed", "timeout", "survived", "no tests", "equivalent", "not checked"],
                    [[c["mutants"], c["checked"], c["killed"], c["timeout"] + c["segfault"], c["survived"],
                      c["no_tests"], c["equivalent"], c["not_checked"]]], "r" * 8),
        "",
        "## Per file",
        "",
        *pipe_table(["file", "mutants", "checked", "killed", "timeout", "survived", "no tests", "equivalent", "score"],
                    [[f, v["mutants"], v["checked"], v["killed"], v["timeout"], v["survived"], v["no_tests"],
                      v["equivalent"], f"{100 * v['score']:.1f} %" if v["score"] is not None else "–"]
                     for f, v in s["per_file"].items()], "l" + "r" * 8),
    ]
    lines += ["", f"## Not killed ({len(s['remaining'])})", ""]
    if not s["remaining"]:
        lines.append("None.")
    for name, r in s["remaining"].items():
        why = f": hard — {r['hard']}" if "hard" in r else ""
        lines += [f"- `{name}` ({r['status']}){why}", "", "  ```diff", *("  " + l for l in r["diff"].splitlines()),
                  "  ```"]
    lines += ["", f"## Equivalent ({len(s['equivalent'])})", ""]
    for name, r in s["equivalent"].items():
        lines += [f"- `{name}` ({r['status']}): {r['why']}", "", "  ```diff",
                  *("  " + l for l in r["diff"].splitlines()), "  ```"]
    if s["passes"]:
        passes = [[p["started"], f"`{p['commit'][:10]}`", p["args"] or "–", p["wall_s"]] for p in s["passes"]]
        lines += ["", "## Passes", "", *pipe_table(["started (UTC)", "commit", "arguments", "wall (s)"], passes, "lllr")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-children", type=int, default=1, help="mutants run at once (default 1: shared cores)")
    ap.add_argument("--only", nargs="+", default=[], metavar="GLOB",
                    help="run only the mutants whose names match, e.g. 'ropelab.core.positional.*'")
    ap.add_argument("--fresh", action="store_true", help="drop the scratch results and start over")
    ap.add_argument("--record-only", action="store_true", help="rewrite the record from the results as they are")
    a = ap.parse_args(argv)
    if a.record_only:
        summary = write_record(load_state())
    else:
        if git("status", "--porcelain", "--", *EXPORTED):
            print("note: uncommitted changes are not measured; mutate measures HEAD", file=sys.stderr)
        state, tests_changed = export_head(a.fresh)
        started, t0 = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"), time.monotonic()
        args = ["run", "--max-children", str(a.max_children)]
        rc = 0
        if tests_changed:  # first the mutants that the new tests may kill, then the unchecked ones
            again = sorted(n for n, r in results().items() if r["status"] in RERUN)
            if again:
                print(f"the tests changed since these results: running the {len(again)} not killed again")
                rc = mutmut(*args, *again)
        if rc == 0:
            state["rechecked_with"] = state["tests"]
            save_state(state)
            rc = mutmut(*args, *a.only)
        wall = time.monotonic() - t0
        state["wall_s"] = state.get("wall_s", 0.0) + wall
        state.setdefault("passes", []).append({"started": started, "commit": state["commit"],
                                               "args": " ".join(a.only), "wall_s": round(wall, 1)})
        state["args"] = [f"--only {' '.join(a.only)}"] if a.only else []
        save_state(state)
        if rc != 0:
            print(f"mutmut exited {rc}; the record is written from the results so far", file=sys.stderr)
        summary = write_record(state)
    c = summary["counts"]
    print(f"{c['mutants']} mutants, {c['checked']} checked: {c['killed']} killed, {c['timeout']} timeout, "
          f"{c['survived']} survived, {c['no_tests']} no tests, {c['equivalent']} equivalent; score "
          f"{summary['score']}; record: {RECORD.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
