"""mean_pooling — the rounded mean of a sequence of numbers (an "∫" task: every token counts equally).

One decoded example (length 8):

    <bos> 3 7 1 9 4 6 2 5 = 5
          numbers         sep answer (loss only here)

The sequence is ``len_min``–``len_max`` numbers in 0…``n_values``-1, one token each; the answer is their mean
rounded half up — ``floor(mean + 1/2)``, computed exactly in integers as ``(2*sum + L) // (2*L)`` — written
with the same number tokens (it lies in the same range). With ``dist="mixed"`` (default) each example draws
its own p ~ Uniform(0, 1) and its numbers i.i.d. from Binomial(n_values - 1, p), so the means spread over
the whole range; with ``dist="uniform"`` the numbers are i.i.d. uniform and the mean concentrates near the
middle as L grows (a constant guess then scores well).
Group key: the sequence length, in bins of ``group_bin`` labelled by their longest length (bin 16 = lengths
9–16; with the defaults no bin mixes training and OOD lengths).
OOD split: longer sequences (65–128; training uses 8–64).
"""

from __future__ import annotations

import numpy as np

from ropelab.core.errors import require, require_int, require_ordered
from tasks.base import BOS, PAD, Task, pack


def rounded_mean(values: np.ndarray, length: np.ndarray) -> np.ndarray:
    """floor(sum / L + 1/2) per row, in exact integer arithmetic (values past ``length`` must be 0)."""
    return (2 * values.sum(axis=1) + length) // (2 * length)


class MeanPooling(Task):
    group_name = "length"
    length_knobs = ("len_min", "len_max")  # scaled by ropelab.experiments.extrapolate

    def __init__(self, len_min: int = 8, len_max: int = 64, n_values: int = 10, dist: str = "mixed",
                 group_bin: int = 8):
        require_int(len_min, "task.len_min", 1)
        require_ordered(len_min, len_max, "task.len_min", "task.len_max")
        require_int(n_values, "task.n_values", 2)
        require(dist in ("mixed", "uniform"), "task.dist", dist, "one of mixed, uniform")
        require_int(group_bin, "task.group_bin", 1)
        self.len_min, self.len_max, self.n_values = len_min, len_max, n_values
        self.dist, self.group_bin = dist, group_bin
        self.vocab = [PAD, BOS, "=", *(str(v) for v in range(n_values))]
        self.seq_len = 1 + len_max + 1  # "=" then the answer; inputs drop the answer token

    def sample_grouped(self, rng, n):
        bos, eq, num0 = 1, 2, 3
        length = rng.integers(self.len_min, self.len_max + 1, size=n)
        if self.dist == "mixed":
            values = rng.binomial(self.n_values - 1, rng.random((n, 1)), size=(n, self.len_max))
        else:
            values = rng.integers(0, self.n_values, size=(n, self.len_max))
        values[np.arange(self.len_max)[None, :] >= length[:, None]] = 0
        answers = rounded_mean(values, length)
        sequences, starts = [], []
        for i in range(n):
            seq = np.concatenate([[bos], values[i, : length[i]] + num0, [eq, answers[i] + num0]])
            sequences.append(seq)
            starts.append(len(seq) - 1)
        inputs, targets = pack(sequences, starts, self.seq_len)
        return inputs, targets, -(-length // self.group_bin) * self.group_bin  # the bin's longest length
