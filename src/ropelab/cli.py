"""Command-line checks that run before Hydra, so a wrong group choice is one line, not a Hydra report."""

from __future__ import annotations

import sys
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def group_choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_choices(argv: list[str]) -> None:
    """Exit with one line if ``group=choice`` names a choice that has no conf/<group>/<choice>.yaml."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or "." in key or "/" in key or not (CONF_DIR / key).is_dir() or value in ("", "null"):
            continue
        choices = group_choices(key)
        for choice in value.removeprefix("choice(").removesuffix(")").split(","):
            if choice.strip() not in choices:
                print(f"error: {key}={choice.strip()!r} is unknown: choose one of {', '.join(choices)}", file=sys.stderr)
                sys.exit(2)
