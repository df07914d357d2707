"""The campaign (ropelab.experiments.campaign): planning from the declarations, ordering, records committed whole on
their own branch, resuming, and the three bad inputs that train nothing. Training is a stand-in script writing a
record, in a temporary git repository."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ropelab.experiments import campaign as c

FAKE = """
import json, pathlib, subprocess, sys
table, name, status = sys.argv[1:4]
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
out = pathlib.Path("results") / table / name
out.mkdir(parents=True, exist_ok=True)
(out / "config.yaml").write_text("seed: 0\\n")
(out / "metrics.csv").write_text("step,val/acc\\n3,0.5\\n")
(out / "summary.json").write_text(json.dumps({"status": status, "wall_seconds": 1.0, "steps": 3,
                                              "machine": {"commit": commit}}))
sys.exit(0 if status == "completed" else 1)
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.org")
    git(root, "config", "user.name", "t")
    (root / "README.md").write_text("x\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "first")
    return root


def fake_command(fail: set[str] = frozenset()):
    def command(job, tree, passthrough):
        return [sys.executable, "-c", FAKE, job.table, job.name, "failed" if job.name in fail else "completed"]
    return command


def jobs_of(groups: dict[str, list[int]], cost: dict[str, float] | None = None) -> list[c.Job]:
    out = []
    for group, seeds in groups.items():
        for seed in seeds:
            job = c.Job("fake", f"g={group},seed={seed}", [], {"seed": seed, "trainer.max_steps": 3}, "fake",
                        groups=[group])
            job.cost = (cost or {}).get(group, 1.0)
            out.append(job)
    return out


def test_records_committed_whole_on_their_branch_user_files_untouched_and_a_rerun_resumes(repo):
    head = git(repo, "rev-parse", "HEAD")
    tree = c.worktree(repo, Path("runs/campaign/worktree"), head)
    jobs = jobs_of({"a": [0, 1], "b": [0]})
    plan = c.order(jobs, set())
    lines: list[str] = []
    status = c.run(jobs, plan, repo, tree, c.BRANCH, head, 2, [], log=lines.append,
                   command=fake_command(fail={"g=b,seed=0"}))
    assert status == 1
    files = git(repo, "ls-tree", "-r", "--name-only", c.BRANCH).splitlines()
    for seed in (0, 1):
        assert {f"results/fake/g=a,seed={seed}/{f}" for f in ("config.yaml", "metrics.csv", "summary.json")} <= set(files)
    assert not any("g=b" in f for f in files)          # a failed job leaves nothing on the branch
    assert git(repo, "rev-list", "--count", c.BRANCH) == "3"   # the first commit + one per record
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert any("done 2/3" in l and "CPU-h" in l and "ETA" in l for l in lines)
    assert any("NOT recorded fake/g=b,seed=0" in l for l in lines)
    done = set(c.recorded_on_branch(repo, c.BRANCH))
    assert done == {"fake/g=a,seed=0", "fake/g=a,seed=1"}
    left = c.order(jobs, done)
    assert [(g, [j.name for j in js]) for g, js, _ in left] == [("b", ["g=b,seed=0"])]


def test_a_record_written_but_not_committed_before_a_stop_is_committed_at_the_next_start(repo):
    head = git(repo, "rev-parse", "HEAD")
    tree = c.worktree(repo, Path("wt"), head)
    jobs = jobs_of({"a": [0]})
    subprocess.run(fake_command()(jobs[0], tree, [])[:], cwd=tree, check=True)
    done: set[str] = set()
    c.salvage(jobs, done, repo, tree, c.BRANCH, head, log=lambda _: None)
    assert done == {"fake/g=a,seed=0"}
    assert "results/fake/g=a,seed=0/summary.json" in git(repo, "ls-tree", "-r", "--name-only", c.BRANCH)


def test_a_record_an_earlier_pin_left_in_the_worktree_is_not_salvaged_at_a_new_pin(repo):
    """A worktree reused at a new pin still holds the old pin's untracked records: their setting may have been
    redeclared since (the card's mean_pooling budget), so only the pinned commit's own outputs are committed."""
    old = git(repo, "rev-parse", "HEAD")
    tree = c.worktree(repo, Path("wt"), old)
    jobs = jobs_of({"a": [0]})
    subprocess.run(fake_command()(jobs[0], tree, []), cwd=tree, check=True)
    (repo / "README.md").write_text("redeclared\n")
    git(repo, "commit", "-q", "-am", "the declaration changes")
    new = git(repo, "rev-parse", "HEAD")
    done: set[str] = set()
    c.salvage(jobs, done, repo, tree, c.BRANCH, new, log=lambda _: None)
    assert done == set()
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", c.BRANCH], cwd=repo).returncode != 0


def test_a_record_main_removed_after_merging_the_branch_is_left_to_do_while_new_ones_count(repo):
    head = git(repo, "rev-parse", "HEAD")
    tree = c.worktree(repo, Path("runs/campaign/worktree"), head)
    jobs = jobs_of({"a": [0, 1]})
    c.run(jobs[:1], c.order(jobs[:1], set()), repo, tree, c.BRANCH, head, 1, [], log=lambda _: None,
          command=fake_command())
    git(repo, "merge", "-q", "--no-edit", c.BRANCH)
    git(repo, "rm", "-q", "-r", "results/fake")
    git(repo, "commit", "-q", "-m", "main drops a record whose declaration changed")
    c.run(jobs[1:], c.order(jobs[1:], set()), repo, tree, c.BRANCH, head, 1, [], log=lambda _: None,
          command=fake_command())
    assert set(c.recorded_on_branch(repo, c.BRANCH)) == {"fake/g=a,seed=0", "fake/g=a,seed=1"}
    assert set(c.recorded_on_branch(repo, c.BRANCH)) - c.merged_into(repo, c.BRANCH, "main") == {"fake/g=a,seed=1"}


def test_a_record_main_removed_and_the_campaign_records_again_merges_without_a_conflict(repo):
    head = git(repo, "rev-parse", "HEAD")
    tree = c.worktree(repo, Path("runs/campaign/worktree"), head)
    jobs = jobs_of({"a": [0]})
    c.run(jobs, c.order(jobs, set()), repo, tree, c.BRANCH, head, 1, [], log=lambda _: None, command=fake_command())
    git(repo, "merge", "-q", "--no-edit", c.BRANCH)
    git(repo, "rm", "-q", "-r", "results/fake")
    git(repo, "commit", "-q", "-m", "main drops a record whose declaration changed")
    c.catch_up(repo, c.BRANCH, "main")
    assert git(repo, "rev-parse", c.BRANCH) == git(repo, "rev-parse", "main")
    c.run(jobs, c.order(jobs, set()), repo, tree, c.BRANCH, head, 1, [], log=lambda _: None, command=fake_command())
    git(repo, "merge", "-q", "--no-edit", c.BRANCH)   # check=True: a conflict fails here
    assert "results/fake/g=a,seed=0/summary.json" in git(repo, "ls-files")


def test_a_branch_holding_unmerged_records_is_not_moved(repo):
    head = git(repo, "rev-parse", "HEAD")
    tree = c.worktree(repo, Path("runs/campaign/worktree"), head)
    jobs = jobs_of({"a": [0]})
    c.run(jobs, c.order(jobs, set()), repo, tree, c.BRANCH, head, 1, [], log=lambda _: None, command=fake_command())
    before = git(repo, "rev-parse", c.BRANCH)
    c.catch_up(repo, c.BRANCH, "main")
    assert git(repo, "rev-parse", c.BRANCH) == before


def test_a_record_the_pinned_commit_holds_is_never_salvaged_even_where_main_dropped_it(repo):
    """A worktree at an older pin holds that commit's records (here a link into another table, since unlinked on
    main): they are not this campaign's outputs and stay off the branch."""
    (repo / "results" / "other" / "g=a,seed=0").mkdir(parents=True)
    subprocess.run([sys.executable, "-c", FAKE, "other", "g=a,seed=0", "completed"], cwd=repo, check=True)
    (repo / "results" / "fake").mkdir()
    (repo / "results" / "fake" / "g=a,seed=0").symlink_to("../other/g=a,seed=0")
    (repo / "results" / "fake" / "g=a,seed=1").mkdir()
    subprocess.run([sys.executable, "-c", FAKE, "fake", "g=a,seed=1", "completed"], cwd=repo, check=True)
    git(repo, "add", "results")
    git(repo, "commit", "-q", "-m", "a linked record and a copied one")
    pinned = git(repo, "rev-parse", "HEAD")
    git(repo, "rm", "-q", "-r", "results/fake")
    git(repo, "commit", "-q", "-m", "main drops them")
    tree = c.worktree(repo, Path("wt"), pinned)
    done: set[str] = set()
    c.salvage(jobs_of({"a": [0, 1]}), done, repo, tree, c.BRANCH, pinned, log=lambda _: None)
    assert done == set()
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", c.BRANCH], cwd=repo).returncode != 0


STOPPED = """
import shlex, sys
from pathlib import Path
from ropelab.experiments import campaign as c
job = c.Job("fake", "g=a,seed=0", [], {"seed": 0}, "fake", groups=["a"])
# a shell over the trainer, as a card job that extrapolates runs: the trainer says when it starts and when it is ended
trainer = ("import pathlib, signal, sys, time; end = pathlib.Path(sys.argv[1]); "
           "signal.signal(signal.SIGTERM, lambda *_: (end.write_text('ended'), sys.exit(0))); "
           "pathlib.Path(sys.argv[2]).write_text(''); time.sleep(120)")
marks = [str(Path(sys.argv[1]) / name) for name in ("ended", "started")]
sleeper = lambda job, tree, passthrough: ["bash", "-c", shlex.join([sys.executable, "-c", trainer, *marks]) + "; true"]
sys.exit(c.run([job], [("a", [job], 1.0)], Path(sys.argv[1]), Path(sys.argv[1]), c.BRANCH, "0" * 40, 1, [],
               command=sleeper))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_or_sigint_stops_a_campaign_started_in_the_background_as_ctrl_c_does(tmp_path, sig):
    ignore_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)  # noqa: E731  what `&` in a script does
    proc = subprocess.Popen([sys.executable, "-u", "-c", STOPPED, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            preexec_fn=ignore_sigint)
    assert proc.stdout.readline().startswith("start fake/g=a,seed=0")   # the job is in flight
    while not (tmp_path / "started").exists():   # its trainer is up, its handler set
        assert proc.poll() is None
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 130
    assert proc.stdout.read() == "stopped: 1 jobs in flight lost; run again to resume\n"
    for _ in range(600):   # the trainer under the job's shell was ended too, not left to run on
        if (tmp_path / "ended").exists():
            break
        subprocess.run(["sleep", "0.1"])
    assert (tmp_path / "ended").read_text() == "ended"


def test_commit_waits_while_a_lock_is_held(repo, tmp_path):
    head = git(repo, "rev-parse", "HEAD")
    record = tmp_path / "rec"
    record.mkdir()
    (record / "summary.json").write_text(json.dumps({"status": "completed"}))
    lock = repo / ".git" / "refs" / "heads" / f"{c.BRANCH}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    with pytest.raises(RuntimeError, match="lock"):
        c.commit_record(repo, c.BRANCH, head, record, "results/x/y", "m", retries=2)
    lock.unlink()
    c.commit_record(repo, c.BRANCH, head, record, "results/x/y", "m", retries=2)
    assert git(repo, "show", f"{c.BRANCH}:results/x/y/summary.json")


def test_order_runs_whole_groups_cheapest_first_and_a_shared_job_once():
    jobs = jobs_of({"dear": [0, 1], "cheap": [0, 1, 2]}, cost={"dear": 100.0, "cheap": 1.0})
    shared = jobs[0]
    shared.groups.append("cheap")
    plan = c.order(jobs, set())
    assert [g for g, *_ in plan] == ["cheap", "dear"]
    assert sorted(j.name for j in plan[0][1]) == ["g=cheap,seed=0", "g=cheap,seed=1", "g=cheap,seed=2", "g=dear,seed=0"]
    assert [j.name for j in plan[1][1]] == ["g=dear,seed=1"]
    assert "total" in c.plan_text(plan).splitlines()[-1]


def test_a_card_tasks_top_up_runs_after_every_first_round_however_cheap():
    cheap, dear = "card cheap", "card dear"
    jobs = jobs_of({cheap: [0], cheap + c.TOP_UP: [1], dear: [0]}, cost={dear: 100.0})
    assert [g for g, *_ in c.order(jobs, set())] == [cheap, dear, cheap + c.TOP_UP]


def test_estimate_is_robust_to_a_slow_outlier():
    jobs = jobs_of({"a": [9]})
    recorded = {f"fake/g=a,seed={s}": {"wall_seconds": w, "steps": 3, "status": "completed"}
                for s, w in enumerate([3.0, 3.3, 2.7, 300.0])}
    c.estimate(jobs, recorded)
    assert jobs[0].cost == pytest.approx(3 * 1.05, rel=0.01)


def test_estimate_counts_a_resumed_run_by_the_steps_it_ran_and_leaves_gpu_records_out():
    jobs = jobs_of({"a": [9]})
    recorded = {"fake/g=a,seed=0": {"wall_seconds": 10.0, "steps": 40, "resumed_from_step": 30},
                "fake/g=a,seed=1": {"wall_seconds": 10.0, "steps": 10},
                "fake/g=a,seed=2": {"wall_seconds": 0.1, "steps": 10, "machine": {"gpu": "NVIDIA H200"}}}
    c.estimate(jobs, recorded)
    assert jobs[0].cost == pytest.approx(jobs[0].steps * 1.0)


def test_bad_inputs_each_one_line_and_nothing_trains(repo, monkeypatch, capsys):
    monkeypatch.chdir(repo)
    assert c.main(["--tables", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nosuch" in err and "momentum_options" in err
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "side.txt").write_text("y\n")
    git(repo, "add", "side.txt")
    git(repo, "commit", "-q", "-m", "side")
    assert c.main(["--commit", "side", "--tables", "rope_base"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not an ancestor of main" in err
    git(repo, "checkout", "-q", "main")
    tree = c.worktree(repo, Path("runs/campaign/worktree"), git(repo, "rev-parse", "HEAD"))
    (tree / "README.md").write_text("changed\n")
    assert c.main(["--tables", "rope_base"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "uncommitted changes" in err
    assert not git(repo, "branch", "--list", c.BRANCH)
    assert not (tree / "results").exists()


def test_a_preset_expands_to_hydras_job_names_once_per_variant():
    found = c.presets()
    options = c.preset_jobs("momentum_options_assoc_recall", found["momentum_options_assoc_recall"])
    names = {j.name for j in options}
    assert len(options) == 30 == len(names)
    assert "pos.momentum.adaptive.enabled=True,pos.momentum.gamma=0,pos=rope,seed=300,task=assoc_recall" in names
    assert "pos.momentum.gamma=2.0,pos.momentum.warmup_steps=100,pos=rope,seed=302,task=assoc_recall" in names
    assert {j.table for j in options} == {"momentum_options"}
    c.claim_groups(options)
    warmup = [j for j in options if "claim Momentum:options_warmup" in j.groups]
    assert len(warmup) == 6   # γ 2 with and without the warm-up, 3 seeds (this task's part)


def test_every_declared_job_folder_holds_one_computation_and_a_tables_group_names_what_tables_takes():
    jobs = c.declared()   # the project's own presets, card and claims
    assert len({j.key for j in jobs}) == len(jobs)
    tables = {g.removeprefix("table ") for j in jobs for g in j.groups if g.startswith("table ")}
    assert "calibration/variable_tracking_b256" in tables   # its preset is calibrate_variable_tracking_b256
    c.check_tables(sorted(tables))   # the plan's group is what --tables accepts


def test_one_folder_declared_at_two_settings_is_refused_and_at_one_is_one_job():
    def job(source: str, steps: int, name: str = "name=short") -> c.Job:
        return c.Job("shared", "seed=0", ["seed=0"], {"seed": 0, "trainer.max_steps": steps, "name": name}, source)

    assert [j.source for j in c.one_per_folder([job("short", 100), job("variant", 100, "name=variant")])] == ["short"]
    with pytest.raises(c.ConfigError, match=r"results/shared/seed=0 is declared by short and by long at different "
                                            r"settings \(trainer\.max_steps\)"):
        c.one_per_folder([job("short", 100), job("long", 200)])


STAND_IN = """
import pathlib, sys
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
out = pathlib.Path(args["hydra.run.dir"])
out.mkdir(parents=True, exist_ok=True)
(out / "metrics.csv").write_text(f"step,precision,value\\n1,{args.get('trainer.precision', 'auto')},VALUE\\n")
"""


def test_equivalence_retrains_at_the_records_precision_and_tells_a_changed_computation(repo, monkeypatch):
    def commit_code(value: str) -> str:
        (repo / "train.py").write_text(STAND_IN.replace("VALUE", value))
        git(repo, "add", "train.py")
        git(repo, "commit", "-q", "-m", f"code {value}")
        return git(repo, "rev-parse", "HEAD")

    first = commit_code("0.5")
    (repo / "README.md").write_text("y\n")
    git(repo, "commit", "-qam", "docs only")
    same = git(repo, "rev-parse", "HEAD")
    changed = commit_code("0.6")
    record = repo / "results" / "fake" / "g=a,seed=0"
    record.mkdir(parents=True)
    (record / "summary.json").write_text(json.dumps({"status": "completed", "precision": "bf16-mixed"}))
    monkeypatch.setattr(c, "declared", lambda tables: jobs_of({"a": [0]}))
    lines: list[str] = []
    assert c.equivalence(repo, [first, same], "fake", 1, c.BRANCH, "main", log=lines.append) == 0
    check = json.loads((repo / "results" / "equivalence" / f"{first[:7]}_{same[:7]}" / "summary.json").read_text())
    assert check["match"] is True and check["jobs"][0]["precision"] == "bf16-mixed"
    retrained = repo / "runs" / "campaign" / f"equivalence-{same[:12]}" / "runs" / "campaign" / "equivalence" / "job0"
    assert ",bf16-mixed," in (retrained / "metrics.csv").read_text()   # the records' precision, not this machine's
    assert f"results/equivalence/{first[:7]}_{same[:7]}/summary.json" in git(repo, "ls-tree", "-r", "--name-only",
                                                                           c.BRANCH)
    assert c.equivalence(repo, [first, changed], "fake", 1, c.BRANCH, "main", log=lines.append) == 1
    assert "NOT the same" in lines[-1]


def _summary(flag: str, commit: str, precision: str = "32-true") -> dict:
    return {"status": "completed", "precision": precision, "accelerator": "cpu",
            "machine": {"cpu": {"model": "AMD EPYC", "flags": [flag]}, "torch": "2.13.0+cpu", "commit": commit}}


def test_a_group_whose_records_this_machine_would_not_pair_with_is_held_and_not_trained(tmp_path):
    here = _summary("avx2", "")["machine"]
    jobs = jobs_of({"claim other-kind": [0, 1], "claim other-kind-bf16": [0, 1], "claim other-commit": [0, 1],
                    "claim joined": [0, 1], "claim bf16": [0, 1], "claim new": [0], "claim gpu": [0]})
    for job in jobs:
        job.values["trainer.precision"] = "32-true"   # as configured on every machine
    next(j for j in jobs if "gpu" in j.name).values["trainer.accelerator"] = "gpu"
    recorded = {"fake/g=claim other-kind,seed=0": _summary("avx512_bf16", "aaaaaaa"),
                "fake/g=claim other-kind-bf16,seed=0": _summary("avx512_bf16", "aaaaaaa", "bf16-mixed"),
                "fake/g=claim other-commit,seed=0": _summary("avx2", "bbbbbbb"),
                "fake/g=claim joined,seed=0": _summary("avx2", "ccccccc"),
                "fake/g=claim bf16,seed=0": _summary("avx2", "aaaaaaa", "bf16-mixed")}
    results = tmp_path / "results"
    check = results / "equivalence" / "ccccccc_aaaaaaa"
    check.mkdir(parents=True)
    (check / "summary.json").write_text(json.dumps({"status": "completed", "commits": ["ccccccc", "aaaaaaa"],
                                                    "match": True}))
    done = set(recorded)
    kept = c.held(jobs, done, recorded, "aaaaaaa" + "0" * 33, results, here=here)
    assert sorted(kept) == ["claim bf16", "claim gpu", "claim other-commit", "claim other-kind",
                            "claim other-kind-bf16"]
    assert kept["claim other-kind-bf16"] == (  # a kind check would not join its bf16 records to fp32 jobs
        "its 1 records ran on AMD EPYC [avx512_bf16] torch 2.13.0+cpu at trainer.precision=bf16-mixed; this machine is "
        "AMD EPYC [avx2] torch 2.13.0+cpu and would run its jobs at trainer.precision=32-true: finish it there")
    assert kept["claim gpu"].startswith("its jobs cannot run here: trainer.accelerator=gpu but torch sees no CUDA")
    assert "ran on AMD EPYC [avx512_bf16]" in kept["claim other-kind"] and "--kind-check" in kept["claim other-kind"]
    assert "--equivalence bbbbbbb aaaaaaa" in kept["claim other-commit"]
    assert kept["claim bf16"] == ("its records ran at trainer.precision=bf16-mixed; here its jobs would run at "
                                  "trainer.precision=32-true: they would be trials")
    plan = c.order(jobs, done, kept)
    assert sorted(j.name for _, left, _ in plan for j in left) == ["g=claim joined,seed=1", "g=claim new,seed=0"]
    assert "held here" in c.plan_text(plan, kept) and "claim other-kind: its 1 records" in c.plan_text(plan, kept)


def test_a_group_whose_records_ran_on_a_gpu_is_held_on_a_cpu_whatever_its_precision(tmp_path):
    here = _summary("avx512_bf16", "")["machine"]   # auto is bf16-mixed here, as it was on the GPU
    jobs = jobs_of({"claim gpu records": [0, 1]})
    gpu = {**_summary("amx_bf16", "aaaaaaa", "bf16-mixed"), "accelerator": "cuda"}
    gpu["machine"]["gpu"] = "NVIDIA H200"
    kept = c.held(jobs, {"fake/g=claim gpu records,seed=0"}, {"fake/g=claim gpu records,seed=0": gpu},
                  "aaaaaaa" + "0" * 33, tmp_path / "results", here=here)
    assert "at trainer.accelerator=cuda" in kept["claim gpu records"]
    assert kept["claim gpu records"].endswith("would run its jobs at trainer.accelerator=cpu: finish it there")


def test_a_card_tasks_top_up_is_held_by_the_records_of_its_first_round(tmp_path):
    here = _summary("avx512_bf16", "")["machine"]
    jobs = jobs_of({"card t": [0, 1], "card t" + c.TOP_UP: [2]})
    recorded = {"fake/g=card t,seed=0": _summary("amx_bf16", "aaaaaaa")}
    kept = c.held(jobs, set(recorded), recorded, "aaaaaaa" + "0" * 33, tmp_path / "results", here=here)
    assert sorted(kept) == ["card t", "card t" + c.TOP_UP]


def test_a_group_of_a_kind_a_kind_check_joins_runs_here_at_the_precision_auto_gave_its_records(tmp_path, monkeypatch):
    here = _summary("avx512_bf16", "")["machine"]   # auto would be bf16 here; the records ran at fp32 on avx2
    jobs = jobs_of({"claim fp32 group": [0, 1], "claim unjoined": [0, 1]})
    recorded = {"fake/g=claim fp32 group,seed=0": _summary("avx2", "aaaaaaa"),
                "fake/g=claim unjoined,seed=0": _summary("amx_bf16", "aaaaaaa")}
    check = tmp_path / "results" / "kind_check" / "avx2__avx512"
    check.mkdir(parents=True)
    kinds = ["AMD EPYC [avx2] torch 2.13.0+cpu", "AMD EPYC [avx512_bf16] torch 2.13.0+cpu"]
    (check / "summary.json").write_text(json.dumps({"status": "completed", "kinds": kinds, "bounded": True}))
    kept = c.held(jobs, set(recorded), recorded, "aaaaaaa" + "0" * 33, tmp_path / "results", here=here)
    assert sorted(kept) == ["claim unjoined"]
    left = next(j for j in jobs if j.name == "g=claim fp32 group,seed=1")
    assert left.env == {"ROPELAB_AUTO_PRECISION": "32-true"}
    from ropelab.core import machine
    monkeypatch.setenv("ROPELAB_AUTO_PRECISION", "32-true")
    monkeypatch.setattr(machine, "native_bf16_cpu", lambda: True)
    assert machine.choose("cpu", "auto")[1] == "32-true" and machine.choose("cpu", "bf16-mixed")[1] == "bf16-mixed"


def test_a_group_whose_preset_here_differs_from_the_pinned_commits_is_held(repo):
    preset = repo / "conf" / "experiment" / "grid.yaml"
    preset.parent.mkdir(parents=True)
    preset.write_text("steps: 500,1000\n")
    git(repo, "add", "conf")
    git(repo, "commit", "-q", "-m", "grid")
    pinned = git(repo, "rev-parse", "HEAD")
    jobs = [c.Job("t", "seed=0", [], {"seed": 0}, "grid", groups=["table grid"]),
            c.Job("u", "seed=0", [], {"seed": 0}, "other", groups=["table other"])]
    assert c.differs_at_pin(jobs, repo, pinned) == {}
    preset.write_text("steps: 250,500\n")   # edited here, not at the pinned commit: its jobs there are others
    assert c.differs_at_pin(jobs, repo, pinned) == {
        "table grid": f"conf/experiment/grid.yaml here differs from the pinned commit {pinned[:7]}'s, where its jobs "
                      "train: commit it, and pin that commit"}


def test_a_group_whose_table_at_the_pinned_commit_holds_records_moved_since_is_held(repo):
    """A record main moved away (to a folder of its own) still stands in the pinned worktree's table: a job there
    would be checked against it and refused as a trial, so the plan holds its group instead of training it."""
    old = repo / "results" / "t" / "gpu_job"
    old.mkdir(parents=True)
    (old / "summary.json").write_text("{}")
    git(repo, "add", "results")
    git(repo, "commit", "-q", "-m", "a gpu record")
    pinned = git(repo, "rev-parse", "HEAD")
    jobs = [c.Job("t", "seed=0", [], {"seed": 0}, "grid", groups=["table t"]),
            c.Job("u", "seed=0", [], {"seed": 0}, "other", groups=["table u"])]
    assert c.differs_at_pin(jobs, repo, pinned) == {}
    (repo / "results" / "t_gpu").mkdir()
    git(repo, "mv", "results/t/gpu_job", "results/t_gpu/gpu_job")
    git(repo, "commit", "-q", "-m", "moved")
    held = c.differs_at_pin(jobs, repo, pinned)
    assert list(held) == ["table t"]
    assert "holds 1 records this checkout has moved or removed (such as gpu_job)" in held["table t"]
    assert c.differs_at_pin(jobs, repo, git(repo, "rev-parse", "HEAD")) == {}


def test_a_pinned_commit_older_than_the_card_suite_holds_its_card_groups_and_plans_the_tables(repo):
    from conftest import ROOT
    from ropelab.analysis import card_suite

    pinned = git(repo, "rev-parse", "HEAD")   # no suite here yet
    suite = repo / c.SUITE_FILE
    suite.parent.mkdir(parents=True)
    suite.write_text((ROOT / c.SUITE_FILE).read_text())
    git(repo, "add", c.SUITE_FILE)   # tracked here, absent at the pinned commit
    table = [c.Job("t", "seed=0", [], {"seed": 0}, "grid", groups=["table grid"])]
    assert c.differs_at_pin(table, repo, pinned) == {}
    card = c.card_jobs(card_suite.load(suite))
    held = c.differs_at_pin(card, repo, pinned)
    assert set(held) == {g for j in card for g in j.groups} and held


def test_a_worktree_moves_to_a_commit_that_holds_its_records_merged_and_keeps_the_others(repo, tmp_path):
    first = git(repo, "rev-parse", "HEAD")
    tree = c.worktree(repo, tmp_path / "tree", first)
    for name in ("merged", "new"):
        (tree / "results" / "t" / name).mkdir(parents=True)
        (tree / "results" / "t" / name / "summary.json").write_text("{}")
    (repo / "results" / "t" / "merged").mkdir(parents=True)
    (repo / "results" / "t" / "merged" / "summary.json").write_text("{}")
    git(repo, "add", "results")
    git(repo, "commit", "-q", "-m", "records merged")
    later = git(repo, "rev-parse", "HEAD")
    assert c.worktree(repo, tmp_path / "tree", later) == tree and git(tree, "rev-parse", "HEAD") == later
    assert (tree / "results" / "t" / "new" / "summary.json").is_file()


def test_card_jobs_run_rope_at_every_seed_first_then_the_others_at_the_first_seeds_and_the_top_up_as_its_own_group():
    from ropelab.analysis import card_suite

    suite = card_suite.load()
    jobs = [j for j in c.card_jobs(suite) if j.table == "card/dyck3"]
    planned = suite.seeds_for("dyck3")
    assert len(planned) > len(suite.seeds)
    rope, others = jobs[:len(planned)], jobs[len(planned):]
    assert [(j.values["pos.name"], j.values["seed"]) for j in rope] == [("rope", s) for s in planned]
    assert "rope" not in {j.values["pos.name"] for j in others}
    seeds = [j.values["seed"] for j in others]
    first = len(suite.seeds) * len({j.values["pos.name"] for j in others})
    assert set(seeds[:first]) == set(suite.seeds) and not set(seeds[first:]) & set(suite.seeds)
    assert {g for j in jobs[:len(planned) + first] for g in j.groups} == {"card dyck3"}
    assert {g for j in others[first:] for g in j.groups} == {"card dyck3" + c.TOP_UP}


def test_a_card_suite_edit_holds_only_the_card_groups_whose_jobs_it_changes(repo):
    from conftest import ROOT
    from ropelab.analysis import card_suite

    original = (ROOT / c.SUITE_FILE).read_text()
    suite = repo / c.SUITE_FILE
    suite.parent.mkdir(parents=True)
    suite.write_text(original)
    git(repo, "add", "conf")
    git(repo, "commit", "-q", "-m", "suite")
    pinned = git(repo, "rev-parse", "HEAD")

    def held_after(text: str) -> dict[str, str]:
        suite.write_text(text)
        return c.differs_at_pin(c.card_jobs(card_suite.load(suite)), repo, pinned)

    assert held_after(original + "# a comment changes no job\n") == {}
    dyck3 = "setting: {trainer.max_steps: 400, trainer.val_every: 50}\n    source: results/calibration/dyck3"
    assert dyck3 in original
    held = held_after(original.replace(dyck3, dyck3.replace("400", "300")))
    assert sorted(held) == ["card dyck3", "card dyck3" + c.TOP_UP]
    assert "declares its jobs otherwise than at the pinned commit" in held["card dyck3"]


def test_a_card_job_whose_task_extrapolates_is_committed_with_its_extrapolation_by_the_pinned_code(repo):
    """code_lm's card records carry extrapolation.csv (the cards compare rope's loss at each factor of the window):
    the real train command trains a tiny job in a worktree of the repository, evaluates it there and commits both."""
    import shutil

    from conftest import ROOT, TINY
    from ropelab.analysis import card_suite

    for part in ("src", "tasks", "conf"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "train.py", repo / "train.py")
    setting = ", ".join(o.replace("=", ": ") for o in TINY if not o.startswith("trainer.threads"))
    (repo / c.SUITE_FILE).write_text(f"""\
seeds: [200]
tasks:
  code_lm:
    setting: {{{setting}, trainer.max_steps: 4, trainer.val_every: 2, task.window: 16, task.ood.window: 32}}
    metric: val/loss
    direction: lower
    extrapolation: [1, 2]
# ---- plan:
plan: {{}}
""")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the code and a tiny suite")
    head = git(repo, "rev-parse", "HEAD")
    tree = c.worktree(repo, Path("runs/campaign/worktree"), head)
    [job] = [j for j in c.card_jobs(card_suite.load(repo / c.SUITE_FILE)) if j.values["pos.name"] == "rope"]
    assert job.extrapolate == ["code_lm", "rope", "200"]
    trained_only = c.Job(**{**job.__dict__, "extrapolate": []})   # as if stopped before the evaluation
    subprocess.run(c.train_command(trained_only, tree, []), cwd=tree, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": f"{tree / 'src'}:{tree}"})
    assert (tree / "results" / job.table / job.name / "summary.json").is_file()
    c.salvage([job], done := set(), repo, tree, c.BRANCH, head, log=lambda _: None)
    assert not done   # a record without its extrapolation is not whole: the job runs again, and evaluates
    assert c.run([job], c.order([job], set()), repo, tree, c.BRANCH, head, 1, [], log=lambda _: None) == 0
    committed = git(repo, "ls-tree", "-r", "--name-only", c.BRANCH, "--", f"results/{job.table}/{job.name}")
    assert {Path(p).name for p in committed.splitlines()} >= {"summary.json", "metrics.csv", c.EXTRAPOLATION}
    rows = git(repo, "show", f"{c.BRANCH}:results/{job.table}/{job.name}/{c.EXTRAPOLATION}").splitlines()
    assert rows[0].startswith("task,") and len(rows) == 3   # a header, then 1× and 2×
