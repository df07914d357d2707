"""Issue 39: a record reproduces from its own config (make reproduce), what changes a job's numbers is part of its
identity, and committed records carry no machine paths."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TINY, train_here
from ropelab.core import identity, machine
from ropelab.experiments import reproduce

sys.path.insert(0, str(ROOT / "tools"))
import portable_records  # noqa: E402

STEPS = ["task=mod_arith", "trainer.max_steps=6", "trainer.val_every=3", "trainer.precision=32-true"]


@pytest.fixture
def table(tmp_path):
    """A table of one record, made by a tiny job."""
    table = tmp_path / "results" / "tiny_table"
    summary = train_here(*TINY, *STEPS, f"record={table}", run_dir=tmp_path / "runs" / "pos=rope,seed=0")
    assert summary["status"] == "completed"
    return table


def test_a_tiny_record_reproduces_bit_for_bit(table, tmp_path, capsys):
    record = table / "pos=rope,seed=0"
    before = {p.name: p.read_bytes() for p in record.iterdir()}
    assert reproduce.main([str(table), "--out", str(tmp_path / "scratch")]) == 0
    out = capsys.readouterr().out
    assert "pos=rope,seed=0: bit-identical" in out
    assert "verdict: reproduced — 1/1 jobs (1 bit-identical)" in out
    assert (tmp_path / "scratch" / "tiny_table" / "pos=rope,seed=0" / "metrics.csv").read_bytes() == \
        (record / "metrics.csv").read_bytes()
    assert {p.name: p.read_bytes() for p in record.iterdir()} == before  # the record untouched


def test_a_changed_record_is_not_bit_identical(table, tmp_path, capsys):
    metrics = table / "pos=rope,seed=0" / "metrics.csv"
    lines = metrics.read_text().splitlines()
    lines[2] = lines[2].replace(lines[2].split(",")[-5], "0.123", 1)  # one digit string of step 1 changed
    metrics.write_text("\n".join(lines) + "\n")
    assert reproduce.main([str(table), "--out", str(tmp_path / "scratch")]) == 1
    out = capsys.readouterr().out
    assert "NOT bit-identical on the CPU kind that made it: first differs at step 1" in out
    assert out.rstrip().endswith("(1 differs)")


def test_another_cpu_kind_is_compared_with_the_seed_spread(table, tmp_path, capsys):
    for seed in (1, 2):
        train_here(*TINY, *STEPS, f"seed={seed}", f"record={table}", run_dir=tmp_path / "runs" / f"pos=rope,seed={seed}")
    for summary_path in table.glob("*/summary.json"):   # the cell made on one other kind
        summary = json.loads(summary_path.read_text())
        summary["machine"]["cpu"] = {"model": "Another CPU", "flags": ["avx2"]}
        summary_path.write_text(json.dumps(summary))
    assert reproduce.main([str(table), "--job", "pos=rope,seed=0", "--out", str(tmp_path / "scratch")]) == 0
    out = capsys.readouterr().out
    assert "pos=rope,seed=0: other CPU kind (CPU Another CPU [avx2] here" in out
    assert "compared val/acc, val/loss" in out and "within seed spread (val/acc" in out and "3 seeds" in out
    assert "val/exact" not in out   # 0 at every seed here: it would pass whatever was trained


def test_a_cell_of_two_kinds_has_no_spread_of_one_computation(table, tmp_path, capsys):
    for seed in (1, 2):
        train_here(*TINY, *STEPS, f"seed={seed}", f"record={table}", run_dir=tmp_path / "runs" / f"pos=rope,seed={seed}")
    summary_path = table / "pos=rope,seed=0" / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["machine"]["cpu"] = {"model": "Another CPU", "flags": ["avx2"]}
    summary_path.write_text(json.dumps(summary))
    assert reproduce.main([str(table), "--job", "pos=rope,seed=0", "--out", str(tmp_path / "scratch")]) == 1
    assert "the cell's seeds are not one computation (pairs records of 2 CPU kinds" in capsys.readouterr().out


def test_the_kind_check_bounds_what_the_kind_moves_and_the_rule_reads_it(table, tmp_path, capsys):
    for seed in (1, 2):
        train_here(*TINY, *STEPS, f"seed={seed}", f"record={table}", run_dir=tmp_path / "runs" / f"pos=rope,seed={seed}")
    for path in table.glob("*/summary.json"):
        summary = json.loads(path.read_text())
        summary["machine"]["cpu"] = {"model": "Another CPU", "flags": ["avx512_bf16"]}
        path.write_text(json.dumps(summary))
    results = tmp_path / "results"
    status, folder = reproduce.kind_check(table, reproduce.records_of(table), tmp_path / "scratch", results)
    check = json.loads((folder / "summary.json").read_text())
    assert check["kinds"][0].startswith("Another CPU [avx512_bf16]") and check["bounded"] is (status == 0)
    acc = check["metrics"]["val/acc"]
    assert acc["n"] == 3 and -100 <= acc["low"] <= acc["mean_diff"] <= acc["high"] <= 100
    assert acc["moves_at_most"] == pytest.approx(max(abs(acc["low"]), abs(acc["high"])), abs=1e-3)
    made = json.loads((table / "pos=rope,seed=0" / "summary.json").read_text())
    here = {**made, "machine": {**made["machine"], "cpu": {"model": "Here", "flags": ["avx2"]}}}
    here["machine"]["torch"] = check["kinds"][1].rsplit(" torch ", 1)[1]
    here["machine"]["cpu"] = machine.cpu()   # this machine, whatever its kind
    other = json.loads((table / "pos=rope,seed=1" / "summary.json").read_text())
    pairing = identity.pairable([other, here], results)
    assert pairing.ok is check["bounded"]
    assert "moves by at most" in pairing.reason if pairing.ok else "2 CPU kinds" in pairing.reason
    assert list(identity.pairable([other, here], tmp_path / "elsewhere").failed) == ["kinds"]


def test_a_kind_check_of_gpu_records_on_a_cpu_machine_is_one_line(table, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = table / "pos=rope,seed=0" / "summary.json"
    summary = json.loads(path.read_text())
    summary["accelerator"] = summary["identity"]["trainer.accelerator"] = "cuda"
    summary["machine"]["gpu"] = "NVIDIA H200"
    path.write_text(json.dumps(summary))
    assert reproduce.main([str(table), "--kind-check", "--out", str(tmp_path / "scratch")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --kind-check: the records ran on NVIDIA H200") and "\n" not in err
    assert "trainer.accelerator=cuda" in err and not (tmp_path / "scratch").exists()


def test_two_commits_pair_only_through_a_committed_equivalence_record(tmp_path):
    a = {"machine": {"commit": "a" * 40, "cpu": {"model": "X", "flags": []}, "torch": "2"}}
    b = {"machine": {"commit": "b" * 40, "cpu": {"model": "X", "flags": []}, "torch": "2"}}
    pairing = identity.pairable([a, b], tmp_path)
    assert not pairing.ok and pairing.reason.startswith("pairs records of 2 code versions: aaaaaaa (1 runs), bbbbbbb (1 runs)")
    assert pairing.failed == {"commits": {"aaaaaaa": 1, "bbbbbbb": 1}}
    assert identity.pairable([a, b], tmp_path, declared={"commits": "why"}).ok
    folder = tmp_path / identity.EQUIVALENCE / "aaaaaaa_bbbbbbb"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"status": "completed", "commits": ["a" * 40, "b" * 40],
                                                     "match": False}))
    assert not identity.pairable([a, b], tmp_path).ok   # retrained, and they differ: still two computations
    (folder / "summary.json").write_text(json.dumps({"status": "completed", "commits": ["a" * 40, "b" * 40],
                                                     "match": True}))
    assert identity.pairable([a, b], tmp_path) == identity.Pairing(True, "2 commits (aaaaaaa, bbbbbbb) shown "
                                                                        "equivalent (the same code, or results/equivalence/)")


def test_two_commits_whose_code_is_identical_in_git_pair_and_a_code_change_does_not(tmp_path):
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()

    def commit(path: str, text: str) -> str:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
        git("add", path)
        git("commit", "-q", "-m", path)
        return git("rev-parse", "HEAD")

    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    for path in identity.CODE:
        commit(path if "." in path else f"{path}/x.py", "1\n")
    first = git("rev-parse", "HEAD")
    records = commit("results/t/job/summary.json", "{}")       # records and a README change no code
    readme = commit("README.md", "numbers\n")
    changed = commit("tasks/x.py", "2\n")
    run = lambda c: {"machine": {"commit": c, "cpu": {"model": "X", "flags": []}, "torch": "2"}}  # noqa: E731
    results = tmp_path / "results"
    assert identity.pairable([run(first), run(records), run(readme)], results).ok
    assert list(identity.pairable([run(first), run(changed)], results).failed) == ["commits"]
    later = commit("README.md", "more numbers\n")   # the same code as `changed`, which a check joins to `first`
    check = results / identity.EQUIVALENCE / "first_changed"
    check.mkdir(parents=True)
    (check / "summary.json").write_text(json.dumps({"status": "completed", "commits": [first, changed], "match": True}))
    assert identity.pairable([run(first), run(later)], results).ok


def test_tables_listed_are_those_with_records_and_a_card_task_folder_is_read_one_level_deeper(tmp_path, monkeypatch):
    results = tmp_path / "results"
    job = results / "card" / "dyck3" / "pos=rope,seed=200,task=dyck3"
    job.mkdir(parents=True)
    (job / "summary.json").write_text(json.dumps({"status": "completed"}))
    (job / "config.yaml").write_text("seed: 200\n")
    (results / "mutation").mkdir()
    (results / "mutation" / "summary.json").write_text("{}")
    monkeypatch.setattr(reproduce, "RESULTS", results)
    assert reproduce.tables_with_records() == ["card"]
    assert reproduce.records_of(results / "card") == [job]


def test_bad_arguments_are_one_line(tmp_path, capsys):
    assert reproduce.main(["no_such_table"]) == 2
    assert "TABLE=no_such_table is no table: choose one of" in capsys.readouterr().err
    assert reproduce.main(["bifocal_table1", "--jobs", "0"]) == 2
    assert "JOBS=0 is invalid: an integer >= 1 or all" in capsys.readouterr().err
    assert reproduce.main(["bifocal_table1", "--out", "results/x"]) == 2
    assert "is under results/" in capsys.readouterr().err


def test_a_record_reads_as_the_behaviour_it_had_before_a_setting_existed():
    old = {"status": "completed", "precision": "bf16-mixed", "accelerator": "cpu"}
    assert identity.of_record(old, {"trainer": {"threads": 1, "devices": 1}}) == {
        "optim.fused": False, "trainer.compile": False, "trainer.precision": "bf16-mixed", "trainer.threads": 1,
        "trainer.accelerator": "cpu", "trainer.devices": 1}
    fused = {**old, "fused_adamw": True, "compile": True, "threads": 2}
    assert identity.of_record(fused, {"optim": {"fused": "auto"}})["optim.fused"] is True
    assert identity.of_record({**fused, "identity": {"optim.fused": False}}) == {"optim.fused": False}


def test_a_committed_record_of_an_unfused_table_reads_unfused():
    found = identity.read(ROOT / "results" / "bifocal_table1" / "pos=rope,seed=0,task=mod_arith")
    assert found["optim.fused"] is False and found["trainer.threads"] == 1 and found["trainer.compile"] is False


def test_pope_baselines_is_one_computation():
    """Its rope and pope rows no longer link the batch-256 ladder's unfused records (another computation): every
    record it holds ran fused."""
    counts = identity.table(ROOT / "results" / "pope_baselines")
    assert {dict(key)["optim.fused"] for key in counts} == {True}
    assert not identity.describe(counts).startswith("mixed: ")


def test_a_job_computing_otherwise_than_its_table_is_a_trial(table):
    ran = identity.read(table / "pos=rope,seed=0")
    assert identity.trial_reason(ran, table, "pos=rope,seed=1") == ""
    why = identity.trial_reason({**ran, "optim.fused": True}, table, "pos=rope,seed=1")
    assert why.startswith(f"optim.fused=true differs from {table}'s records (optim.fused=false)")
    assert "a trial, not recorded" in why
    assert identity.trial_reason({**ran, "optim.fused": True}, table, "pos=rope,seed=0") == ""  # its own, aside


def test_job_folder_names_leave_out_the_one_list():
    from ropelab.core.config import compose  # noqa: F401  (registers the resolvers)
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose("config", overrides=["optim.fused=true", "trainer.threads=2", "seed=3",
                                                 "trainer.precision=32-true"], return_hydra_config=True)
    assert list(cfg.hydra.job.config.override_dirname.exclude_keys) == identity.job_name_excludes()
    assert cfg.hydra.job.override_dirname == "seed=3,trainer.precision=32-true"
    from ropelab.analysis.report.sweep import IGNORED_KEYS

    assert set(identity.COMPUTE) <= IGNORED_KEYS and set(identity.BOOKKEEPING) <= IGNORED_KEYS | {"logger"}


def test_new_records_hold_checkout_relative_paths(table):
    text = (table / "pos=rope,seed=0" / "config.yaml").read_text()
    assert f"record: {table}" in text  # outside the checkout: as given
    assert portable_records.portable("/work/wt4/runs/pope_indirect/pos=rope,seed=0") == "runs/pope_indirect/pos=rope,seed=0"
    assert portable_records.portable("/work/main/results/momentum_gamma") == "results/momentum_gamma"
    text = '"run_dir": "/work/wt/runs/t/pos=rope,seed=0,task=mod_arith",\nrecord: /x/results/t\n| q / k | https://a.b/c |'
    once = portable_records.rewrite(text)
    assert once == '"run_dir": "runs/t/pos=rope,seed=0,task=mod_arith",\nrecord: results/t\n| q / k | https://a.b/c |'
    assert portable_records.rewrite(once) == once


def test_no_committed_file_under_results_holds_an_absolute_path():
    tracked = subprocess.run(["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True, text=True).stdout
    found = []
    for name in filter(None, tracked.split("\0")):
        path = ROOT / name
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if match := portable_records.ABSOLUTE.search(text):
            found.append(f"{name}: {match.group(0)}")
    assert not found, f"absolute paths (python tools/portable_records.py rewrites them): {found[:5]}"
    assert not re.search(r"/work/|/home/", "".join(found))


def test_grad_norm_logged_before_it_was_the_clippings_is_set_aside_only_for_records_of_then(table, tmp_path, capsys):
    """Before c6b9119 train/grad_norm was logged from another reduction of the norm the clipping used: a record of
    then differs in that column only, by rounding; the same difference in a later record is a difference."""
    record = table / "pos=rope,seed=0"
    metrics = record / "metrics.csv"
    rows = [line.split(",") for line in metrics.read_text().splitlines()]
    col = rows[0].index("train/grad_norm")
    rows[2][col] = repr(float(rows[2][col]) * (1 + 1e-7))
    metrics.write_text("\n".join(",".join(r) for r in rows) + "\n")
    assert reproduce.main([str(table), "--out", str(tmp_path / "scratch")]) == 1
    assert "first differs at step 1, train/grad_norm" in capsys.readouterr().out
    summary = json.loads((record / "summary.json").read_text())
    summary["machine"]["commit"] = "b7253535a148ff721170e70264764a2ba2bcefb5"  # a commit of before c6b9119
    (record / "summary.json").write_text(json.dumps(summary))
    assert reproduce.main([str(table), "--out", str(tmp_path / "scratch")]) == 0
    assert "bit-identical (metrics.csv, 6 steps; train/grad_norm aside: 1 rows differ" in capsys.readouterr().out


def test_records_whose_precision_resolved_differently_never_pair_whatever_joins_their_kinds(tmp_path):
    bounded = tmp_path / identity.KIND_CHECK / "x"
    bounded.mkdir(parents=True)
    kinds = [identity.kind_of({"machine": {"cpu": {"model": "X", "flags": [f]}, "torch": "2"}})
             for f in ("avx2", "avx512_bf16")]
    (bounded / "summary.json").write_text(json.dumps({"status": "completed", "kinds": kinds, "bounded": True}))
    fp32, bf16 = ({"precision": p, "threads": 1,
                   "machine": {"commit": "a" * 40, "cpu": {"model": "X", "flags": [f]}, "torch": "2"}}
                  for p, f in (("32-true", "avx2"), ("bf16-mixed", "avx512_bf16")))
    assert identity.pairable([fp32, dict(fp32, machine=bf16["machine"])], tmp_path).ok   # the kind check joins
    pairing = identity.pairable([fp32, fp32, bf16], tmp_path)
    assert not pairing.ok and pairing.reason == ("pairs records of settings that change what a run computes: "
                                                 "2 × trainer.precision=32-true; 1 × trainer.precision=bf16-mixed")
    assert pairing.failed == {"settings": {"trainer.precision=32-true": 2, "trainer.precision=bf16-mixed": 1}}
