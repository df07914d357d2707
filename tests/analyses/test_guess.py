"""The guess floor (ropelab.analysis.guess): exact where the task's structure fixes it."""

import numpy as np
import pytest

from ropelab.analysis import guess as G
from ropelab.analysis.guess import context_guess_accuracy, group_mode_accuracy, guess_accuracy
import tasks
from tasks.base import IGNORE, Task


@pytest.mark.parametrize("n_distractors, expected", [(1, 0.5), (3, 0.25)])
def test_variable_tracking_context_guess_is_one_over_the_chains(n_distractors, expected):
    # every chain has its own value and all of them occur in the input: a uniform pick is right 1 in chains
    task = tasks.build("variable_tracking", chain_max=2, n_distractors=n_distractors, n_vars=16)
    assert context_guess_accuracy(task, n=500) == pytest.approx(expected)


def test_answers_absent_from_the_input_give_a_zero_context_guess():
    task = tasks.build("global_counting", len_min=8, len_max=32)   # the counts #k never occur in the input
    assert context_guess_accuracy(task, n=200) == 0.0


class _AnswerIsTheGroup(Task):
    """Group g answers token 3 + g: a group-mode guess is always right, an in-context one never."""
    name = "_answer_is_the_group"
    vocab = ["<pad>", "<bos>", "x", *map(str, range(4))]

    def sample_grouped(self, rng, n):
        groups = rng.integers(0, 3, size=n)
        inputs = np.full((n, 3), 2)
        targets = np.full((n, 3), IGNORE)
        targets[:, -1] = 3 + groups
        return inputs, targets, groups


def test_group_mode_is_exact_when_the_group_fixes_the_answer():
    task = _AnswerIsTheGroup()
    assert group_mode_accuracy(task, n=300) == 1.0
    assert context_guess_accuracy(task, n=300) == 0.0
    assert guess_accuracy(task, n=300) == 1.0


def test_global_counting_at_length_8_has_the_exact_binomial_floor():
    # Binomial(8, 1/4): the mode 2 has probability C(8, 2) (1/4)² (3/4)⁶ = 0.311462...
    exact = G.floor({"name": "global_counting", "len_min": 8, "len_max": 8})
    assert exact.how == "exact" and exact.value == pytest.approx(28 * 0.25 ** 2 * 0.75 ** 6, abs=1e-12)
    sampled = guess_accuracy(tasks.build("global_counting", len_min=8, len_max=8), n=20000)
    assert sampled == pytest.approx(exact.value, abs=0.01)


def test_mod_7_floor_is_one_seventh_by_enumeration():
    assert G.floor({"name": "mod_arith"}).value == pytest.approx(1 / 7)


def test_a_sampled_floor_is_cached_per_task_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(G, "SAMPLES", 300)
    cfg = {"name": "variable_tracking", "chain_max": 2, "n_distractors": 1, "n_vars": 16}
    first = G.floor(cfg)
    assert first.how == "10⁵ samples" and first.value == pytest.approx(0.5)
    [cached] = (tmp_path / "ropelab" / "floors").glob("variable_tracking-*.json")
    monkeypatch.setattr(G, "guess_accuracy", lambda *a, **k: pytest.fail("read from the cache"))
    assert G.floor(cfg).value == first.value
