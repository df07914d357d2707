"""global_counting — count how often a queried symbol occurs in the whole sequence (an "∫" task).

One decoded example (length 10, 4 symbols):

    <bos> c a b a d a b c c a ? a = #4
          sequence            query sep answer (loss only here)

The sequence is ``len_min``–``len_max`` symbols drawn i.i.d. uniformly from the first ``n_symbols`` letters;
the queried symbol (after ``?``, at the end, so the whole sequence must be read back) is uniform over the
same letters; the answer is how many times it occurs, one number token ``#0`` … ``#<max_count>``. The count
tokens are fixed by ``max_count`` (not by the length), so training and OOD share one vocabulary:
``max_count`` must be >= the longest sequence of every split, the OOD one included (checked).
Group key: the sequence length, in bins of ``group_bin`` labelled by their longest length (bin 24 = lengths
17–24; with the defaults no bin mixes training and OOD lengths).
OOD split: longer sequences (65–128; training uses 16–64).
"""

from __future__ import annotations

import string

import numpy as np

from ropelab.core.errors import require, require_int, require_ordered
from tasks.base import BOS, PAD, Task, pack


class GlobalCounting(Task):
    group_name = "length"
    length_knobs = ("len_min", "len_max")  # scaled by ropelab.experiments.extrapolate

    def __init__(self, len_min: int = 16, len_max: int = 64, n_symbols: int = 4, max_count: int = 128,
                 group_bin: int = 8):
        require_int(len_min, "task.len_min", 1)
        require_ordered(len_min, len_max, "task.len_min", "task.len_max")
        require_int(n_symbols, "task.n_symbols", 1, "an integer in 1..26")
        require(n_symbols <= 26, "task.n_symbols", n_symbols, "an integer in 1..26")
        require_int(max_count, "task.max_count", len_max,
             f"an integer >= task.len_max ({len_max}): every count needs a token (raise max_count to cover OOD)")
        require_int(group_bin, "task.group_bin", 1)
        self.len_min, self.len_max, self.n_symbols, self.max_count, self.group_bin = \
            len_min, len_max, n_symbols, max_count, group_bin
        self.vocab = [PAD, BOS, "?", "=", *string.ascii_lowercase[:n_symbols], *(f"#{c}" for c in range(max_count + 1))]
        self.seq_len = 1 + len_max + 3  # "? q =" then the answer; inputs drop the answer token

    def sample_grouped(self, rng, n):
        bos, query, eq, sym0 = 1, 2, 3, 4
        count0 = sym0 + self.n_symbols
        length = rng.integers(self.len_min, self.len_max + 1, size=n)
        symbols = rng.integers(0, self.n_symbols, size=(n, self.len_max))
        queried = rng.integers(0, self.n_symbols, size=n)
        inside = np.arange(self.len_max)[None, :] < length[:, None]
        counts = ((symbols == queried[:, None]) & inside).sum(axis=1)
        sequences, starts = [], []
        for i in range(n):
            seq = np.concatenate([[bos], symbols[i, : length[i]] + sym0,
                                  [query, queried[i] + sym0, eq, counts[i] + count0]])
            sequences.append(seq)
            starts.append(len(seq) - 1)
        inputs, targets = pack(sequences, starts, self.seq_len)
        return inputs, targets, -(-length // self.group_bin) * self.group_bin  # the bin's longest length
