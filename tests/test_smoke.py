"""Every task × every scheme builds and takes one finite training step (tiny model)."""

import math

import pytest

import tasks
from ropelab import positional
from ropelab.smoke import TINY, one_step


@pytest.mark.parametrize("task_name", tasks.names())
def test_every_scheme_trains_one_step_on(task_name):
    for pos_name in positional.names():
        result = one_step(task_name, pos_name, TINY)
        assert math.isfinite(result["loss"]), (task_name, pos_name)
