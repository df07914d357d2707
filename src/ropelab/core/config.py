"""The config, composed: ``compose(overrides)`` composes conf/config.yaml as ``python train.py <overrides>`` does,
outside a Hydra job; ``record_config`` reads a finished run's config.yaml the same way.

Its schema (every key's type and range) is ``ropelab.core.schema``; the whole check, schema, task and scheme
options, is ``ropelab.core.build.check_config``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from ropelab.core import schema  # noqa: F401  (registers ${ladder:…}, which composed task configs resolve)
from ropelab.core.cli import CONF_DIR


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config (plain dicts, as a config.yaml loads) as dotted keys: ``{"optim.lr": 1e-3, …}``; a list is
    one value, its string (so configs compare and tabulate key by key)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: str(node) if isinstance(node, list) else node}


def compose_with_hydra(overrides: Sequence[str] = ()) -> DictConfig:
    """conf/config.yaml composed with ``overrides``, its ``hydra`` section kept (a preset's sweep axes)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # inside a caller's initialize_config_dir
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=True)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=True)


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """conf/config.yaml composed with ``overrides`` (``task=mod_arith``, ``pos.base=500`` …) as train.py composes
    it. The task's and the scheme's ``name`` are the chosen files' names, which conf/config.yaml takes from
    Hydra's ``runtime.choices``: only a Hydra job can resolve that, so they are filled in here."""
    cfg = compose_with_hydra(overrides)
    with open_dict(cfg):
        cfg.task.name, cfg.pos.name = cfg.hydra.runtime.choices.task, cfg.hydra.runtime.choices.pos
        del cfg["hydra"]
    return cfg


def record_config(saved: Mapping[str, Any]) -> DictConfig:
    """A run's saved config (its config.yaml) over today's defaults for its task and scheme: what the run trained,
    with the keys added since it ran at their defaults (older records lack ``init_from``, …), ready to build."""
    cfg = compose([f"task={saved['task']['name']}", f"pos={saved['pos']['name']}"])
    OmegaConf.set_struct(cfg, False)
    return OmegaConf.merge(cfg, saved)


__all__ = ["compose", "record_config"]
