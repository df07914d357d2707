"""The task interface shared by every generator in this package (NumPy only, no torch).

A task is a small object with a vocabulary and ``sample(rng, n) -> (inputs, targets)``:
int64 arrays of shape ``(n, seq_len)``. ``targets[i, j]`` is the token that should follow
``inputs[i, :j+1]`` where a loss is taken, and ``IGNORE`` (-100) everywhere else. Sequences
shorter than ``seq_len`` are right-padded with ``<pad>`` (id 0), which never carries a loss.

``sample_grouped`` also returns one integer per example (the gap, depth, number of terms, …:
``group_name`` says which) so accuracy can be reported per length or depth.
"""

from __future__ import annotations

from typing import ClassVar, Sequence

import numpy as np

IGNORE = -100
PAD = "<pad>"
BOS = "<bos>"


class Task:
    """Base class: subclasses set ``vocab``/``seq_len`` in ``__init__`` and implement ``sample_grouped``."""

    name: ClassVar[str] = ""  # the module's name: a task is its file, tasks/<name>.py
    group_name: ClassVar[str] = "length"
    # the options that set the task's length, scaled together by a length factor (ropelab.experiments.extrapolate); empty: none
    length_knobs: ClassVar[tuple[str, ...]] = ()
    vocab: list[str]
    seq_len: int

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.name = cls.__module__.rpartition(".")[2]

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        inputs, targets, _ = self.sample_grouped(rng, n)
        return inputs, targets

    def sample_grouped(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def shortcuts(self) -> dict[str, float]:
        """Expected exact match of named strategies that skip what the task is about (indirect indexing's copying of
        the source letter), read like the guess floor: a model there has not learned the task. {}: none named."""
        return {}

    def for_split(self, split: str) -> "Task":
        """The task to draw ``split`` ("train", "val", "test", "ood") from; corpus tasks override this."""
        return self

    def decode(self, ids: Sequence[int], sep: str = " ") -> str:
        return sep.join(self.vocab[int(i)] for i in ids if int(i) >= 0 and int(i) != 0)

    def decode_example(self, inputs: np.ndarray, targets: np.ndarray) -> tuple[str, str]:
        """(prompt + answer as text, answer alone as text) for one example."""
        answer_pos = np.flatnonzero(targets != IGNORE)
        full = list(inputs[: answer_pos[-1] + 1]) + [targets[answer_pos[-1]]] if len(answer_pos) else list(inputs)
        return self.decode(full), self.decode(targets[answer_pos])


def pack(sequences: Sequence[Sequence[int]], answer_starts: Sequence[int], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Turn full token sequences into next-token (inputs, targets); the loss covers seq[answer_start:]."""
    n = len(sequences)
    inputs = np.zeros((n, seq_len), dtype=np.int64)
    targets = np.full((n, seq_len), IGNORE, dtype=np.int64)
    for i, (seq, start) in enumerate(zip(sequences, answer_starts)):
        seq = np.asarray(seq, dtype=np.int64)
        if len(seq) - 1 > seq_len:
            raise ValueError(f"sequence of {len(seq)} tokens does not fit seq_len={seq_len} + 1")
        inputs[i, : len(seq) - 1] = seq[:-1]
        targets[i, start - 1 : len(seq) - 1] = seq[start:]
    return inputs, targets
