"""The benchmark card (issue 37): the suite, the checks before anything trains, the card from records, the trial
refusal, TASKS, and a scheme copied from rope reading "no difference" with differences exactly 0."""

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from conftest import ROOT, TINY
from ropelab.analysis import card as card_report
from ropelab.analysis import card_suite
from ropelab.core.config import compose
from ropelab.core.errors import ConfigError
from ropelab.experiments import card

SUITE = """\
seeds: [200, 201, 202]
max_seeds: 5
rule: {margin: 0.05, ceiling: 1.0, useful: {pts: 10, val/loss: 0.05}}
tasks:
  mod_arith:
    setting: {trainer.max_steps: 1000}
    metric: val/acc
    ood: ood/acc
    level: 0.9
  mean_pooling:
    setting: null
    why: "no calibration grid"
  code_lm:
    setting: {trainer.max_steps: 2000}
    metric: val/loss
    direction: lower
# ---- plan: written by a command
plan: {}
"""


@pytest.fixture
def suite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE)
    return card_suite.load(path)


def write_record(root: Path, task: str, pos: str, seed: int, final: dict, extra: list[str] = (),
                 options: list[str] = ()) -> Path:
    """A completed record as training writes it: the composed config, a summary with ``final``, a val curve."""
    name = ",".join(sorted([f"task={task}", f"pos={pos}", f"seed={seed}", *options]))
    folder = root / task / name
    folder.mkdir(parents=True)
    cfg = {**composed(task, pos, (*extra, *options)), "seed": seed}
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    (folder / "summary.json").write_text(json.dumps({"status": "completed", "task": task, "pos": pos, "seed": seed,
                                                     "final": final, "wall_seconds": 60.0,
                                                     "machine": {"commit": "abc1234", "cpu": {"model": "test"}}}))
    metric = "val/acc" if "val/acc" in final else "val/loss"
    pd.DataFrame({"step": [49, 99], metric: [final[metric] / 2, final[metric]]}).to_csv(folder / "metrics.csv",
                                                                                        index=False)
    return folder


@functools.cache
def composed(task: str, pos: str, overrides: tuple[str, ...]) -> dict:
    return OmegaConf.to_container(compose([f"task={task}", f"pos={pos}", *overrides]), resolve=True)


ACC = {"rope": [0.50, 0.56, 0.53], "pope": [0.61, 0.66, 0.64], "alibi": [0.40, 0.47, 0.42]}
LOSS = {"rope": [1.10, 1.05, 1.12], "pope": [1.00, 0.96, 1.03], "alibi": [1.30, 1.25, 1.33]}


@pytest.fixture
def records(tmp_path, suite):
    root = tmp_path / "results" / "card"
    for pos in ACC:
        for seed, acc, loss in zip(suite.seeds, ACC[pos], LOSS[pos]):
            write_record(root, "mod_arith", pos, seed, {"val/acc": acc, "ood/acc": acc / 2},
                         ["trainer.max_steps=1000"])
            write_record(root, "code_lm", pos, seed, {"val/loss": loss}, ["trainer.max_steps=2000"])
    return root


def test_the_committed_suite_reads_and_every_calibrated_setting_composes():
    suite = card_suite.load()
    assert set(suite.tasks) == set(card_suite.load().tasks) and "code_lm" in suite.tasks
    for spec in suite.tasks.values():
        if spec.calibrated:
            assert compose([f"task={spec.name}", "pos=rope", *spec.overrides()]).task.name == spec.name
        else:
            assert spec.why
    assert not set(suite.seeds) & {0, 1, 2}  # disjoint from the calibration's seeds
    assert suite.tasks["code_lm"].extrapolation == (1, 2, 4, 8)


def test_the_words_the_card_marks_are_the_rules():
    from ropelab.analysis.verdict import WORDS

    assert {*card_report.DETECTED_WORDS, card_report.NO_DIFFERENCE} <= set(WORDS)


def test_the_card_from_synthetic_records_pairs_by_seed(suite, records, tmp_path):
    out = tmp_path / "cards"
    path = card_report.write_card(suite, suite.select(None), records, "pope", {}, [], records, out)
    numbers = pd.read_csv(out / "card.csv")
    rope_acc = numbers[(numbers["task"] == "mod_arith") & (numbers["metric"] == "val/acc")
                       & (numbers["against"] == "rope")].iloc[0]
    expected = sum(100 * (p - r) for p, r in zip(ACC["pope"], ACC["rope"])) / 3
    assert rope_acc["diff"] == pytest.approx(expected, abs=1e-9) and rope_acc["n"] == 3
    # six schemes of conf/pos/ have no baseline records here: no best baseline is named over missing ones
    text = path.read_text()
    assert "rope: 53.0 ± 3.0 (n=3)" not in text and "bifocal" in text and "lack planned seeds" in text
    assert "reproduced" not in text and "| 3 · " in text   # a card's words; n (all planned) and the MDE
    code = numbers[(numbers["task"] == "code_lm") & (numbers["against"] == "rope")].iloc[0]
    assert code["diff"] == pytest.approx(sum(p - r for p, r in zip(LOSS["pope"], LOSS["rope"])) / 3, abs=1e-9)
    assert "not calibrated: no calibration grid" in text  # mean_pooling says nothing
    assert (out / "heatmap.png").is_file()
    ranks = card_report.ranking(suite, [card_report.task_card(suite, s, records, "pope", {})
                                        for s in suite.select(None)])
    assert list(ranks["scheme"]) == ["pope", "rope", "alibi"] and list(ranks["mean rank"]) == [1.0, 2.0, 3.0]
    shutil.rmtree(records / "mod_arith" / "pos=pope,seed=202,task=mod_arith")   # the scheme short of its n
    text = card_report.write_card(suite, suite.select(None), records, "pope", {}, [], records, out).read_text()
    assert "| 2 of 3 · " in text


def test_a_card_refuses_records_of_two_commits_no_equivalence_record_joins(suite, records, tmp_path):
    out = tmp_path / "c"
    assert "code versions" not in card_report.write_card(suite, suite.select(None), records, "pope", {}, [], records,
                                                         out).read_text()
    summary = records / "code_lm" / "pos=pope,seed=200,task=code_lm" / "summary.json"
    saved = json.loads(summary.read_text())
    saved["machine"]["commit"] = "def5678"
    summary.write_text(json.dumps(saved))
    text = card_report.write_card(suite, suite.select(None), records, "pope", {}, [], records, out).read_text()
    # the one rule (ropelab.core.identity.pairable): no committed equivalence record joins the two commits
    assert "not one computation: pairs records of 2 code versions: abc1234 (5 runs), def5678 (1 runs)" in text
    assert "--equivalence" not in text   # the card's pope records themselves span two commits: no one command joins
    for path in (records / "code_lm").glob("pos=pope,*/summary.json"):
        saved = json.loads(path.read_text())
        saved["machine"]["commit"] = "def5678"
        path.write_text(json.dumps(saved))
    text = card_report.write_card(suite, suite.select(None), records, "pope", {}, [], records, out).read_text()
    assert "`ropelab campaign --equivalence abc1234 def5678 --jobs-from card` checks" in text


def test_a_card_of_a_recorded_scheme_trains_nothing_and_reads_its_records(suite, records, capsys):
    assert card.score(card.request("rope", "", "", suite), records) == 0
    said = capsys.readouterr().out
    assert "mod_arith: 3/3 recorded" in said and "code_lm: 3/3 recorded" in said and "train.py" not in said
    numbers = pd.read_csv(records / "cards" / "pos=rope" / "card.csv")
    assert (numbers[numbers["against"] == "rope"]["diff"] == 0).all()


def test_the_cross_table_names_the_best_scheme_per_task(suite, records, tmp_path):
    text = card_report.write_cross_table(suite, suite.select(None), records, tmp_path / "report").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert "pope: better" in rows["mod_arith"] and "pope: better" in rows["code_lm"]
    assert "53.0 ± 3.0 (n=3), solved 0/3" in rows["mod_arith"]
    assert (tmp_path / "report" / "heatmap.png").is_file()


def test_the_cross_table_shows_every_schemes_numbers_before_rope_has_a_record(suite, records, tmp_path):
    for folder in (records / "mod_arith").glob("pos=rope,*"):
        shutil.rmtree(folder)
    text = card_report.write_cross_table(suite, suite.select(None), records, tmp_path / "report").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| mod_arith"))
    assert "43.0 ± 3.6 (n=3), solved 0/3" in row and "no baseline records of rope" in row and "better" not in row


def test_a_card_speaks_its_own_words_also_for_an_incomplete_verdict_so_far():
    from ropelab.analysis import verdict as V

    done = V.paired({0: 0.9, 1: 0.95, 2: 0.92}, {0: 0.5, 1: 0.55, 2: 0.52}, direction=+1)
    so_far = V.paired({0: 0.9, 1: 0.95, 2: 0.92}, {0: 0.5, 1: 0.55, 2: 0.52}, direction=+1, planned=5)
    assert card_report.card_render(done).startswith("better: ")
    assert card_report.card_render(so_far).startswith("incomplete (3 of 5), so far better: ")
    assert "reproduced" not in card_report.card_render(so_far)


def test_tasks_restrict_the_suite_and_the_card(suite, records, tmp_path, capsys):
    req = card.request("pope", "code_lm", "", suite)
    assert [s.name for s in req.specs] == ["code_lm"]
    assert card.score(req, records, dry_run=True) == 0
    said = capsys.readouterr().out
    assert said == "code_lm: 3/3 recorded\n"  # mod_arith is neither trained nor planned
    path = card_report.write_card(suite, req.specs, records, "pope", {}, [], records, tmp_path / "c", full=False)
    assert path.name == "card-code_lm.md" and "mod_arith" not in path.read_text()


def test_a_run_whose_config_differs_beyond_pos_is_a_trial_and_compares_nothing(suite, records, tmp_path):
    trial_root = tmp_path / "runs" / "card_trial" / "records"
    for seed in suite.seeds:
        write_record(trial_root, "mod_arith", "spectral", seed, {"val/acc": 0.9, "ood/acc": 0.4},
                     ["trainer.max_steps=5"])
    task = card_report.task_card(suite, suite.tasks["mod_arith"], records, "spectral", {}, trial_root)
    assert task.refusal.startswith("trial: trainer.max_steps=5 (baselines: 1000)") and not task.rows
    req = card.request("spectral", "mod_arith", "trainer.max_steps=5 trainer.threads=1", suite)
    assert req.trial == {"trainer.max_steps": "trainer.max_steps=5"} and req.how == ["trainer.threads=1"]
    assert card.records_root(req, records) == card.TRIALS / "records"  # a trial never writes into results/
    assert card.card_folder(req, records).parts[:2] == ("runs", "card_trial")


def test_momentum_is_an_option_of_any_card(suite, records):
    req = card.request("alibi", "mod_arith", "pos.momentum.gamma=0.5", suite)
    assert not req.trial and req.options == {"pos.momentum.gamma": "pos.momentum.gamma=0.5"}
    assert req.label == "alibi pos.momentum.gamma=0.5"
    assert card.job_name(req, req.specs[0], 200) == "pos.momentum.gamma=0.5,pos=alibi,seed=200,task=mod_arith"


@pytest.mark.parametrize("pos, tasks, args, said", [
    ("ropex", "", "", "POS='ropex' is not a scheme: choose one of alibi, bifocal"),
    ("rope", "mod_arith,dyck", "", "TASKS: 'dyck' is not a task of the suite"),
    ("alibi", "", "pos.base=500", "ARGS: pos.base is not an option of pos=alibi: its options are pos.heads_fraction, "
                                  "pos.momentum."),
    ("rope", "", "pos.base=-1", "mod_arith: pos.base=-1 is invalid"),
    ("rope", "", "trainer.max_stepz=5", "ARGS: trainer.max_stepz is not a known key"),
    ("rope", "", "seed=3", "ARGS: seed=3: seed is set by the suite's seeds"),
    ("rope", "", "pos.base=1,2", "ARGS: pos.base=1,2 sweeps"),
])
def test_bad_input_is_one_line_before_anything_trains(suite, tmp_path, capsys, pos, tasks, args, said):
    code = card.main(["--suite", str(suite.path), "--results", str(tmp_path / "r"), "score", pos, "--tasks", tasks,
                      "--args", args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {said}") and err.count("\n") == 1
    assert not (tmp_path / "r").exists() and not (tmp_path / "runs").exists()


def test_a_record_of_another_setting_under_a_job_name_is_refused(suite, records):
    req = card.request("pope", "mod_arith", "", suite)
    stale = records / "mod_arith" / card.job_name(req, req.specs[0], 200)
    config = yaml.safe_load((stale / "config.yaml").read_text())
    config["trainer"]["max_steps"] = 400
    (stale / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match="recorded at another setting: trainer.max_steps 400"):
        card.train_missing(req, records, dry_run=True)


def test_a_job_another_table_recorded_with_the_very_same_config_is_linked(suite, records, tmp_path):
    other = write_record(tmp_path / "results" / "other_table", "mod_arith", "sinusoidal", 200,
                         {"val/acc": 0.5, "ood/acc": 0.2}, ["trainer.max_steps=1000"])
    write_record(tmp_path / "results" / "another", "mod_arith", "sinusoidal", 201, {"val/acc": 0.5, "ood/acc": 0.2},
                 ["trainer.max_steps=400"])  # another budget: not the same job
    req = card.request("sinusoidal", "mod_arith", "", suite)
    jobs = card.plan_jobs(req, Path("results/card"))
    assert [j.state for j in jobs] == ["missing"] * 3
    card.link_identical(jobs)
    assert [j.state for j in jobs] == ["linked", "missing", "missing"]
    link = Path("results/card/mod_arith/pos=sinusoidal,seed=200,task=mod_arith")
    assert link.is_symlink() and not Path(link.readlink()).is_absolute() and link.resolve() == other.resolve()
    assert [j.state for j in card.plan_jobs(req, Path("results/card"))] == ["linked", "missing", "missing"]


def test_the_plan_block_is_rewritten_and_the_rest_of_the_file_kept(suite):
    head = suite.path.read_text().partition(card_suite.PLAN_MARKER)[0]
    card_suite.write_plan(suite.path, {"mod_arith": {"n": 4, "mde": 9.5}})
    again = card_suite.load(suite.path)
    assert suite.path.read_text().startswith(head) and again.plan["mod_arith"]["n"] == 4
    assert again.seeds_for("mod_arith") == [200, 201, 202, 203] and again.seeds_for("code_lm") == [200, 201, 202]


COPY_SUITE = f"""\
seeds: [200, 201]
tasks:
  mod_arith:
    setting: {{{', '.join(o.replace('=', ': ') for o in TINY)}, trainer.max_steps: 4, trainer.val_every: 2}}
    metric: val/loss
    ood: ood/loss
    direction: lower
  code_lm:
    setting: {{{', '.join(o.replace('=', ': ') for o in TINY)}, trainer.max_steps: 4, trainer.val_every: 2,
              task.window: 16, task.ood.window: 32}}
    metric: val/loss
    direction: lower
    extrapolation: [1, 2]
# ---- plan:
plan: {{}}
"""


@pytest.mark.slow
def test_a_scheme_copied_from_rope_reads_no_difference_with_differences_exactly_zero(tmp_path):
    """rope_copy = rope.py and rope.yaml copied under a new name (two files, no other edit): trained on a tiny
    two-task suite at rope's seeds, its card reads "no difference detected" on every task, every difference 0."""
    tree = tmp_path / "tree"
    for part in ("src", "tasks", "conf"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "train.py", tree / "train.py")
    shutil.copy(tree / "src/ropelab/core/positional/rope.py", tree / "src/ropelab/core/positional/rope_copy.py")
    shutil.copy(tree / "conf/pos/rope.yaml", tree / "conf/pos/rope_copy.yaml")
    (tmp_path / "suite.yaml").write_text(COPY_SUITE)
    env = {"PYTHONPATH": f"{tree / 'src'}:{tree}", "PATH": "/usr/bin:/bin", "WANDB_MODE": "offline"}
    for pos in ("rope", "rope_copy"):
        done = subprocess.run([sys.executable, "-m", "ropelab", "card", "--suite", "suite.yaml", "--results", "cards",
                               "score", pos], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
    numbers = pd.read_csv(tmp_path / "cards" / "cards" / "pos=rope_copy" / "card.csv")
    vs_rope = numbers[numbers["against"] == "rope"]
    assert set(vs_rope["task"]) == {"mod_arith", "code_lm"} and len(vs_rope) == 5  # val, ood; val, 1×, 2×
    assert (vs_rope["diff"] == 0).all() and (vs_rope["low"] == 0).all() and (vs_rope["high"] == 0).all()
    assert (vs_rope["word"] == card_report.NO_DIFFERENCE).all()


def test_an_incomplete_baseline_gives_no_verdict_but_the_schemes_own_numbers_show(suite, records, tmp_path):
    shutil.rmtree(records / "mod_arith" / "pos=rope,seed=202,task=mod_arith")
    task = card_report.task_card(suite, suite.tasks["mod_arith"], records, "pope", {})
    assert task.refusal.startswith("baseline incomplete: rope has 2 of 3 planned seeds (missing 202)")
    [row] = card_report.task_rows(task, "pope")
    assert row["pope"].startswith("63.7") and "(n=3)" in row["pope"] and row["pope − rope"] == task.refusal


def test_a_card_job_runs_one_thread_as_the_baselines_did(suite):
    req = card.request("rope", "mod_arith", "trainer.threads=2", suite)
    command = card.train_command(req, req.specs[0], [200], Path("results/card"))
    assert "trainer.threads=1" in command and "trainer.threads=2" not in command


def test_tiers_name_their_tasks_and_an_unknown_tier_is_one_line(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE.replace("rule:", "tiers: {quick: [mod_arith]}\nrule:"))
    loaded = card_suite.load(path)
    assert loaded.tier("quick") == ["mod_arith"] and loaded.tier("full") == ["mod_arith", "mean_pooling", "code_lm"]
    with pytest.raises(ConfigError, match="--tier slow: no such tier: choose from full, quick"):
        loaded.tier("slow")
    assert card_suite.load().tier("quick") == ["dyck3", "mod_arith", "assoc_recall", "global_counting"]


def test_a_tier_other_than_full_reads_the_suite_at_its_fewest_seeds(tmp_path):
    """The quick tier's card trains and compares the first ``seeds`` only, whatever the plan's n: it is the card a
    user waits for; the full suite keeps the plan's n."""
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE.replace("rule:", "tiers: {quick: [mod_arith]}\nrule:").replace("plan: {}",
                                                                                          "plan: {mod_arith: {n: 5}}"))
    loaded = card_suite.load(path)
    assert loaded.seeds_for("mod_arith") == [200, 201, 202, 203, 204]
    assert loaded.for_tier("full") is loaded and loaded.for_tier("") is loaded
    quick = loaded.for_tier("quick")
    assert quick.seeds_for("mod_arith") == [200, 201, 202] and quick.tasks == loaded.tasks
    req = card.request("pope", "mod_arith", "", quick)
    assert [j.seed for j in card.plan_jobs(req, tmp_path / "results")] == [200, 201, 202]
    with pytest.raises(ConfigError, match="--tier slow: no such tier"):
        loaded.for_tier("slow")


def test_card_jobs_resolve_auto_precision_as_their_baselines_did(suite, records, monkeypatch):
    """One computation with the baselines: a card job's ``auto`` takes the baselines' one precision where this CPU
    runs it (32-true anywhere; bf16-mixed only with native bf16); a precision the user sets is left alone."""
    from ropelab.core import machine

    for folder in (records / "mod_arith").iterdir():
        summary = json.loads((folder / "summary.json").read_text())
        summary["identity"] = {"trainer.precision": "32-true"}
        (folder / "summary.json").write_text(json.dumps(summary))
    req = card.request("pope", "mod_arith", "", suite)
    assert card.baselines_precision(req, req.specs[0], records) == {machine.AUTO_PRECISION_ENV: "32-true"}
    req = card.request("pope", "mod_arith", "trainer.precision=bf16-mixed", suite)
    assert card.baselines_precision(req, req.specs[0], records) == {}
    assert machine.auto_precision_as(["bf16-mixed"], ["avx2"]) is None
    assert machine.auto_precision_as(["bf16-mixed"], ["avx512_bf16"]) == "bf16-mixed"
    assert machine.auto_precision_as(["32-true", "bf16-mixed"], ["amx_bf16"]) is None
    assert machine.auto_precision_as(["32-true"], []) == "32-true"


def test_the_plan_runs_a_pilot_of_five_seeds_where_the_sd_rests_on_fewer(suite, records):
    planned = card.plan(suite, write=False, log=lambda _: None, results=records)   # rope at the suite's 3 seeds
    pilots = [p for p in planned.values() if "source_seeds" in p and len(p["source_seeds"]) < card.PILOT]
    assert sorted(t for t, p in planned.items() if p in pilots) == ["code_lm", "mod_arith"]
    for few in pilots:
        assert few["n"] == card.PILOT and few["sd"] > few["sd_observed"] and "upper 95 % bound" in few["sd_from"]
    assert all(few["note"].startswith(f"pilot: rope's SD rests on {len(few['source_seeds'])} seeds") for few in pilots)


def test_the_plan_never_drops_seeds_an_earlier_plan_planned():
    from dataclasses import replace

    loaded = card_suite.load()
    fresh = card.plan(loaded, write=False, log=lambda _: None)
    task, entry = next((t, p) for t, p in fresh.items() if p["n"] < loaded.max_seeds)
    raised = replace(loaded, plan={**loaded.plan, task: {**loaded.plan.get(task, {}), "n": entry["n"] + 1}})
    again = card.plan(raised, write=False, log=lambda _: None)[task]
    assert again["n"] == entry["n"] + 1 and again["mde"] < entry["mde"] and "never drops seeds" in again["note"]


def test_card_readme_writes_the_baseline_table_heat_map_and_ranking(suite, records):
    assert card.main(["--suite", str(suite.path), "--results", str(records), "readme"]) == 0
    text = (records / "README.md").read_text()
    assert "![heat map](heatmap.png)" in text and "## Ranking" in text and (records / "heatmap.png").is_file()
    row = next(line for line in text.splitlines() if line.startswith("| mod_arith"))
    assert "| partial |" in row   # rope's fresh seeds 50–56 %, clear of both ends


def test_the_cross_table_checks_the_calibrations_pick_on_ropes_fresh_seeds(suite, records):
    """The calibration's rule on rope's baseline seeds: a seed within the margin of the floor makes the task's
    setting 'floor' there (the pick did not hold on fresh seeds); above ceiling − margin, 'ceiling'."""
    def rope_seed_at(acc: float) -> str:
        summary = records / "mod_arith" / "pos=rope,seed=202,task=mod_arith" / "summary.json"
        saved = json.loads(summary.read_text())
        saved["final"]["val/acc"] = acc
        summary.write_text(json.dumps(saved))
        card.main(["--suite", str(suite.path), "--results", str(records), "readme"])
        return next(line for line in (records / "README.md").read_text().splitlines() if line.startswith("| mod_arith"))

    assert "| floor |" in rope_seed_at(0.16) and "| ceiling |" in rope_seed_at(0.97)
    assert "| partial |" in rope_seed_at(0.53)


def test_a_card_over_baselines_of_another_cpu_kind_says_where_it_compares(suite, records, tmp_path):
    for path in (records / "code_lm").glob("pos=rope,*/summary.json"):
        saved = json.loads(path.read_text())
        saved["machine"]["cpu"] = {"model": "Elsewhere", "flags": ["amx_bf16"]}
        path.write_text(json.dumps(saved))
    text = card_report.write_card(suite, suite.select(None), records, "pope", {}, [], records,
                                  tmp_path / "c").read_text()
    assert "pairs records of 2 CPU kinds" in text and "the baselines ran on Elsewhere [amx_bf16]" in text
    assert "`ropelab reproduce card/code_lm --kind-check`" in text
