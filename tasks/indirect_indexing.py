"""indirect_indexing — PoPE's indirect indexing task (PoPE paper, appendix B.1).

One decoded example (the paper's, ``QEOHoUbKfeSrMVNlCzXu, z, -3, N``):

    <bos> Q E O H o U b K f e S r M V N l C z X u , z , -3 , N
          source string (unique letters)          src  shift  answer (loss only here)

The source string is ``len_min``–``len_max`` distinct upper/lower-case letters (sampled without replacement
from the 52), one token each; then a source letter taken from the string, a shift (one token, ``"-15"`` …
``"15"``) and the answer: the letter ``shift`` places from the source letter. The shift is uniform in
[-shift_max, shift_max] (0 included, as in the paper), and the source letter is uniform among the positions
from which that shift lands inside the string. Loss on the final answer token only.
Group key: the string length, in bins of ``group_bin`` labelled by their longest length (bin 25 = lengths
21–25; with the defaults no bin mixes training and OOD lengths).
OOD split: longer strings (41–52; training uses 20–40).
"""

from __future__ import annotations

import string

import numpy as np

from tasks.base import BOS, PAD, Task, pack, require, require_int

LETTERS = string.ascii_uppercase + string.ascii_lowercase


class IndirectIndexing(Task):
    name = "indirect_indexing"
    group_name = "length"

    def __init__(self, len_min: int = 20, len_max: int = 40, shift_max: int = 15, group_bin: int = 5):
        require_int(shift_max, "task.shift_max", 0)
        require_int(len_min, "task.len_min", shift_max + 1, f"an integer > task.shift_max ({shift_max})")
        require_int(len_max, "task.len_max", len_min, f"an integer in task.len_min ({len_min})..{len(LETTERS)}")
        require(len_max <= len(LETTERS), "task.len_max", len_max,
                f"an integer in task.len_min ({len_min})..{len(LETTERS)}")
        require_int(group_bin, "task.group_bin", 1)
        self.len_min, self.len_max, self.shift_max, self.group_bin = len_min, len_max, shift_max, group_bin
        self.vocab = [PAD, BOS, ",", *LETTERS, *(str(s) for s in range(-shift_max, shift_max + 1))]
        self.seq_len = 1 + len_max + 6 - 1  # ", src , shift , answer"; inputs drop the answer token

    def sample_grouped(self, rng, n):
        bos, comma, letter0 = 1, 2, 3
        shift0 = letter0 + len(LETTERS) + self.shift_max  # id of the "0" shift token
        length = rng.integers(self.len_min, self.len_max + 1, size=n)
        letters = np.argsort(rng.random((n, len(LETTERS))), axis=1)[:, : self.len_max]
        shift = rng.integers(-self.shift_max, self.shift_max + 1, size=n)
        first = np.maximum(0, -shift)  # source positions p with 0 <= p + shift < length
        source = first + (rng.random(n) * (length - np.abs(shift))).astype(np.int64)
        rows = np.arange(n)
        src, answer = letters[rows, source] + letter0, letters[rows, source + shift] + letter0
        sequences, starts = [], []
        for i in range(n):
            seq = np.concatenate([[bos], letters[i, : length[i]] + letter0,
                                  [comma, src[i], comma, shift0 + shift[i], comma, answer[i]]])
            sequences.append(seq)
            starts.append(len(seq) - 1)
        inputs, targets = pack(sequences, starts, self.seq_len)
        return inputs, targets, -(-length // self.group_bin) * self.group_bin  # the bin's longest length
