import numpy as np
import pytest

import tasks
from tasks.base import IGNORE

COMP = {"A": "T", "T": "A", "C": "G", "G": "C"}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("noise", ["lower", "same"])
def test_answer_is_reverse_complement_and_gap_in_range(seed, noise):
    task = tasks.build("bio_rotation", motif_len=6, gap_min=10, gap_max=30, noise=noise, group_bin=1)
    inputs, targets, gaps = task.sample_grouped(np.random.default_rng(seed), 64)
    assert inputs.shape == targets.shape == (64, task.seq_len) and inputs.dtype == np.int64
    for x, y, gap in zip(inputs, targets, gaps):
        answer_pos = np.flatnonzero(y != IGNORE)
        assert len(answer_pos) == 6 and np.all(np.diff(answer_pos) == 1)
        full = list(x[: answer_pos[-1] + 1]) + [y[answer_pos[-1]]]
        toks = [task.vocab[t] for t in full]
        assert toks[0] == "<bos>"
        motif, noise_part = toks[1:7], toks[7:-7]
        assert toks[-7] == ">" and 10 <= len(noise_part) <= 30 and len(noise_part) == gap
        assert toks[-6:] == [COMP[b] for b in reversed(motif)]
        assert [task.vocab[t] for t in y[answer_pos]] == toks[-6:]
        if noise == "lower":
            assert all(t in "acgt" for t in noise_part)


def test_bad_gap_range_is_one_line_error():
    with pytest.raises(tasks.ConfigError, match="task.gap_max"):
        tasks.build("bio_rotation", gap_min=50, gap_max=10)
    with pytest.raises(tasks.ConfigError, match="task='nope'"):
        tasks.build("nope")
