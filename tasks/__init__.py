"""Task generators for ropelab: pure Python/NumPy, one file per task, built by name.

    >>> import numpy as np, tasks
    >>> task = tasks.build("bio_rotation", motif_len=4)
    >>> inputs, targets = task.sample(np.random.default_rng(0), 2)

A task is two files: ``tasks/<name>.py`` defining one ``Task`` subclass (its ``name`` is the file's) and
``conf/task/<name>.yaml`` with its options; nothing lists the tasks (README, "Extending").
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

from ropelab.core.errors import ConfigError, discover
from tasks.base import IGNORE, Task, pack


def registry() -> dict[str, type[Task]]:
    return discover("tasks", Task)


def names() -> list[str]:
    return list(registry())


def build(name: str, **params) -> Task:
    """Build task ``name`` with its parameters; unknown names or keys raise a one-line ConfigError."""
    classes = registry()
    if name not in classes:
        raise ConfigError(f"task={name!r} is unknown: choose one of {', '.join(classes)}")
    cls = classes[name]
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    if unknown := [k for k in params if k not in allowed]:  # before the call: its TypeError names the class
        raise ConfigError(f"task.{unknown[0]} is not an option of task={name}: valid keys are {', '.join(allowed)}")
    return cls(**params)


def from_config(task_cfg: Mapping[str, Any], ood: bool = False) -> Task:
    """A run's ``task`` config → its task; with ``ood``, the OOD split's (the config's ``ood`` overrides applied)."""
    params = dict(task_cfg)
    name = params.pop("name", None)
    overrides = params.pop("ood", None) or {}
    return build(name, **({**params, **overrides} if ood else params))


def build_with_ood(task_cfg: Mapping[str, Any]) -> tuple[Task, Task]:
    """A run's ``task`` config → (in-distribution task, OOD task)."""
    return from_config(task_cfg), from_config(task_cfg, ood=True)


__all__ = ["IGNORE", "ConfigError", "Task", "build", "build_with_ood", "from_config", "names", "pack", "registry"]
