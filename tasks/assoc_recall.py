"""assoc_recall — multi-query associative recall (MQAR, Zoology): look values up by key after one pass.

One decoded example (4 pairs, 2 queries for brevity; the default is 4–16 pairs and 4 queries):

    <bos> k12 v3 k40 v7 k5 v3 k33 v61  >  k40 v7 k12 v3
          key-value pairs              sep query answer query answer (loss on the answers only)

Keys (``k0`` … ``k<n_keys-1>``) and values (``v0`` … ``v<n_values-1>``) are separate tokens. The keys of one
example are distinct (drawn without replacement), values are drawn with replacement (they may repeat).
After the separator come ``n_queries`` distinct keys from the pairs, each followed by its value; the loss
covers the value tokens only (the query keys are inputs). The number of pairs is uniform in
``pairs_min``–``pairs_max``; ``pairs_max`` may not exceed ``n_keys``, ``n_queries`` may not exceed ``pairs_min``.
Group key: the number of pairs. OOD split: more pairs (17–32; training uses 4–16).
"""

from __future__ import annotations

import numpy as np

from ropelab.core.errors import require, require_int, require_ordered
from tasks.base import BOS, IGNORE, PAD, Task, pack


class AssocRecall(Task):
    group_name = "pairs"
    length_knobs = ("pairs_min", "pairs_max")  # scaled by ropelab.experiments.extrapolate

    def __init__(self, n_keys: int = 64, n_values: int = 64, pairs_min: int = 4, pairs_max: int = 16,
                 n_queries: int = 4):
        require_int(n_keys, "task.n_keys", 1)
        require_int(n_values, "task.n_values", 1)
        require_int(pairs_min, "task.pairs_min", 1)
        require_ordered(pairs_min, pairs_max, "task.pairs_min", "task.pairs_max")
        require(pairs_max <= n_keys, "task.pairs_max", pairs_max,
                f"at most task.n_keys ({n_keys}): the keys of one example are distinct")
        require_int(n_queries, "task.n_queries", 1)
        require(n_queries <= pairs_min, "task.n_queries", n_queries,
                f"an integer in 1..task.pairs_min ({pairs_min}): queries are distinct keys of the pairs")
        self.n_keys, self.n_values, self.pairs_min, self.pairs_max, self.n_queries = \
            n_keys, n_values, pairs_min, pairs_max, n_queries
        self.vocab = [PAD, BOS, ">", *(f"k{i}" for i in range(n_keys)), *(f"v{i}" for i in range(n_values))]
        self.seq_len = 1 + 2 * pairs_max + 1 + 2 * n_queries - 1  # inputs drop the last answer token

    def sample_grouped(self, rng, n):
        bos, sep, key0 = 1, 2, 3
        value0 = key0 + self.n_keys
        pairs = rng.integers(self.pairs_min, self.pairs_max + 1, size=n)
        keys = np.argsort(rng.random((n, self.n_keys)), axis=1)[:, : self.pairs_max]
        values = rng.integers(0, self.n_values, size=(n, self.pairs_max))
        # queries: n_queries distinct pair indices below pairs[i] (indices past it sort last)
        order = rng.random((n, self.pairs_max)) + (np.arange(self.pairs_max)[None, :] >= pairs[:, None])
        chosen = np.argsort(order, axis=1)[:, : self.n_queries]
        rows = np.arange(n)[:, None]
        body = np.stack([keys + key0, values + value0], axis=2).reshape(n, -1)
        queries = np.stack([keys[rows, chosen] + key0, values[rows, chosen] + value0], axis=2).reshape(n, -1)
        sequences, starts = [], []
        for i in range(n):
            seq = np.concatenate([[bos], body[i, : 2 * pairs[i]], [sep], queries[i]])
            sequences.append(seq)
            starts.append(len(seq) - 2 * self.n_queries)
        inputs, targets = pack(sequences, starts, self.seq_len)
        key_slots = np.asarray(starts)[:, None] - 1 + 2 * np.arange(self.n_queries)[None, :]
        targets[rows, key_slots] = IGNORE  # the query keys are inputs, not answers
        return inputs, targets, pairs
