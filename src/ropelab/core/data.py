"""Lightning datamodule: training batches drawn on the fly, fixed validation / test / OOD sets.

Every batch comes from its own generator, seeded by ``(seed, split, index)`` with a different ``split``
word for train (0), validation (1), test (2) and OOD (3), so the splits can never share a seed. The
training batch at step ``i`` is a pure function of ``(seed, i)``: a resumed run sees exactly the batches an
uninterrupted one would, with no generator state to save.
"""

from __future__ import annotations

from typing import Iterator

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from ropelab.core.errors import require
from tasks.base import Task

SPLITS = {"train": 0, "val": 1, "test": 2, "ood": 3}


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


class TaskDataModule(L.LightningDataModule):
    """Batches of ``task`` (training, validation, test) and ``ood_task`` (OOD), as built by
    ``tasks.build_with_ood``."""

    def __init__(self, task: Task, ood_task: Task, seed: int, batch_size: int = 32, val_size: int = 512,
                 test_size: int = 512, ood_size: int = 512, eval_batch_size: int = 128):
        super().__init__()
        for key, value in dict(batch_size=batch_size, val_size=val_size, test_size=test_size, ood_size=ood_size,
                               eval_batch_size=eval_batch_size).items():
            require(isinstance(value, int) and not isinstance(value, bool) and value >= 1, f"data.{key}", value,
                    "an integer >= 1")
        self.task, self.ood_task = task, ood_task
        self.seed, self.batch_size, self.eval_batch_size = seed, batch_size, eval_batch_size
        self.sizes = {"val": val_size, "test": test_size, "ood": ood_size}
        self._fixed: dict[str, TensorDataset] = {}

    def fixed_set(self, split: str) -> TensorDataset:
        """The validation / test / OOD set: drawn once, in eval-batch-sized chunks, each with its own seed."""
        if split not in self._fixed:
            task = (self.ood_task if split == "ood" else self.task).for_split(split)
            parts = [draw(task, self.seed, split, min(self.eval_batch_size, self.sizes[split] - start),
                          index=i, grouped=True)
                     for i, start in enumerate(range(0, self.sizes[split], self.eval_batch_size))]
            self._fixed[split] = TensorDataset(*(torch.from_numpy(np.concatenate(arrays)) for arrays in zip(*parts)))
        return self._fixed[split]

    def train_dataloader(self):
        start = self.trainer.global_step if self.trainer is not None else 0
        return DataLoader(TrainStream(self.task.for_split("train"), self.seed, self.batch_size, start),
                          batch_size=None)

    def val_dataloader(self):
        return DataLoader(self.fixed_set("val"), batch_size=self.eval_batch_size)

    def test_dataloader(self):
        return [DataLoader(self.fixed_set(split), batch_size=self.eval_batch_size) for split in ("test", "ood")]
