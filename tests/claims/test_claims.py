"""Claims as data (issue 36): declarations decided from records by the one rule, the protocol enforced (one commit,
one CPU kind, seeds disjoint from the calibration), bad declarations named in one line, README generated."""

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ropelab.analysis import claims as C
from ropelab.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def write_record(root, table, scheme, seed, acc, *, commit="a" * 40, cpu="AMD EPYC", gamma=0.0, task="mod_arith",
                 steps=2000):
    folder = root / "results" / table / f"pos={scheme},pos.momentum.gamma={gamma},seed={seed}"
    folder.mkdir(parents=True)
    config = {"task": {"name": task}, "pos": {"name": scheme, "momentum": {"gamma": gamma}}, "seed": seed,
              "trainer": {"max_steps": steps}, "data": {"batch_size": 32}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "summary.json").write_text(json.dumps({"status": "completed", "final": {"val/acc": acc},
                                                     "machine": {"commit": commit, "cpu": {"model": cpu}}}))


def declare(root, *claims, paper="Bifocal"):
    folder = root / "conf" / "claims"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.yaml").write_text(yaml.safe_dump({"paper": paper, "claims": list(claims)}, allow_unicode=True))


PAIRED = {"id": "spectral_wins", "claim": "spectral beats rope", "form": "paired", "table": "t",
          "where": {"task.name": "mod_arith"}, "a": {"pos.name": "spectral"}, "b": {"pos.name": "rope"},
          "metric": "val/acc", "direction": 1, "seeds": [0, 1, 2]}


def scheme_pair(root, commits=("a" * 40,) * 2, cpus=("AMD EPYC",) * 2, seeds=(0, 1, 2)):
    for s in seeds:
        write_record(root, "t", "spectral", s, 0.9 + 0.01 * s, commit=commits[0], cpu=cpus[0])
        write_record(root, "t", "rope", s, 0.5 + 0.02 * s, commit=commits[1], cpu=cpus[1])


def test_a_paired_claim_is_decided_with_its_conditions_from_the_records(tmp_path):
    scheme_pair(tmp_path)
    declare(tmp_path, PAIRED)
    [d] = C.decide_all(tmp_path)
    assert d.verdict.word == "reproduced" and d.verdict.n == 3
    assert d.verdict.diff == pytest.approx(0.4 - 0.01)
    assert C.render(d).startswith("reproduced: +39.0 pts [")
    assert d.conditions() == ("results/t; 2000 steps × batch 32; AMD EPYC; commit aaaaaaa; seeds 0–2 (3 of 3 planned); "
                              "floor 14.3 % (guess, exact); pre-registration unknown")


def test_pairing_two_commits_or_two_cpu_kinds_is_refused_unless_declared_equivalent(tmp_path):
    scheme_pair(tmp_path, commits=("e7b213e" + "0" * 33, "0577cb1" + "0" * 33))
    declare(tmp_path, PAIRED)
    [d] = C.decide_all(tmp_path)
    assert d.verdict.word == "refused" and d.verdict.diff is None
    assert C.render(d) == ("refused: pairs records of 2 code versions: 0577cb1 (3 runs), e7b213e (3 runs); "
                           "rerun at one commit, or declare them equivalent and why")
    declare(tmp_path, {**PAIRED, "equivalent": {"commits": "the two differ only in the report code"}})
    assert C.decide_all(tmp_path)[0].verdict.word == "reproduced"


def test_two_cpu_kinds_are_refused(tmp_path):
    scheme_pair(tmp_path, cpus=("AMD EPYC", "Intel(R) Xeon(R) Processor"))
    declare(tmp_path, PAIRED)
    [d] = C.decide_all(tmp_path)
    assert d.verdict.word == "refused" and "2 CPU kinds" in d.verdict.reason


def test_seeds_that_chose_the_budget_are_flagged_and_missing_seeds_are_incomplete(tmp_path):
    scheme_pair(tmp_path)
    write_record(tmp_path, "calibration/mod_arith", "rope", 1, 0.9, steps=2000)
    write_record(tmp_path, "calibration/mod_arith", "rope", 7, 0.9, steps=4000)
    declare(tmp_path, {**PAIRED, "seeds": [0, 1, 2, 3, 4],
                       "calibration": [{"table": "calibration/mod_arith", "where": {"trainer.max_steps": 2000}}]})
    [d] = C.decide_all(tmp_path)
    assert d.verdict.word == "incomplete" and (d.verdict.n, d.verdict.planned) == (3, 5)
    assert C.render(d).startswith("incomplete (3 of 5), so far reproduced: ")
    assert d.flags == ["⚠ seeds 1 also chose the budget (results/calibration/mod_arith)",
                       "⚠ no fresh-seed confirmation declared (confirm:)"]
    assert "seeds 0–2 (3 of 5 planned)" in d.conditions()


def test_an_accuracy_at_its_ceiling_on_both_sides_says_nothing_without_a_declared_ceiling(tmp_path):
    for s in range(3):
        write_record(tmp_path, "t", "spectral", s, 1.0)
        write_record(tmp_path, "t", "rope", s, 0.97 + 0.01 * s)
    declare(tmp_path, PAIRED)
    [d] = C.decide_all(tmp_path)
    assert d.verdict.word == "says nothing" and "both sides at the ceiling" in C.render(d)
    declare(tmp_path, {**PAIRED, "ceiling": 1.5})   # a declared ceiling replaces the accuracy's 100 %
    assert C.decide_all(tmp_path)[0].verdict.word != "says nothing"


def test_a_seed_outside_the_planned_ones_is_not_used(tmp_path):
    scheme_pair(tmp_path, seeds=(0, 1, 2, 3))
    declare(tmp_path, PAIRED)
    assert C.decide_all(tmp_path)[0].verdict.n == 3, "seed 3 was added after the plan: it needs the claim edited"


def test_a_trend_is_decided_on_each_seeds_slope_over_the_axis(tmp_path):
    for s in range(3):
        for i, g in enumerate((0.0, 0.5, 2.0)):
            write_record(tmp_path, "t", "rope", s, 0.3 + 0.2 * i + 0.01 * s * i, gamma=g)
    declare(tmp_path, {"id": "up", "claim": "rises with γ", "form": "trend", "table": "t", "metric": "val/acc",
                       "axis": "pos.momentum.gamma", "values": [0, 0.5, 2.0], "direction": 1, "seeds": [0, 1, 2]})
    [d] = C.decide_all(tmp_path)
    assert d.verdict.word == "reproduced" and d.verdict.diff == pytest.approx(0.21)
    assert "pts per step of gamma" in C.render(d)


def test_a_composite_with_a_relative_drop_lists_its_parts(tmp_path):
    for s in range(3):
        write_record(tmp_path, "t", "rope", s, 0.9, gamma=0.0)
        write_record(tmp_path, "t", "rope", s, 0.45 + 0.01 * s, gamma=2.0)
        write_record(tmp_path, "t", "spectral", s, 0.8, gamma=0.0)
        write_record(tmp_path, "t", "spectral", s, 0.4 + 0.02 * s, gamma=2.0)
    declare(tmp_path, {"id": "drops", "claim": "rope drops less", "form": "composite", "table": "t",
                       "metric": "val/acc", "drop": {"axis": "pos.momentum.gamma", "from": 0, "to": 2},
                       "direction": -1, "seeds": [0, 1, 2],
                       "parts": [{"name": "rope − spectral", "form": "paired", "a": {"pos.name": "rope"},
                                  "b": {"pos.name": "spectral"}},
                                 {"name": "rope against 60 %", "form": "level", "a": {"pos.name": "rope"},
                                  "threshold": 0.6}]})
    [d] = C.decide_all(tmp_path)
    first = dict(d.verdict.parts)["rope − spectral"]
    expected = [(0.9 - (0.45 + 0.01 * s)) / 0.9 - (0.8 - (0.4 + 0.02 * s)) / 0.8 for s in range(3)]
    assert first.diff == pytest.approx(sum(expected) / 3)
    assert d.verdict.word == "partly" and C.render(d).startswith(
        "partly: 1 reproduced, 1 no difference detected; Bonferroni over 2 parts, 97.5 % intervals — rope − spectral: ")
    assert " %" in C.render(d), "a relative drop is written in %"


@pytest.mark.parametrize("change, named", [
    ({"table": "no_such_table"}, "table 'no_such_table' is not one of: bifocal_calibrated, bifocal_confirm,"),
    ({"metric": "val/accuracy"}, "metric 'val/accuracy' is not one of: val/acc,"),
    ({"a": {"pos.name": "rpoe"}}, "a pos.name 'rpoe' is not one of: alibi, bifocal,"),
    ({"form": "ttest"}, "form 'ttest' is not one of: paired, level, trend, composite"),
    ({"direction": 2}, "direction 2 is not one of: 1, -1, 0"),
    ({"where": {"task.nmae": "x"}}, "where key 'task.nmae' is not one of: "),
    ({"rule": "t"}, "key 'rule' is not one of: "),
    ({"equivalent": {"commits": True}}, "equivalent commits needs the reason they may be pooled"),
    ({"equivalent": {"machines": "same"}}, "equivalent key 'machines' is not one of: commits, cpus"),
    ({"floor": "chance"}, "floor 'chance' is not one of: a number, guess, shortcut:<name>, none"),
    ({"label": "ours"}, "label 'ours' is not one of: paper, extension"),
    ({"confirm": "nope"}, "confirm 'nope' is not one of: spectral_wins"),
])
def test_a_bad_key_is_one_line_naming_it_and_the_valid_choices(tmp_path, capsys, change, named):
    scheme_pair(tmp_path)
    declare(tmp_path, {**PAIRED, **change})
    with pytest.raises(ConfigError, match="^test.yaml: claim spectral_wins: ") as err:
        C.decide_all(tmp_path)
    assert named in str(err.value) and "\n" not in str(err.value)
    (tmp_path / "README.md").write_text("")
    assert C.main(["--root", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and named in out


def test_a_table_planned_by_a_preset_may_be_declared_before_its_runs(tmp_path):
    scheme_pair(tmp_path)
    declare(tmp_path, {**PAIRED, "table": "bifocal_confirm", "seeds": [100, 101]})
    [d] = C.decide_all(tmp_path)
    assert d.verdict.word == "not run" and C.render(d) == "not run (0 of 2)"
    assert d.conditions() == ("results/bifocal_confirm: no record of these cells yet; seeds 100–101 planned; "
                              "pre-registration unknown")


def test_readme_blocks_are_rewritten_between_their_markers_only(tmp_path):
    scheme_pair(tmp_path)
    declare(tmp_path, PAIRED)
    start, end = C._markers("summary")
    bstart, bend = C._markers("bifocal")
    readme = f"intro\n{start}\nold\n{end}\nmiddle\n{bstart}\n{bend}\nend\n"
    (tmp_path / "README.md").write_text(readme)
    assert C.main(["--root", str(tmp_path), "--check"]) == 1
    assert C.main(["--root", str(tmp_path), "--write-readme"]) == 0
    text = (tmp_path / "README.md").read_text()
    assert text.startswith("intro\n") and "\nmiddle\n" in text and text.endswith("end\n") and "old" not in text
    assert "**1 claims computed from the records" in text and "| spectral beats rope |" in text
    assert C.main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "README.md").write_text("no markers\n")
    assert C.main(["--root", str(tmp_path)]) == 2


def test_readme_claims_tables_are_the_commands_output():
    """README's claims tables and tally are generated: edit conf/claims/ and run `make claims`, never the table."""
    readme = (ROOT / "README.md").read_text()
    generated = C.with_blocks(readme, C.blocks(C.decide_all(ROOT)))
    assert generated == readme, "README's claims blocks differ from `python -m ropelab.claims --write-readme`"


# ----------------------------------------------------------------------------------------------- analysis tables

def write_analysis(root, table, name, rows):
    folder = root / "results" / table
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / name, index=False)


def run_of(scheme, seed, gamma=0.0):
    return f"runs/t/pos={scheme},pos.momentum.gamma={gamma},seed={seed}"  # recorded as results/t/<run>


def test_resonance_shares_are_paired_by_seed_between_moments_of_one_cell(tmp_path):
    for s in range(3):
        write_record(tmp_path, "t", "spectral", s, 0.9)
    shares = {0: (0.10, 0.15), 1: (0.12, 0.15), 2: (0.16, 0.15)}  # (end, init)
    write_analysis(tmp_path, "resonance", "resonance.csv",
                   [{"cell": "t · dyck3 · spectral", "run": run_of("spectral", s), "seed": s, "share_final": end,
                     "share_init": init, "null_mean": 0.13} for s, (end, init) in shares.items()])
    declare(tmp_path, {"id": "res", "claim": "end beats init", "form": "paired", "table": "resonance",
                       "where": {"cell": "t · dyck3 · spectral"}, "a": {"moment": "end"}, "b": {"moment": "init"},
                       "metric": "resonance/share", "direction": 1, "seeds": [0, 1, 2], "decimals": 3})
    [d] = C.decide_all(tmp_path)
    assert d.verdict.n == 3 and d.verdict.diff == pytest.approx((0.10 + 0.12 + 0.16) / 3 - 0.15)
    assert C.render(d).startswith("no difference detected: −0.023 [")
    assert d.conditions() == ("results/resonance; 2000 steps × batch 32; AMD EPYC; commit aaaaaaa; seeds 0–2 (3 of 3 "
                              "planned); no floor (resonance/share is not an accuracy); pre-registration unknown")


def test_depth_manifold_rows_are_selected_by_scheme_layer_and_split(tmp_path):
    rows = [{"run": run_of(scheme, s), "scheme": scheme, "seed": s, "layer": layer, "split": split,
             "cos_10_11_centred": 0.5, "probe": base + 0.1 * s + (layer == 1 and split == "ood") * 0.2}
            for scheme, base in (("spectral", 0.5), ("rope", 0.4)) for s in range(3)
            for layer in (0, 1) for split in ("id", "ood")]
    rows = [{**r, "probe": r["probe"] - 0.2} if r["scheme"] == "rope" else r for r in rows]
    write_analysis(tmp_path, "depth_manifold", "depth_manifold.csv", rows)
    declare(tmp_path, {"id": "probe", "claim": "spectral decodes depth", "form": "paired", "table": "depth_manifold",
                       "where": {"split": "ood", "layer": 1}, "a": {"pos.name": "spectral"},
                       "b": {"pos.name": "rope"}, "metric": "depth/probe", "direction": 1, "seeds": [0, 1, 2]})
    [d] = C.decide_all(tmp_path)
    assert d.verdict.diff == pytest.approx(0.3) and d.verdict.n == 3  # 0.1 + the 0.2 rope loses at ood layer 1 only


def test_escape_routes_relative_exposure_change_is_the_engines_drop_with_its_sign_turned(tmp_path):
    exposure = {("geometric", 0.0): [1.0, 0.8, 0.9], ("geometric", 2.0): [0.5, 0.6, 0.45],
                ("single@1", 0.0): [1.0, 1.0, 1.0], ("single@1", 2.0): [1.0, 1.0, 1.0]}
    write_analysis(tmp_path, "escape_routes", "escape_routes_runs.csv",
                   [{"run": f"runs/t/{p},{g},{s}", "task": "global_counting", "profile": p, "gamma": g, "seed": s,
                     "low_share_weights": 0.3, "exposure_weights": e} for (p, g), es in exposure.items()
                    for s, e in enumerate(es)])
    declare(tmp_path, {"id": "profiles", "claim": "single escapes less", "form": "paired", "table": "escape_routes",
                       "where": {"task.name": "global_counting"}, "a": {"pos.freqs": "single@1"},
                       "b": {"pos.freqs": "geometric"}, "metric": "escape/exposure_weights",
                       "drop": {"axis": "pos.momentum.gamma", "from": 0.0, "to": 2.0}, "direction": -1,
                       "seeds": [0, 1, 2]}, paper="Momentum")
    [d] = C.decide_all(tmp_path)
    relative = [at / base - 1 for at, base in zip(exposure[("geometric", 2.0)], exposure[("geometric", 0.0)])]
    assert d.verdict.diff == pytest.approx(-(0 - sum(relative) / 3))  # single@1 − geometric of at/base − 1, negated
    assert d.verdict.word == "reproduced"


def test_an_analysis_table_may_be_declared_before_its_output_exists(tmp_path):
    declare(tmp_path, {"id": "low", "claim": "low share grows", "form": "paired", "table": "escape_routes",
                       "a": {"pos.momentum.gamma": 2.0}, "b": {"pos.momentum.gamma": 0.0},
                       "metric": "escape/low_share_weights", "direction": 1, "seeds": [100, 101]}, paper="Momentum")
    [d] = C.decide_all(tmp_path)
    assert C.render(d) == "not run (0 of 2)"
    assert d.conditions() == ("results/escape_routes: no record of these cells yet; seeds 100–101 planned; "
                              "no floor (escape/low_share_weights is not an accuracy); pre-registration unknown")


def test_a_bad_key_in_an_analysis_declaration_is_one_line(tmp_path):
    write_analysis(tmp_path, "resonance", "resonance.csv",
                   [{"cell": "c", "run": run_of("spectral", 0), "seed": 0, "share_final": 0.1, "share_init": 0.1,
                     "null_mean": 0.1}])
    declare(tmp_path, {"id": "res", "claim": "end beats init", "form": "paired", "table": "resonance",
                       "a": {"momnet": "end"}, "b": {"moment": "init"}, "metric": "resonance/share",
                       "direction": 1, "seeds": [0]})
    with pytest.raises(ConfigError, match="^test.yaml: claim res: a key 'momnet' is not one of: cell, moment, seed$"):
        C.decide_all(tmp_path)


COMPOSITE = {"id": "both", "claim": "spectral and bifocal beat rope", "form": "composite", "table": "t",
             "where": {"task.name": "mod_arith"}, "metric": "val/acc", "direction": 1, "seeds": [0, 1, 2],
             "parts": [{"name": "spectral − rope", "form": "paired", "a": {"pos.name": "spectral"},
                        "b": {"pos.name": "rope"}},
                       {"name": "bifocal − rope", "form": "paired", "a": {"pos.name": "bifocal"},
                        "b": {"pos.name": "rope"}}]}


@pytest.mark.parametrize("change, named", [
    ({"combine": "most"}, "combine 'most' is not one of: all, any, primary"),
    ({"combine": "primary", "primary": "mod 7"}, "primary 'mod 7' is not one of: spectral − rope, bifocal − rope"),
    ({"multiplicity": "holm"}, "multiplicity 'holm' is not one of: bonferroni, none"),
    ({"multiplicity": "none"}, "multiplicity none needs multiplicity_why"),
])
def test_a_bad_combine_rule_is_one_line_naming_the_valid_choices(tmp_path, change, named):
    scheme_pair(tmp_path)
    declare(tmp_path, {**COMPOSITE, **change})
    with pytest.raises(ConfigError, match="^test.yaml: claim both: ") as err:
        C.decide_all(tmp_path)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_composite_parts_are_bonferroni_corrected_unless_declared_otherwise(tmp_path):
    scheme_pair(tmp_path)
    for s in range(3):
        write_record(tmp_path, "t", "bifocal", s, 0.5 + 0.02 * s)
    declare(tmp_path, COMPOSITE)
    [d] = C.decide_all(tmp_path)
    assert all(v.alpha == pytest.approx(0.025) for _, v in d.verdict.parts)
    assert "Bonferroni over 2 parts, 97.5 % intervals" in C.render(d)
    assert C.render(d).startswith("partly: 1 reproduced, 1 no difference detected; Bonferroni")
    declare(tmp_path, {**COMPOSITE, "multiplicity": "none", "multiplicity_why": "two separate papers' claims"})
    [d] = C.decide_all(tmp_path)
    assert all(v.alpha == 0.05 for _, v in d.verdict.parts) and "Bonferroni" not in C.render(d)


def test_a_drop_reads_only_its_two_settings_and_says_nothing_when_both_never_learned(tmp_path):
    for s in range(3):
        for scheme, start in (("rope", 0.16), ("spectral", 0.15)):
            for g, acc in ((0.0, start), (1.0, 0.9), (2.0, start - 0.01 * (s + 1))):
                write_record(tmp_path, "t", scheme, s, acc, gamma=g)
    declare(tmp_path, {"id": "d", "claim": "rope drops less", "form": "paired", "table": "t",
                       "a": {"pos.name": "rope"}, "b": {"pos.name": "spectral"}, "metric": "val/acc",
                       "drop": {"axis": "pos.momentum.gamma", "from": 0, "to": 2}, "direction": -1,
                       "seeds": [0, 1, 2]})
    [d] = C.decide_all(tmp_path)
    assert {r.config["pos.momentum.gamma"] for r in d.records} == {0.0, 2.0}, "γ 1 is not read"
    assert d.verdict.word == "says nothing" and "floor" in d.verdict.reason  # mod 7's floor: 1/7 exactly


def test_a_pipe_in_any_cell_is_escaped(tmp_path):
    scheme_pair(tmp_path)
    declare(tmp_path, {**PAIRED, "claim": "spectral | rope"})
    table = C.paper_block(C.decide_all(tmp_path), "Bifocal")  # the claim is this table's index column
    row = [line for line in table.splitlines() if "spectral" in line][0]
    assert "spectral \\| rope" in row and row.count(" | ") == table.splitlines()[0].count(" | ")


def test_a_trend_with_no_reversal_is_partly_only_when_a_step_goes_the_other_way(tmp_path):
    curve = {0.0: 0.3, 0.5: 0.9, 1.0: 0.7, 2.0: 0.95}
    for s in range(3):
        for g, acc in curve.items():
            write_record(tmp_path, "t", "rope", s, acc + 0.01 * s * (g == 1.0), gamma=g)
    trend = {"id": "up", "claim": "rises with γ", "form": "trend", "table": "t", "metric": "val/acc",
             "axis": "pos.momentum.gamma", "values": [0, 0.5, 1.0, 2.0], "direction": 1, "seeds": [0, 1, 2],
             "floor": "none"}
    declare(tmp_path, {**trend, "no_reversal": True})
    [d] = C.decide_all(tmp_path)
    assert d.verdict.word == "partly" and "steps the other way: γ 1 − 0.5" in C.render(d)
    declare(tmp_path, trend)
    assert C.decide_all(tmp_path)[0].verdict.word == "reproduced"


def commit(root, message, when):
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", message], check=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin",
                        "GIT_AUTHOR_DATE": f"{when} +0000", "GIT_COMMITTER_DATE": f"{when} +0000"})


def test_preregistration_is_read_from_git_history(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    declare(tmp_path, PAIRED)
    commit(tmp_path, "declare", 1_700_000_000)
    scheme_pair(tmp_path)
    commit(tmp_path, "records", 1_700_000_100)
    [d] = C.decide_all(tmp_path)
    assert d.prereg.startswith("pre-registered: declared in ")
    declare(tmp_path, {**PAIRED, "why": "a sentence added later changes no test"})
    commit(tmp_path, "prose", 1_700_000_200)
    assert C.decide_all(tmp_path)[0].prereg.startswith("pre-registered")
    declare(tmp_path, {**PAIRED, "margin": 0.1})
    assert C.decide_all(tmp_path)[0].prereg.startswith("edited after the data: test changed in uncommitted")
    commit(tmp_path, "edit", 1_700_000_300)
    [d] = C.decide_all(tmp_path)
    assert d.prereg.startswith("edited after the data") and "declared or edited after the data: 1" in C.tally([d])
    declare(tmp_path, {**PAIRED, "id": "late"})
    commit(tmp_path, "late", 1_700_000_400)
    assert C.decide_all(tmp_path)[0].prereg.startswith("declared after the data")
    shallow = tmp_path.parent / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{tmp_path}", str(shallow)], check=True)
    [d] = C.decide_all(shallow)
    assert d.prereg == "pre-registration unknown"
    assert C.preregistration(shallow, []) == "pre-registration unknown: shallow git history (git fetch --unshallow)"
