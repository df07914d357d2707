"""Positional schemes, one module each, built by name from the ``pos`` config group.

Adding a scheme: write ``positional/<name>.py`` with a ``PositionalScheme`` subclass whose ``name`` is
``<name>``, list it in ``_MODULES`` and add ``conf/pos/<name>.yaml``.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

from ropelab.positional.base import PositionalScheme
from tasks.base import ConfigError, discover

_MODULES = [
    "rope",
    "spectral",
    "bifocal",
    "pope",
    "rope_half",
    "alibi",
    "nope",
    "learned_abs",
    "sinusoidal",
]


def registry() -> dict[str, type[PositionalScheme]]:
    return discover("ropelab.positional", _MODULES, PositionalScheme)


def names() -> list[str]:
    return list(_MODULES)


def build(pos: Mapping[str, Any], head_dim: int, n_heads: int, max_len: int) -> PositionalScheme:
    """Build the scheme named ``pos["name"]``; the other keys are its options (``momentum.gamma`` included)."""
    options = dict(pos)
    name = options.pop("name", None)
    classes = registry()
    if name not in classes:
        raise ConfigError(f"pos={name!r} is unknown: choose one of {', '.join(sorted(classes))}")
    momentum_cfg = options.pop("momentum", None) or {}
    gamma = momentum_cfg.get("gamma", 0.0)
    cls = classes[name]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "head_dim", "n_heads", "max_len", "momentum_gamma"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigError(f"pos.{unknown[0]} is not an option of pos={name}: valid keys are "
                          f"{', '.join(sorted(accepted | {'momentum.gamma'}))}")
    return cls(head_dim, n_heads, max_len, momentum_gamma=gamma, **options)


__all__ = ["PositionalScheme", "build", "names", "registry"]
