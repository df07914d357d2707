"""Command-line checks that run before Hydra, so a wrong group choice or a misspelled key is one line.

Hydra's own override parser reads the command line (``choice(…)``, ``range(…)``, quoting, ``+``/``~``), and
where it refuses an override its message is the error, on one line. Two checks are ours, because Hydra's errors
come too late or say less: every value of a group axis must name a conf/<group>/<choice>.yaml (Hydra finds a
missing one only when that sweep job starts, after the others trained), and every ``a.b=v`` must name a key
(Hydra's error does not list the valid ones). The commands' own flags are argparse's; ``at_least`` bounds their
counts.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable
from pathlib import Path

# registers ${ropelab_job_name_excludes:}, which conf/config.yaml names
from ropelab.core import identity  # noqa: F401,E402

REPO = Path(__file__).resolve().parents[3]  # the checkout: src/ropelab/core/cli.py
CONF_DIR = REPO / "conf"


# the config groups of a run; conf/ holds other folders (claims/, card/) that the claims engine and the card read
RUN_GROUPS = ("task", "pos", "model", "trainer", "logger", "experiment")


def at_least(low: float, kind: type = int) -> Callable[[str], float]:
    """An argparse type for the commands' counts and bounds: below ``low``, argparse's error names the flag and the
    bound, and the command exits 2 before it reads or trains anything."""
    def parse(text: str) -> float:
        value = kind(text)  # not a number: argparse's own "invalid int value: 'x'"
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is invalid: a number >= {low:g}")
        return value
    parse.__name__ = kind.__name__
    return parse


def group_choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def override_values(override) -> list:
    """The values of one parsed override: a sweep's (``glob(…)`` over a group: the matching conf/<group>/*.yaml,
    which Hydra expands only when it launches), else the one value."""
    from hydra.core.override_parser.types import Glob

    if not override.is_sweep_override():
        return [override.value()]
    if isinstance(override.value(), Glob):
        return override.value().filter(group_choices(override.key_or_group))
    return list(override.sweep_string_iterator())


def sweep_product(lines: list[str]) -> list[list[str]]:
    """The overrides of every job a basic sweeper launches over ``lines`` (a preset's ``hydra.sweeper.params``, then
    the command line): a later value for a key replaces an earlier one, then the product, in Hydra's job order."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser

    axes: dict[str, list[str]] = {}
    for o in OverridesParser.create().parse_overrides(lines):
        key = o.get_key_element()
        axes[key] = ([f"{key}={v}" for v in override_values(o)] if o.is_sweep_override()
                     else [f"{key}={o.get_value_element_as_str()}"])
    return [list(job) for job in itertools.product(*axes.values())]


def axis_values(key: str, value) -> list:
    """The values of ``key=value`` as Hydra reads them (a preset's ``hydra.sweeper.params`` axis, say)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return override_values(OverridesParser.create().parse_override(f"{key}={value}"))


def check_pack(value) -> int:
    """``hydra.launcher.pack`` (``hydra/launcher=packed``): an integer >= 2, else one line naming the key."""
    from ropelab.core.errors import require_int

    return require_int(value, "hydra.launcher.pack", 2,
                       "an integer >= 2, the most jobs trained together (1 packs nothing: leave out hydra/launcher=packed)")


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def check_overrides(argv: list[str]) -> None:
    """Exit with one line if an override does not parse, ``group=choice`` names no conf/<group>/<choice>.yaml,
    or ``a.b=v`` names no key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:  # flags (-m, --cfg job) and their values are Hydra's
        overrides = OverridesParser.create().parse_overrides([a for a in argv if "=" in a and not a.startswith("-")])
    except OverrideParseException as err:
        _fail(f"{err.override}: " + " ".join(line.strip() for line in err.message.splitlines() if line.strip()))
    groups, dotted = [], []
    for override in overrides:
        key = override.key_or_group
        if key == "hydra.launcher.pack":  # else Hydra starts the sweep and its launcher refuses it after the banner
            from ropelab.core.errors import ConfigError

            try:
                [check_pack(value) for value in override_values(override)]
            except ConfigError as err:
                _fail(str(err))
        if override.is_add() or override.is_force_add() or override.is_delete() or key.startswith("hydra"):
            continue
        if "." not in key and "/" not in key and key not in RUN_GROUPS and (CONF_DIR / key).is_dir():
            _fail(f"{key}= is not a config group of a run (conf/{key}/ is read by its own command): the groups are "
                  f"{', '.join(RUN_GROUPS)}")
        if "." not in key and "/" not in key and (CONF_DIR / key).is_dir():
            values = override_values(override)
            if not values or values[0] in (None, ""):  # group=null
                continue
            choices = group_choices(key)
            for choice in values:
                if choice not in choices:
                    _fail(f"{key}={choice!r} is unknown: choose one of {', '.join(choices)}")
            groups.append(f"{key}={values[0]}")
        elif "." in key:
            dotted.append(key)
    if dotted:
        _check_keys_exist(groups, dotted)


def _check_keys_exist(groups: list[str], keys: list[str]) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=groups)
    for key in keys:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        if node is None or not OmegaConf.is_dict(node) or leaf not in node:
            # no "+key=…" hint: the schema, the task and the scheme take no key they do not know either
            names = list(map(str, node.keys())) if OmegaConf.is_dict(node) else []
            close = [f"{parent}.{c}" if parent else c for c in difflib.get_close_matches(leaf, names, n=1)]
            _fail(f"{key} is not a known key{f' (did you mean {close[0]}?)' if close else ''}: valid keys "
                  f"under {parent or 'the root'} are {', '.join(names) or '(none)'}")


def as_typed(message: str, overrides: list[str]) -> str:
    """A ConfigError's ``key=value`` with the value as the command line wrote it (``trainer.max_steps=1e3``, which
    YAML reads as 1000.0; ``[1.0,0.5]``, which the message shows as ``[1.0, 0.5]``), so the line names what the
    user typed, once."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    key, sep, rest = message.partition("=")
    if not sep or " " in key:
        return message
    for override in overrides:
        typed_key, _, typed = override.partition("=")
        if typed_key.lstrip("+~") != key or rest.startswith(f"{typed} "):
            continue
        try:
            value = OverridesParser.create().parse_override(override).value()
        except Exception:  # Hydra refused it earlier than this message could come
            continue
        for shown in (repr(value), str(value)):
            if rest.startswith(f"{shown} ") or rest == shown:
                return message if shown.strip("'\"") == typed else f"{key}={typed}{rest[len(shown):]}"
    return message


def run_help(text: str) -> str:
    """Hydra's ``--help`` with the config groups of a run only: it lists every folder of conf/ as a group."""
    others = tuple(f"{p.name}:" for p in CONF_DIR.iterdir() if p.is_dir() and p.name not in (*RUN_GROUPS, "hydra"))
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(others))

