"""Records as the card reads them: each committed record's config over today's defaults, and which records are the
same job as a card job (identity: every key but how the job ran and bookkeeping) or the same setting (for the seed
SD and the wall time: every key but the seed and the keys that never define a table column)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Iterable

from omegaconf import OmegaConf

from ropelab.analysis.report.sweep import IGNORED_KEYS, IGNORED_PREFIXES
from ropelab.core import identity, record
from ropelab.core.config import compose, flatten
from ropelab.core.record import Record

# how a job ran and where it was kept, not what it computed (ropelab.core.identity's lists), but for the optimiser's
# kernel and the precision, which the card compares
HOW_IT_RAN = {*identity.BOOKKEEPING, *(k for k in identity.COMPUTE if k not in ("optim.fused", "trainer.precision"))}
HOW_IT_RAN_PREFIXES = ("logger.", "hydra.")


@functools.cache
def defaults(task: str, pos: str) -> dict[str, Any]:
    """Today's composed config of ``task=… pos=…``, flattened: what a record lacking a key (older code) ran with."""
    return flatten(OmegaConf.to_container(compose([f"task={task}", f"pos={pos}"]), resolve=True))


def full_config(saved: dict) -> dict[str, Any]:
    """A record's saved config.yaml (nested) over today's defaults for its task and scheme, flattened."""
    return {**defaults(saved["task"]["name"], saved["pos"]["name"]), **flatten(saved)}


def job_config(overrides: list[str]) -> dict[str, Any]:
    return flatten(OmegaConf.to_container(compose(overrides), resolve=True))


def _kept(key: str, ignored: set[str], prefixes: tuple[str, ...]) -> bool:
    return key not in ignored and not key.startswith(prefixes)


def differences(a: dict[str, Any], b: dict[str, Any], ignored: Iterable[str] = HOW_IT_RAN,
                prefixes: tuple[str, ...] = HOW_IT_RAN_PREFIXES, but: tuple[str, ...] = ()) -> dict[str, tuple]:
    """key → (a's value, b's value) for every key the two configs differ in, except ``ignored`` keys, keys under
    ``prefixes`` and keys under ``but`` (e.g. ``("pos.",)``: the configs may differ in the scheme)."""
    ignored = set(ignored)
    keys = [k for k in {*a, *b} if _kept(k, ignored, prefixes) and not k.startswith(but)]
    return {k: (a.get(k), b.get(k)) for k in sorted(keys) if a.get(k) != b.get(k)}


def over_defaults(rec: Record) -> Record | None:
    """A record whose config.yaml names its task and scheme (both still in conf/), read with its config over today's
    defaults (so a record of older code compares with today's jobs key by key); None otherwise."""
    saved = rec.saved_config
    if rec.summary is None or saved is None or "task" not in saved or "pos" not in saved:
        return None
    try:
        config = full_config(saved)
    except Exception:  # a task or scheme no longer in conf/: not a job anything here can be
        return None
    return Record(rec.path, rec.summary, saved, read_as=config)


def records_under(root: Path) -> list[Record]:
    return [r for r in map(over_defaults, record.under(root)) if r is not None]


def same_setting(a: dict[str, Any], b: dict[str, Any], but: tuple[str, ...] = ()) -> bool:
    """The same job but for the seed (and ``but``), by the report's looser identity: keys that never define a table
    column (threads, evaluation batch, the optimiser's kernel …) are ignored."""
    return not differences(a, b, IGNORED_KEYS | {"seed"}, IGNORED_PREFIXES, but)


def identical(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The very same job: what it computed is equal key by key (the seed included)."""
    return not differences(a, b)


def setting_key(config: dict[str, Any]) -> str:
    """A config's setting as one string: every key but the scheme's, the seed and those that never define a column."""
    kept = {k: v for k, v in config.items() if _kept(k, IGNORED_KEYS | {"seed"}, IGNORED_PREFIXES)
            and not k.startswith("pos.")}
    return json.dumps(kept, sort_keys=True, default=str)
