"""dyck3 — Dyck-3 completion (Bifocal paper): close every bracket a prefix leaves open, in the right order.

One decoded example (depth 3, prefix of 9 brackets):

    <bos> ( [ ] { ( ) [ ] (  >  ) } )
          prefix               sep answer (loss only here)

Three bracket types ``() [] {}``. The prefix is a valid Dyck-3 prefix of ``len_min``–``len_max`` brackets that
ends with ``depth`` brackets still open (``depth`` uniform in ``depth_min``–``depth_max``); the answer is the
unique shortest closure: the matching closers of the open brackets, innermost first, so its length is the
depth. The prefix never nests deeper than ``depth_max`` anywhere, so a deeper OOD split really is deeper.
Given (depth, length) the prefix's up/down shape is uniform over all valid shapes (exact path counting, no
rejection); every opening bracket's type is uniform.
Group key: the depth. OOD split: deeper (depth 9–16 by default; training uses 1–8).
"""

from __future__ import annotations

import numpy as np

from ropelab.core.errors import require, require_int, require_ordered
from tasks.base import BOS, PAD, Task, pack

OPEN, CLOSE = "([{", ")]}"


class Dyck3(Task):
    group_name = "depth"
    length_knobs = ("len_min", "len_max")  # scaled by ropelab.experiments.extrapolate

    def __init__(self, depth_min: int = 1, depth_max: int = 8, len_min: int = 8, len_max: int = 48):
        require_int(depth_min, "task.depth_min", 1)
        require_ordered(depth_min, depth_max, "task.depth_min", "task.depth_max")
        require_int(len_min, "task.len_min", 1)
        require_int(len_max, "task.len_max", max(len_min + 1, depth_max),
             f"an integer > task.len_min ({len_min}) and >= task.depth_max ({depth_max}), at most 1000")
        require(len_max <= 1000, "task.len_max", len_max, "at most 1000")
        self.depth_min, self.depth_max, self.len_min, self.len_max = depth_min, depth_max, len_min, len_max
        self.vocab = [PAD, BOS, *OPEN, *CLOSE, ">"]
        self.seq_len = 1 + len_max + 1 + depth_max - 1  # inputs drop the last answer token
        # paths[d, r, h]: number of r-step up/down paths from height h to height d that stay within [0, depth_max]
        top = depth_max
        paths = np.zeros((top + 1, len_max + 1, top + 2))
        paths[np.arange(top + 1), 0, np.arange(top + 1)] = 1.0
        for r in range(1, len_max + 1):
            paths[:, r, 1: top + 1] = paths[:, r - 1, : top] + paths[:, r - 1, 2: top + 2]
            paths[:, r, 0] = paths[:, r - 1, 1]
        with np.errstate(divide="ignore", invalid="ignore"):  # P(open | d, r steps left, h)
            self._p_open = np.nan_to_num(paths[:, :-1, 1:] / paths[:, 1:, :-1])

    def sample_grouped(self, rng, n):
        bos, open0, close0, sep = 1, 2, 5, 8
        depth = rng.integers(self.depth_min, self.depth_max + 1, size=n)
        lo = np.maximum(self.len_min, depth)
        k_lo, k_hi = (lo - depth + 1) // 2, (self.len_max - depth) // 2  # k = number of closing brackets
        length = depth + 2 * rng.integers(k_lo, k_hi + 1)
        steps, top = int(length.max()), self.depth_max
        # 1. the up/down shape, step by step for the whole batch: P(open) from the exact path counts
        p_open = self._p_open.ravel()
        base = depth * (self.len_max * (top + 1)) - (top + 1)  # [depth, left - 1, h] is at base + left*(top+1) + h
        u = rng.random((steps, n))
        active = np.arange(steps)[:, None] < length[None, :]  # (steps, n), step-major for contiguous rows
        index = base[None, :] + np.maximum(length[None, :] - np.arange(steps)[:, None], 1) * (top + 1)
        up = np.zeros((steps, n), dtype=bool)
        height = np.zeros(n, dtype=np.int64)
        for t in range(steps):
            go = np.less(u[t], p_open[index[t] + height], out=up[t])
            go &= active[t]
            height += go
            height -= active[t] & ~go
        up = up.T
        # 2. bracket types: each opening one uniform; a closing one matches the last opening at its level
        level = np.cumsum(np.where(up, 1, -1), axis=1) - np.where(up, 1, -1)  # height before each step
        level = np.where(up, level, level - 1)  # the level an opening bracket starts / a closing one returns to
        opens_at = up[:, :, None] & (level[:, :, None] == np.arange(top + 1))
        last_open = np.where(opens_at, np.arange(steps)[None, :, None], -1)
        last_open = np.maximum.accumulate(last_open, axis=1)  # [i, t, h]: latest opening at level h up to step t
        types = rng.integers(0, 3, size=(n, steps))
        rows = np.arange(n)[:, None]
        match = last_open[rows, np.arange(steps)[None, :], np.clip(level, 0, top)]
        tokens = np.where(up, open0 + types, close0 + types[rows, np.maximum(match, 0)])
        stack = types[rows, np.maximum(last_open[np.arange(n), length - 1], 0)]  # [i, h]: open bracket type at level h
        sequences, starts = [], []
        for i in range(n):
            closure = close0 + stack[i, : depth[i]][::-1]
            seq = np.concatenate([[bos], tokens[i, : length[i]], [sep], closure])
            sequences.append(seq)
            starts.append(len(seq) - depth[i])
        inputs, targets = pack(sequences, starts, self.seq_len)
        return inputs, targets, depth
