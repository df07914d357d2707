"""The smoke matrix (``ropelab.experiments.smoke``): every task × every scheme builds and takes one finite training step, and
at the default config the loss before that step is the one committed in results/smoke/smoke.json.

The committed matrix was written by the pre-refactor code (f9b4601, issue 14) and is bit-identical to today's on the
machine that wrote it (all 81 cells, session 4); on another machine a float32 ulp or two may differ (other kernels).
"""

import json
import math

import pytest

import tasks
from conftest import ROOT
from ropelab.core import positional
from ropelab.experiments.smoke import TINY, one_step

COMMITTED = json.loads((ROOT / "results" / "smoke" / "smoke.json").read_text())
ULPS = 1e-5  # a few float32 ulps at a loss of ~5: other kernels, same math


def committed(cells) -> list[tuple[str, str]]:
    """The (task, scheme) cells of ``cells`` that the committed matrix holds (a task or scheme added since has none)."""
    return [(t, p) for t, p in cells if "loss" in COMMITTED.get(t, {}).get(p, {})]


@pytest.mark.parametrize("task_name", tasks.names())
def test_every_scheme_trains_one_step_on(task_name):
    for pos_name in positional.names():
        result = one_step(task_name, pos_name, TINY)
        assert math.isfinite(result["loss"]), (task_name, pos_name)


# every scheme on the shortest task (a second); the whole matrix is a few CPU-minutes: -m slow
CHEAP = committed([("mod_arith", p) for p in positional.names()])
EVERY = committed([(t, p) for t in tasks.names() for p in positional.names()])


def _matches_the_committed_matrix(task_name, pos_name):
    loss = one_step(task_name, pos_name, [])["loss"]
    assert loss == pytest.approx(COMMITTED[task_name][pos_name]["loss"], rel=0, abs=ULPS), (task_name, pos_name)


@pytest.mark.parametrize("task_name, pos_name", CHEAP)
def test_first_step_loss_is_the_committed_one(task_name, pos_name):
    _matches_the_committed_matrix(task_name, pos_name)


@pytest.mark.slow
@pytest.mark.parametrize("task_name, pos_name", EVERY)
def test_the_whole_matrix_is_the_committed_one(task_name, pos_name):
    _matches_the_committed_matrix(task_name, pos_name)
