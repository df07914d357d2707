"""Every config in conf/ composes (and every option group choice is buildable by name)."""

import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT

CONF = ROOT / "conf"
GROUPS = ["task", "pos", "model", "trainer", "logger"]


def choices(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group, choice", [(g, c) for g in GROUPS for c in choices(g)])
def test_every_group_choice_composes(group, choice):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"{group}={choice}"], return_hydra_config=True)
    assert cfg[group] is not None


@pytest.mark.parametrize("experiment", choices("experiment"))
def test_every_experiment_composes(experiment):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={experiment}"], return_hydra_config=True)
    assert cfg.name
