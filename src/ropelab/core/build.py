"""One way to build a run: a composed config → task, datamodule, model and Lightning module.

    from ropelab.core.build import build
    from ropelab.core.config import compose
    built = build(compose(["task=mod_arith", "pos=spectral"]))
    built.task, built.datamodule, built.model, built.lit

Training (``ropelab.core.train``), the config check (``check_config``), the smoke matrix, the bench,
attention maps and frequency usage (``ropelab.analysis.attention_maps.load_run_model``) and the surgery experiment all
build through here, so they all see the run that training sees, and a run builds each object once.

The order fixes the random stream and keeps a refused config cheap. The config is checked first: the schema,
then the task's options (building the tasks, NumPy only), then the scheme's (building the model, right after
``torch.manual_seed(cfg.seed)``; the scheme draws from a forked stream, ``build_model``), so one seed gives the same
weights in every tool. Only then is Lightning imported (≈ 3 s of a refused ``python train.py`` otherwise) and
everything seeded from ``cfg.seed`` (Lightning's ``seed_everything``, as a run needs) before the datamodule and
the Lightning module. The task's vocabulary and the longer of its in-distribution and OOD lengths size the model
(``vocab_size``, ``max_len``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import torch
from omegaconf import DictConfig, OmegaConf

from ropelab.core.model import Llama, LlamaConfig, build_model
from ropelab.core.schema import RunConfig
import tasks
from tasks.base import Task

if TYPE_CHECKING:
    from ropelab.core.data import TaskDataModule
    from ropelab.core.lit import LitLM

log = logging.getLogger("ropelab")


@dataclass
class Built:
    datamodule: TaskDataModule  # its task and ood_task: the run's task in and out of distribution
    model: Llama
    lit: LitLM                  # wraps model: loss, metrics, optimiser

    @property
    def task(self) -> Task:
        return self.datamodule.task


def build(cfg: DictConfig | RunConfig, for_checkpoint: bool = False) -> Built:
    """The run ``cfg`` describes, after checking it (one-line ``ConfigError``s name the bad key).

    ``for_checkpoint``: the model a finished run's checkpoint is loaded into (attention maps, frequency usage):
    ``cfg`` is that run's config (``ropelab.core.config.record_config``), not checked against today's schema (it is
    what ran), and ``init_from``'s weights are left out (``surgery`` still shapes the model)."""
    values = RunConfig.of(cfg).values if not for_checkpoint else OmegaConf.to_container(cfg, resolve=True)
    task, ood_task = tasks.build_with_ood(values["task"])
    model = model_for(values, len(task.vocab), max(task.seq_len, ood_task.seq_len), init_weights=not for_checkpoint)
    import lightning as L  # here, not at the top: see the module's docstring

    from ropelab.core.data import TaskDataModule
    from ropelab.core.lit import LitLM

    L.seed_everything(values["seed"], workers=True, verbose=False)
    datamodule = TaskDataModule(task, ood_task, values["seed"], **values["data"])
    lit = LitLM(model, values["optim"], values["trainer"]["max_steps"],
                diverge_grad_norm=values["trainer"]["diverge_grad_norm"])
    return Built(datamodule, model, lit)


def check_config(cfg: DictConfig | RunConfig) -> None:
    """Raise a one-line ConfigError for the first bad key: the schema (``ropelab.core.schema``), then every task
    and scheme option, by building the run as training would."""
    build(cfg)


def model_for(cfg: Mapping[str, Any], vocab_size: int, max_len: int, init_weights: bool = True) -> Llama:
    """The run's Llama for a vocabulary and a length: ``cfg``'s (a config, or its resolved values) ``model``
    shape, ``pos`` scheme and momentum, then ``init_from``'s weights and ``surgery`` (the bench calls this
    directly: it has no task)."""
    if isinstance(cfg, DictConfig):  # the keys read here, resolved (the bench's and tests' configs)
        cfg = {k: OmegaConf.to_container(cfg[k], resolve=True) if k in ("model", "pos") else cfg.get(k)
               for k in ("seed", "model", "pos", "init_from", "surgery", "surgery_train", "surgery_phase_std",
                         "surgery_spectral_fraction")}
    torch.manual_seed(cfg["seed"])
    model = build_model(LlamaConfig(vocab_size=vocab_size, max_len=max_len, **cfg["model"]), cfg["pos"])
    if cfg.get("init_from") or cfg.get("surgery"):
        from ropelab.core import surgery

        if cfg["init_from"] and init_weights:  # a finished run's weights, loaded at step 0 (a resume loads over them)
            log.info("weights from %s", surgery.load_weights(model, cfg["init_from"]))
        if cfg["surgery"] == "spectral":  # fixed rope → learnable spectral RoPE, outputs unchanged
            surgery.spectralize(model, freeze=cfg["surgery_train"] == "spectral", phase_std=cfg["surgery_phase_std"],
                                spectral_fraction=cfg["surgery_spectral_fraction"])
    return model
