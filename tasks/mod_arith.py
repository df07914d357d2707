"""mod_arith — modular sums (Bifocal paper: (a + b + c) mod 7).

One decoded example (defaults: 3 terms, modulus 7, operands 0–6):

    <bos> 3 + 5 + 6 = 0
          terms     sep answer (loss only here)

Every number is one token (``"0"`` … ``"<max>"``, max = the larger of ``operand_max`` and ``modulus - 1``),
so the answer is a single token: the sum of the terms mod ``modulus``. The number of terms is uniform in
``terms_min``–``terms_max``; the default trains on exactly 3 (the paper's task), so the OOD split measures
extrapolation from one term count; set e.g. ``terms_min=2 terms_max=4`` to train on a range.
Group key: the number of terms. OOD split: more terms (4–6 by default).
"""

from __future__ import annotations

import numpy as np

from ropelab.core.errors import require, require_int, require_ordered
from tasks.base import BOS, PAD, Task, pack


class ModArith(Task):
    group_name = "terms"
    length_knobs = ("terms_min", "terms_max")  # scaled by ropelab.experiments.extrapolate

    def __init__(self, modulus: int = 7, terms_min: int = 3, terms_max: int = 3, operand_min: int = 0,
                 operand_max: int = 6):
        require_int(modulus, "task.modulus", 2)
        require(modulus <= 1000, "task.modulus", modulus, "an integer in 2..1000")
        require_int(terms_min, "task.terms_min", 1)
        require_ordered(terms_min, terms_max, "task.terms_min", "task.terms_max")
        require_int(operand_min, "task.operand_min", 0)
        require_ordered(operand_min, operand_max, "task.operand_min", "task.operand_max")
        require(operand_max <= 1000, "task.operand_max", operand_max, "at most 1000")
        self.modulus, self.terms_min, self.terms_max = modulus, terms_min, terms_max
        self.operand_min, self.operand_max = operand_min, operand_max
        self.n_numbers = max(operand_max, modulus - 1) + 1
        self.vocab = [PAD, BOS, "+", "=", *(str(v) for v in range(self.n_numbers))]
        self.seq_len = 1 + (2 * terms_max - 1) + 1 + 1 - 1  # inputs drop the answer token

    def sample_grouped(self, rng, n):
        bos, plus, eq, num0 = 1, 2, 3, 4
        terms = rng.integers(self.terms_min, self.terms_max + 1, size=n)
        operands = rng.integers(self.operand_min, self.operand_max + 1, size=(n, self.terms_max))
        operands[np.arange(self.terms_max)[None, :] >= terms[:, None]] = 0
        answers = operands.sum(axis=1) % self.modulus
        sequences, starts = [], []
        for i in range(n):
            body = np.full(2 * terms[i] - 1, plus, dtype=np.int64)
            body[::2] = operands[i, : terms[i]] + num0
            seq = np.concatenate([[bos], body, [eq, answers[i] + num0]])
            sequences.append(seq)
            starts.append(len(seq) - 1)
        inputs, targets = pack(sequences, starts, self.seq_len)
        return inputs, targets, terms
