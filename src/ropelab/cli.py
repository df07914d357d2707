"""Command-line checks that run before Hydra, so a wrong group choice or a misspelled key is one line."""

from __future__ import annotations

import sys
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def group_choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def check_overrides(argv: list[str]) -> None:
    """Exit with one line if ``group=choice`` names no conf/<group>/<choice>.yaml, or ``a.b=v`` names no key."""
    groups, dotted = [], []
    for arg in argv:
        if arg.startswith("-"):
            continue
        key, sep, value = arg.partition("=")
        if not sep or key.startswith(("+", "~", "hydra")):
            continue
        if "." not in key and "/" not in key and (CONF_DIR / key).is_dir():
            if value not in ("", "null"):
                choices = group_choices(key)
                for choice in value.removeprefix("choice(").removesuffix(")").split(","):
                    if choice.strip() not in choices:
                        _fail(f"{key}={choice.strip()!r} is unknown: choose one of {', '.join(choices)}")
                groups.append(f"{key}={value.removeprefix('choice(').split(',')[0].removesuffix(')')}")
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
            valid = ", ".join(map(str, node.keys())) if OmegaConf.is_dict(node) else "(none)"
            _fail(f"{key} is not a known key (add it with +{key}=… if you mean to): valid keys under "
                  f"{parent or 'the root'} are {valid}")
