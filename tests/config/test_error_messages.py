"""Issue 39, item 5: the smaller things a user meets — each error one line that names what was typed and leads
somewhere (an interrupt in the final evaluation: tests/run/test_resume_and_divergence.py; README pointers:
tests/project/test_readme_pointers.py)."""

import pytest

from conftest import ROOT
from ropelab.core import cli
from ropelab.core.config import compose
from ropelab.core.errors import ConfigError
from ropelab.core.schema import check_schema
from ropelab.core.cli import as_typed

import tasks


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.check_overrides(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err.strip()


def test_an_unknown_key_suggests_the_known_one_not_a_plus_that_fails_alike(capsys):
    err = refused(["trainer.max_step=5"], capsys)
    assert err.startswith("error: trainer.max_step is not a known key (did you mean trainer.max_steps?)")
    assert "+trainer" not in err
    with pytest.raises(ConfigError, match=r"trainer.max_step is not a known key \(did you mean trainer.max_steps\?\)"):
        check_schema(compose(["+trainer.max_step=5"]))


def test_a_range_the_wrong_way_round_names_both_ends():
    with pytest.raises(ConfigError) as err:
        tasks.build("bio_rotation", gap_min=300)
    assert str(err.value) == ("task.gap_min=300 is above task.gap_max=200: a range needs task.gap_min <= task.gap_max "
                              "(change either)")
    with pytest.raises(ConfigError, match=r"^task.terms_min=5 is above task.terms_max=3"):
        tasks.build("mod_arith", terms_min=5, terms_max=3)


def test_an_unknown_task_option_is_one_line_without_the_class():
    with pytest.raises(ConfigError) as err:
        tasks.build("bio_rotation", foo=1)
    assert str(err.value).startswith("task.foo is not an option of task=bio_rotation: valid keys are motif_len, gap_min")
    assert "__init__" not in str(err.value)


def test_a_float_for_an_integer_is_echoed_as_typed():
    with pytest.raises(ConfigError) as err:
        check_schema(compose(["trainer.max_steps=1e3"]))
    assert str(err.value).startswith("trainer.max_steps=1000.0 is invalid: an integer >= 1")
    assert "write 1000" in str(err.value)
    assert as_typed(str(err.value), ["trainer.max_steps=1e3"]).startswith("trainer.max_steps=1e3 is invalid")
    assert as_typed("pos.base=-5 is invalid: a number > 1", ["pos.base=-5"]) == "pos.base=-5 is invalid: a number > 1"


# Issue 44, "tried as a new user would": what a fresh clone's first mistakes print

def test_a_list_value_is_echoed_once_as_typed():
    with pytest.raises(ConfigError) as err:
        check_schema(compose(["task=mod_arith", "pos.momentum.gamma=[1.0,0.5]"]))  # 4 layers, 2 values
    shown = as_typed(str(err.value), ["pos.momentum.gamma=[1.0,0.5]"])
    assert shown.startswith("pos.momentum.gamma=[1.0,0.5] is invalid: one γ per layer"), shown


def test_claims_and_card_are_refused_as_run_groups_and_left_out_of_help(capsys):
    for group in ("claims=bifocal", "card=suite"):
        err = refused([group], capsys)
        assert err.startswith(f"error: {group.split('=')[0]}= is not a config group of a run") and "\n" not in err
        assert "task, pos, model, trainer, logger, experiment" in err
    shown = cli.run_help("== Configuration groups ==\ncard: suite\nclaims: bifocal\ntask: dyck3\n\n== Config ==\n")
    assert shown == "== Configuration groups ==\ntask: dyck3\n\n== Config ==\n"


def test_help_lists_only_a_runs_groups():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "train.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    groups = out.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    assert "task:" in groups and "experiment:" in groups
    assert "claims:" not in groups and "card:" not in groups


def test_an_unknown_top_level_key_lists_the_keys_and_the_groups():
    with pytest.raises(ConfigError) as err:
        check_schema(compose(["+foo=1"]))
    assert str(err.value).startswith("foo is not a known key: valid keys are seed, name,")
    assert str(err.value).endswith("; config groups: task, pos, model, trainer, logger, experiment")


def test_precision_typed_as_a_number_is_lightnings_name_for_it():
    from ropelab.core.schema import RunConfig

    settings = RunConfig.of(compose(["task=mod_arith", "trainer.precision=32"]))
    assert settings.trainer.precision == settings.values["trainer"]["precision"] == "32-true"
    assert settings.machine.precision == "32-true"
    with pytest.raises(ConfigError, match=r"^trainer.precision=33 is invalid: one of auto, 32-true"):
        check_schema(compose(["trainer.precision=33"]))
