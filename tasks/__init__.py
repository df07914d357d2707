"""Task generators for ropelab: pure Python/NumPy, one file per task, built by name.

    >>> import numpy as np, tasks
    >>> task = tasks.build("bio_rotation", motif_len=4)
    >>> inputs, targets = task.sample(np.random.default_rng(0), 2)

Adding a task: write ``tasks/<name>.py`` with a ``Task`` subclass whose ``name`` is ``<name>``,
list the module in ``_MODULES`` and add ``conf/task/<name>.yaml``.
"""

from __future__ import annotations


from tasks.base import IGNORE, ConfigError, Task, discover, pack

_MODULES = [
    "bio_rotation",
    "dyck3",
    "mod_arith",
    "indirect_indexing",
    "assoc_recall",
    "variable_tracking",
    "global_counting",
    "mean_pooling",
    "code_lm",
]


def registry() -> dict[str, type[Task]]:
    return discover("tasks", _MODULES, Task)


def names() -> list[str]:
    return list(_MODULES)


def build(name: str, **params) -> Task:
    """Build task ``name`` with its parameters; unknown names or keys raise a one-line ConfigError."""
    classes = registry()
    if name not in classes:
        raise ConfigError(f"task={name!r} is unknown: choose one of {', '.join(sorted(classes))}")
    cls = classes[name]
    try:
        return cls(**params)
    except TypeError as err:  # an unexpected keyword: name it and list what the task takes
        import inspect

        allowed = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        raise ConfigError(f"task.{name}: {err}; valid keys: {', '.join(allowed)}") from None


__all__ = ["IGNORE", "ConfigError", "Task", "build", "names", "pack", "registry"]
