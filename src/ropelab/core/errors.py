"""One-line configuration errors and discovery by presence, shared by ``tasks/`` and ``ropelab``.

Why here: the task generators (``tasks/``, NumPy only) and the positional schemes (``ropelab.core.positional``,
torch) both check their options and both are found by the files that exist, but neither should import the
other: a scheme has nothing to do with the task package, and a task must not pull in torch. This module imports
nothing of either (only the standard library), and ``ropelab`` is a namespace package with no ``__init__``, so
``import ropelab.core.errors`` loads this file alone. The dependencies point one way: ``tasks`` → here ←
``ropelab.core.positional``, ``ropelab.core.config``; ``ropelab.core.data`` → ``tasks``.
"""

from __future__ import annotations

import importlib
import pkgutil


class ConfigError(ValueError):
    """A bad configuration value; the message is one line naming the key and what is allowed."""


def require(ok: bool, key: str, value, allowed: str) -> None:
    """Raise ConfigError("key=value is invalid: allowed") unless ok."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {allowed}")


def require_int(value, key: str, low: int, allowed: str | None = None) -> int:
    """An integer (not a bool) >= low, else a one-line ConfigError naming the key."""
    require(isinstance(value, int) and not isinstance(value, bool) and value >= low, key, value,
            allowed or f"an integer >= {low}")
    return value


def require_ordered(low, high, low_key: str, high_key: str) -> int:
    """``high`` an integer >= ``low`` (a range's two ends, ``low`` checked already); a range the wrong way round
    names both ends, since either may be the one the user set."""
    require_int(high, high_key, 0)
    if high < low:
        raise ConfigError(f"{low_key}={low!r} is above {high_key}={high!r}: a range needs {low_key} <= {high_key} "
                          f"(change either)")
    return high


def discover(package: str, base: type) -> dict[str, type]:
    """{module name: class} for every module of ``package`` that defines a subclass of ``base``.

    A plugin is its file: ``tasks/<name>.py`` or ``ropelab/positional/<name>.py`` defining one subclass is the
    plugin ``<name>`` (its class takes that ``name``; see ``Task`` and ``PositionalScheme``). Modules that
    define none (helpers such as ``rotary``) are not plugins; one that defines two is refused."""
    found: dict[str, type] = {}
    for info in sorted(pkgutil.iter_modules(importlib.import_module(package).__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package}.{info.name}")
        defined = [obj for obj in vars(module).values() if isinstance(obj, type) and issubclass(obj, base)
                   and obj is not base and obj.__module__ == module.__name__]
        if len(defined) > 1:
            raise TypeError(f"{module.__name__} defines {len(defined)} {base.__name__} classes "
                            f"({', '.join(c.__name__ for c in defined)}): one per module, named by the file")
        if defined:
            found[info.name] = defined[0]
    return found
