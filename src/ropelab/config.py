"""Checks on a composed config that fail before training with one line naming the key and what is allowed."""

from __future__ import annotations

from omegaconf import DictConfig

from tasks.base import ConfigError, require


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(cfg: DictConfig) -> None:
    require(_is_int(cfg.seed), "seed", cfg.seed, "an integer")
    t = cfg.trainer
    require(_is_int(t.max_steps) and t.max_steps >= 1, "trainer.max_steps", t.max_steps, "an integer >= 1")
    require(_is_int(t.val_every) and t.val_every >= 1, "trainer.val_every", t.val_every, "an integer >= 1")
    require(_is_int(t.checkpoint_every) and t.checkpoint_every >= 1, "trainer.checkpoint_every",
            t.checkpoint_every, "an integer >= 1")
    m = cfg.model
    require(_is_int(m.n_heads) and m.n_heads >= 1, "model.n_heads", m.n_heads, "an integer >= 1")
    require(_is_int(m.d_model) and m.d_model % m.n_heads == 0, "model.d_model", m.d_model,
            f"an integer divisible by model.n_heads={m.n_heads}")


__all__ = ["ConfigError", "check_config"]
