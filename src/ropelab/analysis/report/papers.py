"""The papers' published values (``conf/paper_values.yaml``) and which of them belongs beside a table cell: an
entry matches a cell when every key of its ``match`` block equals the cell's config value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropelab.core.record import read_yaml
from ropelab.core.cli import CONF_DIR

PAPER_VALUES = CONF_DIR / "paper_values.yaml"


def load_paper_values(path: Path = PAPER_VALUES) -> list[dict]:
    """Every entry of every paper, each with its ``paper`` (the block's name) and ``source``."""
    data = read_yaml(path) or {}
    entries = []
    for paper, block in data.items():
        for e in (block or {}).get("entries", []) or []:
            entries.append({**e, "paper": paper, "source": block.get("source", paper)})
    return entries


def same_value(a: Any, b: Any) -> bool:
    """Equal as numbers when both read as numbers ("0.5" and 0.5), else as text."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def paper_for(entries: list[dict], config: dict[str, str], metric: str, derived: str | None = None) -> dict | None:
    for e in entries:
        if e.get("metric") != metric or e.get("derived") != derived:
            continue
        if all(k in config and same_value(config[k], v) for k, v in (e.get("match") or {}).items()):
            return e
    return None
