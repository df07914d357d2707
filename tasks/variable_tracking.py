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
``format="adjacent"`` writes the same statements without ``=`` and ``,``, so a value (or a source variable) sits
right after its name, as in associative recall's ``k v`` pairs; the query ``? z`` is followed by the answer:

    <bos> q 4 x 3 y x Q q z y ? z 3

With ``=`` between them, a value is two tokens after its name, which a one-token shift (a previous-token head,
momentum's q_t − q_{t−1}) does not reach; the adjacent format removes that obstacle and keeps the chains.
Group key: the main chain's length (the number of hops). OOD split: longer chains (5–8; training uses 1–4).
"""

from __future__ import annotations

import string

import numpy as np

from ropelab.core.errors import require, require_int, require_ordered
from tasks.base import BOS, PAD, Task, pack

NAMES = string.ascii_lowercase + string.ascii_uppercase
FORMATS = ("equals", "adjacent")  # "x = 3 ," | "x 3"


class VariableTracking(Task):
    group_name = "chain"
    length_knobs = ("chain_min", "chain_max")  # scaled by ropelab.experiments.extrapolate

    def __init__(self, chain_min: int = 1, chain_max: int = 4, n_distractors: int = 3, n_vars: int = 52,
                 n_values: int = 10, format: str = "equals"):
        require(format in FORMATS, "task.format", format, f"one of {', '.join(FORMATS)}")
        require_int(chain_min, "task.chain_min", 1)
        require_ordered(chain_min, chain_max, "task.chain_min", "task.chain_max")
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
        self.format = format
        self.vocab = [PAD, BOS, "=", ",", "?", *NAMES[:n_vars], *(str(v) for v in range(n_values))]
        # statements "v = x ," and query "? v = a" (equals) or "v x" and "? v a" (adjacent); inputs drop the answer
        self.statement_len, query_len = (4, 4) if format == "equals" else (2, 3)
        self.seq_len = 1 + self.statement_len * chains * chain_max + query_len - 1

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
        if self.format == "adjacent":
            body = body.reshape(n, -1, 4)[..., [0, 2]].reshape(n, -1)
        width = self.statement_len
        total = lengths.sum(axis=1)
        last = names[np.arange(n), 0, lengths[:, 0] - 1]
        sequences, starts = [], []
        for i in range(n):
            asked = [query, last[i], eq, values[i, 0]] if width == 4 else [query, last[i], values[i, 0]]
            seq = np.concatenate([[bos], body[i, : width * total[i]], asked])
            sequences.append(seq)
            starts.append(len(seq) - 1)
        inputs, targets = pack(sequences, starts, self.seq_len)
        return inputs, targets, lengths[:, 0].copy()
