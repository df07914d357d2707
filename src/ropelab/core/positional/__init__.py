"""Positional schemes, one module each, built by name from the ``pos`` config group.

A scheme is two files: ``positional/<name>.py`` defining one ``PositionalScheme`` subclass (its ``name`` is
the file's) and ``conf/pos/<name>.yaml`` with its options; nothing lists the schemes (README, "Extending").
The ``pos`` node also holds ``momentum``, which wraps every scheme and is applied by the attention
(``positional.momentum``), so ``build`` leaves it out of the scheme's options.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

from ropelab.core.errors import ConfigError, discover
from ropelab.core.positional import momentum
from ropelab.core.positional.base import PositionalScheme


def registry() -> dict[str, type[PositionalScheme]]:
    return discover("ropelab.core.positional", PositionalScheme)


def names() -> list[str]:
    return list(registry())


def build(pos: Mapping[str, Any], head_dim: int, n_heads: int, max_len: int) -> PositionalScheme:
    """Build the scheme named ``pos["name"]``; the other keys, but for ``momentum``, are its options."""
    options = {key: value for key, value in pos.items() if key != momentum.KEY}
    name = options.pop("name", None)
    classes = registry()
    if name not in classes:
        raise ConfigError(f"pos={name!r} is unknown: choose one of {', '.join(classes)}")
    cls = classes[name]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "head_dim", "n_heads", "max_len"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        wrapper_keys = {f"{momentum.KEY}.{option}" for option in momentum.OPTIONS}
        raise ConfigError(f"pos.{unknown[0]} is not an option of pos={name}: valid keys are "
                          f"{', '.join(sorted(accepted | wrapper_keys))}")
    return cls(head_dim, n_heads, max_len, **options)


__all__ = ["PositionalScheme", "build", "names", "registry"]
