"""Lightning datamodule: training batches drawn on the fly, fixed validation / test / OOD sets.

Every batch comes from its own generator, seeded by ``(seed, split, index)`` with a different ``split``
word for train (0), validation (1), test (2) and OOD (3), so the splits can never share a seed. The
training batch at step ``i`` is a pure function of ``(seed, i)``: a resumed run sees exactly the batches an
uninterrupted one would, with no generator state to save.

``data.train_size=N`` trains on a fixed set of N examples instead (the PoPE paper's regime: its "1M" is the size
of a training set): drawn once, in chunks of ``TRAIN_SET_CHUNK`` examples seeded ``(seed, train, chunk)`` (the same
split word, so it never shares a seed with validation, test or OOD; the set does not depend on the batch size, and
a smaller N is a prefix of a larger one), kept as the smallest integer type that holds the vocabulary (N = 1M of
the paper's sizes: 2 × 51 bytes an example, ≈ 100 MB), then run through in epochs until ``trainer.max_steps``:
epoch e visits every example once, in an order drawn from ``(seed, train, e, 1)``, and the batch at step i is
examples ``i·B … (i+1)·B − 1`` of the epochs laid end to end (a batch may straddle two epochs). So it too is a
pure function of ``(seed, i)``, and a resume sees the batches of an uninterrupted run.
"""

from __future__ import annotations

import logging
import time
from typing import Iterator

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from ropelab.core.errors import require, require_int
from tasks.base import Task

SPLITS = {"train": 0, "val": 1, "test": 2, "ood": 3}
TRAIN_SET_CHUNK = 4096  # examples drawn per seed of a fixed training set (data.train_size)
EPOCH_ORDER = 1         # the fourth seed word of an epoch's order: (seed, train, epoch, 1), no chunk's seed

log = logging.getLogger("ropelab")


def split_seed(seed: int, split: str, index: int = 0) -> tuple[int, int, int]:
    """The generator seed words for one batch of one split (fixed length: SeedSequence ignores trailing zeros)."""
    return (int(seed), SPLITS[split], int(index))


def draw(task: Task, seed: int, split: str, n: int, index: int = 0, grouped: bool = False):
    rng = np.random.default_rng(np.random.SeedSequence(split_seed(seed, split, index)))
    return task.sample_grouped(rng, n) if grouped else task.sample(rng, n)


class TrainStream(IterableDataset):
    """Infinite stream of training batches, starting at ``start_step``."""

    def __init__(self, task: Task, seed: int, batch_size: int, start_step: int = 0):
        self.task, self.seed, self.batch_size, self.start_step = task, seed, batch_size, start_step

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        step = self.start_step
        while True:
            inputs, targets = draw(self.task, self.seed, "train", self.batch_size, index=step)
            yield torch.from_numpy(inputs), torch.from_numpy(targets)
            step += 1


def compact_dtype(vocab_size: int) -> type:
    """The smallest signed integer type that holds token ids below ``vocab_size`` and IGNORE (−100)."""
    return next(t for t in (np.int8, np.int16, np.int32, np.int64) if vocab_size - 1 <= np.iinfo(t).max)


def draw_train_set(task: Task, seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The fixed training set of ``size`` examples (inputs, targets): whole chunks of ``TRAIN_SET_CHUNK`` drawn with
    seeds ``(seed, train, chunk)``, the last one cut to size, kept as ``compact_dtype`` (token ids, IGNORE)."""
    dtype = compact_dtype(len(task.vocab))
    inputs = np.empty((size, task.seq_len), dtype=dtype)
    targets = np.empty((size, task.seq_len), dtype=dtype)
    for chunk, start in enumerate(range(0, size, TRAIN_SET_CHUNK)):  # whole chunks, the last one cut: prefixes
        n = min(TRAIN_SET_CHUNK, size - start)
        chunk_inputs, chunk_targets = draw(task, seed, "train", TRAIN_SET_CHUNK, index=chunk)
        inputs[start : start + n], targets[start : start + n] = chunk_inputs[:n], chunk_targets[:n]
    return inputs, targets


class FixedTrainSet(IterableDataset):
    """Infinite batches from a fixed training set, epochs laid end to end (the module's docstring), from
    ``start_step``. No ``__len__``, like ``TrainStream``: Lightning's epoch is the whole run, and these epochs are
    the set's."""

    def __init__(self, inputs: np.ndarray, targets: np.ndarray, seed: int, batch_size: int, start_step: int = 0):
        self.inputs, self.targets = inputs, targets
        self.seed, self.batch_size, self.start_step = seed, batch_size, start_step

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The order of epoch ``epoch``: a permutation of the set's indices."""
        rng = np.random.default_rng(np.random.SeedSequence((int(self.seed), SPLITS["train"], int(epoch), EPOCH_ORDER)))
        return rng.permutation(len(self.inputs))

    def indices(self, start_step: int = 0) -> Iterator[np.ndarray]:
        """The set's indices of each batch from ``start_step`` on."""
        size = len(self.inputs)
        epoch, offset = divmod(start_step * self.batch_size, size)
        order = self.epoch_order(epoch)
        while True:
            parts, need = [], self.batch_size
            while need:
                part = order[offset : offset + need]
                parts.append(part)
                need, offset = need - len(part), offset + len(part)
                if offset == size:
                    epoch, offset = epoch + 1, 0
                    order = self.epoch_order(epoch)
            yield np.concatenate(parts)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for index in self.indices(self.start_step):
            yield (torch.from_numpy(self.inputs[index].astype(np.int64)),
                   torch.from_numpy(self.targets[index].astype(np.int64)))


class TaskDataModule(L.LightningDataModule):
    """Batches of ``task`` (training, validation, test) and ``ood_task`` (OOD), as built by
    ``tasks.build_with_ood``."""

    def __init__(self, task: Task, ood_task: Task, seed: int, batch_size: int = 32, val_size: int = 512,
                 test_size: int = 512, ood_size: int = 512, eval_batch_size: int = 128, train_size: int | None = None):
        super().__init__()
        for key, value in dict(batch_size=batch_size, val_size=val_size, test_size=test_size, ood_size=ood_size,
                               eval_batch_size=eval_batch_size).items():
            require_int(value, f"data.{key}", 1)
        if train_size is not None:
            require_int(train_size, "data.train_size", 1, "an integer >= 1 or null")
        self.task, self.ood_task = task, ood_task
        self.seed, self.batch_size, self.eval_batch_size = seed, batch_size, eval_batch_size
        self.sizes = {"val": val_size, "test": test_size, "ood": ood_size}
        self.train_size = train_size
        self._fixed: dict[str, TensorDataset] = {}
        self._train_set: tuple[np.ndarray, np.ndarray] | None = None

    def train_set(self) -> tuple[np.ndarray, np.ndarray]:
        """The fixed training set (``data.train_size`` examples), drawn on first use and kept."""
        require(self.train_size is not None, "data.train_size", None, "an integer >= 1 for a fixed training set")
        if self._train_set is None:
            began = time.perf_counter()
            self._train_set = draw_train_set(self.task.for_split("train"), self.seed, self.train_size)
            log.info("training set: %d examples, drawn in %.1f s, %.0f MB", self.train_size,
                     time.perf_counter() - began, sum(a.nbytes for a in self._train_set) / 2**20)
        return self._train_set

    def fixed_set(self, split: str) -> TensorDataset:
        """The validation / test / OOD set: drawn once, in eval-batch-sized chunks, each with its own seed."""
        if split not in self._fixed:
            task = (self.ood_task if split == "ood" else self.task).for_split(split)
            parts = [draw(task, self.seed, split, min(self.eval_batch_size, self.sizes[split] - start),
                          index=i, grouped=True)
                     for i, start in enumerate(range(0, self.sizes[split], self.eval_batch_size))]
            self._fixed[split] = TensorDataset(*(torch.from_numpy(np.concatenate(arrays)) for arrays in zip(*parts)))
        return self._fixed[split]

    def train_batches(self, start_step: int = 0) -> IterableDataset:
        """The training batches from ``start_step`` on: drawn afresh, or from the fixed training set
        (``data.train_size``); a packed member (``ropelab.core.packed_launcher``) iterates them itself."""
        if self.train_size is not None:
            return FixedTrainSet(*self.train_set(), self.seed, self.batch_size, start_step)
        return TrainStream(self.task.for_split("train"), self.seed, self.batch_size, start_step)

    def train_dataloader(self):
        start = self.trainer.global_step if self.trainer is not None else 0
        return DataLoader(self.train_batches(start), batch_size=None)

    def val_dataloader(self):
        return DataLoader(self.fixed_set("val"), batch_size=self.eval_batch_size)

    def test_dataloader(self):
        return [DataLoader(self.fixed_set(split), batch_size=self.eval_batch_size) for split in ("test", "ood")]
