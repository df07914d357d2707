"""variable_tracking — follow a chain of assignments through interleaved distractor chains (RULER-style).

One decoded example (chain length 3, one distractor chain of length 2):

    <bos> q = 4 , x = 3 , y = x , Q = q , z = y , ? z = 3
          statements (two chains, interleaved)        query  answer (loss only here)

Each chain starts with ``var = value`` and continues with copies ``var = previous var``. The main chain has
``chain_min``–``chain_max`` assignments; ``n_distractors`` further chains have lengths drawn from the same range.
The chains' statements are interleaved uniformly at random, keeping each chain's own order. Every variable
is assigned once (names drawn without replacement from ``n_vars`` letters a–z, A–Z) and every chain has a
different value (digits drawn without replacement from ``n_values``), so only following the queried chain
gives the answer. The query is the last variable of the main chain; the answer is its value, one token.
Group key: the main chain's length (the number of hops). OOD split: longer chains (5–8; training uses 1–4).
"""

from __future__ import annotations

import string

import numpy as np

from ropelab.errors import require, require_int
from tasks.base import BOS, PAD, Task, pack

NAMES = string.ascii_lowercase + string.ascii_uppercase


class VariableTracking(Task):
    group_name = "chain"

    def __init__(self, chain_min: int = 1, chain_max: int = 4, n_distractors: int = 3, n_vars: int = 52,
                 n_values: int = 10):
        require_int(chain_min, "task.chain_min", 1)
        require_int(chain_max, "task.chain_max", chain_min, f"an integer >= task.chain_min ({chain_min})")
        require_int(n_distractors, "task.n_distractors", 0)
        require_int(n_vars, "task.n_vars", 1, f"an integer in 1..{len(NAMES)}")
        require(n_vars <= len(NAMES), "task.n_vars", n_vars, f"an integer in 1..{len(NAMES)}")
        require_int(n_values, "task.n_values", 1)
        chains = 1 + n_distractors
        require(chains * chain_max <= n_vars, "task.chain_max", chain_max,
                f"(1 + task.n_distractors) * chain_max <= task.n_vars ({n_vars}): every variable is assigned once")
        require(chains <= n_values, "task.n_distractors", n_distractors,
                f"at most task.n_values - 1 ({n_values - 1}): every chain has its own value")
        self.chain_min, self.chain_max, self.n_distractors, self.n_vars, self.n_values = \
            chain_min, chain_max, n_distractors, n_vars, n_values
        self.vocab = [PAD, BOS, "=", ",", "?", *NAMES[:n_vars], *(str(v) for v in range(n_values))]
        self.seq_len = 1 + 4 * chains * chain_max + 4 - 1  # statements "v = x ,", query "? v = a"

    def sample_grouped(self, rng, n):
        bos, eq, comma, query, var0 = 1, 2, 3, 4, 5
        value0 = var0 + self.n_vars
        chains, cmax = 1 + self.n_distractors, self.chain_max
        lengths = rng.integers(self.chain_min, cmax + 1, size=(n, chains))  # column 0: the main chain
        names = np.argsort(rng.random((n, self.n_vars)), axis=1)[:, : chains * cmax].reshape(n, chains, cmax) + var0
        values = np.argsort(rng.random((n, self.n_values)), axis=1)[:, :chains] + value0
        # statement (c, s) of every chain, as "name = source ,"; the source is the value or the previous name
        body = np.empty((n, chains, cmax, 4), dtype=np.int64)
        body[..., 0], body[..., 1], body[..., 3] = names, eq, comma
        body[..., 0, 2], body[..., 1:, 2] = values, names[..., :-1]
        # a uniform interleaving that keeps each chain's order: i.i.d. keys, sorted within each chain
        valid = np.arange(cmax)[None, None, :] < lengths[..., None]
        keys = np.sort(np.where(valid, rng.random((n, chains, cmax)), 2.0), axis=2).reshape(n, -1)
        order = np.argsort(keys, axis=1)
        body = body.reshape(n, chains * cmax, 4)[np.arange(n)[:, None], order].reshape(n, -1)
        total = lengths.sum(axis=1)
        last = names[np.arange(n), 0, lengths[:, 0] - 1]
        sequences, starts = [], []
        for i in range(n):
            seq = np.concatenate([[bos], body[i, : 4 * total[i]], [query, last[i], eq, values[i, 0]]])
            sequences.append(seq)
            starts.append(len(seq) - 1)
        inputs, targets = pack(sequences, starts, self.seq_len)
        return inputs, targets, lengths[:, 0].copy()
