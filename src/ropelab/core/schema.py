"""The config schema: every key, its type and allowed range, checked before training starts.

Hydra composes plain YAML; ``check_schema`` walks the schema below and fails with one line naming the key,
the value and what is allowed. Misspelled keys are refused too. The ``model`` section's schema is ``ModelSchema``,
which the model's own ``LlamaConfig`` extends. The ``task`` and ``pos`` groups are checked by their own builders
(``tasks.build``, ``ropelab.core.positional.build``), which know each task's and scheme's options:
``ropelab.core.build.check_config`` builds the run (checking this schema first), so every mistake surfaces before
the first step.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from ropelab.core.errors import ConfigError, require
from ropelab.core.machine import ACCELERATORS
from ropelab.core.positional import momentum
from ropelab.core.runs import checkpoint_path

PRECISIONS = ("auto", "32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "64-true")
PROGRESS = ("auto", "bar", "lines", "off")


def ladder(task: str, rung: Any, key: str) -> Any:
    """``${ladder:TASK,RUNG,KEY}``: KEY of rung RUNG of TASK's size ladder (``RUNGS`` in tasks/TASK.py), so the
    task's yaml sets every size from one key, ``task.rung`` (conf/task/indirect_indexing.yaml); RUNG null is the
    ladder's top rung, the paper's sizes (the task's defaults). A config.yaml keeps the resolved sizes."""
    import tasks

    rungs = getattr(__import__(f"tasks.{task}", fromlist=["RUNGS"]), "RUNGS", None) if task in tasks.names() else None
    require(rungs is not None, "ladder", task, "a task with a size ladder (RUNGS in tasks/<task>.py)")
    if rung is None:
        rung = max(rungs)
    require(rung in rungs, "task.rung", rung, f"one of {', '.join(map(str, rungs))} (RUNGS in tasks/{task}.py)")
    require(key in rungs[rung], "ladder", key, f"one of {', '.join(rungs[rung])}")
    return rungs[rung][key]


OmegaConf.register_new_resolver("ladder", ladder, replace=True)


def spec(kind: Any, lo: float | None = None, hi: float | None = None, choices: tuple | None = None,
         optional: bool = False, above: float | None = None, default: Any = None):
    """A schema field: ``lo`` and ``hi`` are inclusive bounds, ``above`` an exclusive lower bound (a learning
    rate > 0). Fields without it (``LlamaConfig.vocab_size``: from the task) are no config keys."""
    return field(default=default, metadata=dict(kind=kind, lo=lo, hi=hi, choices=choices, optional=optional,
                                                above=above))


@dataclass
class ModelSchema:
    """The config's ``model`` section (conf/model/llama.yaml): the model's shape. ``ropelab.core.model.LlamaConfig``
    is this and what the task gives (vocab_size, max_len)."""
    d_model: int = spec(int, 1, default=128)        # Bifocal paper: hidden 128
    n_layers: int = spec(int, 1, default=4)         # not stated by the paper; our choice
    n_heads: int = spec(int, 1, default=4)          # Bifocal paper: 4 heads
    mlp_hidden: int = spec(int, 1, default=512)
    norm_eps: float = spec(float, above=0, default=1e-6)
    init_std: float = spec(float, above=0, default=0.02)
    # keep SDPA in fp32 under bf16 autocast: the CPU bf16 SDPA backward is ~2x slower
    attn_fp32: bool = spec(bool, default=True)


@dataclass
class TrainerSchema:
    max_steps: int = spec(int, 1)
    val_every: int = spec(int, 1)
    gradient_clip_val: float = spec(float, 0, optional=True)
    diverge_grad_norm: float = spec(float, above=0, optional=True)
    accelerator: str = spec(str, choices=ACCELERATORS)
    devices: int = spec(int, 1)
    precision: str = spec(str, choices=PRECISIONS)
    threads: int = spec(int, 1, optional=True)
    progress: str = spec(str, choices=PROGRESS)
    compile: bool | str = spec(bool, choices=("auto",))  # true, false or auto (ropelab.core.machine.choose_compile)


@dataclass
class DataSchema:
    batch_size: int = spec(int, 1)
    val_size: int = spec(int, 1)
    test_size: int = spec(int, 1)
    ood_size: int = spec(int, 1)
    eval_batch_size: int = spec(int, 1)
    train_size: int = spec(int, 1, optional=True)  # null: batches drawn on the fly; N: a fixed set, epochs over it


@dataclass
class OptimSchema:
    lr: float = spec(float, above=0)
    pos_lr_scale: float = spec(float, 0)
    weight_decay: float = spec(float, 0)
    betas: list = spec(list)
    eps: float = spec(float, above=0)
    warmup_steps: int = spec(int, 0)
    min_lr_ratio: float = spec(float, 0, 1)
    fused: bool | str = spec(bool, choices=("auto",))  # true, false or auto (ropelab.core.lit.choose_fused)


@dataclass
class RootSchema:
    seed: int = spec(int, 0)
    name: str = spec(str)
    resume: str = spec(str, optional=True)
    record: str = spec(str, optional=True)
    record_also: list = spec(list)
    variants: list = spec(list)
    rerun: bool = spec(bool)
    needs_checkpoint: bool = spec(bool)
    retry_failed: bool = spec(bool)
    init_from: str = spec(str, optional=True)
    surgery: str = spec(str, choices=("spectral",), optional=True)
    surgery_train: str = spec(str, choices=("all", "spectral"))
    surgery_spectral_fraction: float = spec(float, 0, 1)  # and > 0: _check_surgery
    surgery_phase_std: float = spec(float, 0)


SECTIONS = {"model": ModelSchema, "trainer": TrainerSchema, "data": DataSchema, "optim": OptimSchema}
OPEN_SECTIONS = ("task", "pos", "logger", "experiment")  # checked by their builders


def _describe(meta) -> str:
    kind = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list"}[meta["kind"]]
    if meta["choices"]:  # a bool with choices also takes those words ("auto")
        return ("true, false or " if meta["kind"] is bool else "one of ") + ", ".join(map(str, meta["choices"]))
    lo, hi, above = meta["lo"], meta["hi"], meta["above"]
    if (lo is not None or above is not None) and hi is not None:
        text = f" in {'[' if above is None else '('}{lo if above is None else above}, {hi}]"
    elif above is not None:
        text = f" > {above}"
    elif lo is not None:
        text = f" >= {lo}"
    else:
        text = f" <= {hi}" if hi is not None else ""
    return f"{kind}{text}{' or null' if meta['optional'] else ''}"


def _ok(value, meta) -> bool:
    if value is None:
        return meta["optional"]
    kind = meta["kind"]
    if kind is bool:
        return isinstance(value, bool) or isinstance(value, str) and value in (meta["choices"] or ())
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        return False
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return False
    if kind is str and not isinstance(value, str):
        return False
    if kind is list and not isinstance(value, (list, tuple, ListConfig)):
        return False
    if meta["choices"] and value not in meta["choices"]:
        return False
    if meta["lo"] is not None and value < meta["lo"] or meta["hi"] is not None and value > meta["hi"]:
        return False
    if meta["above"] is not None and value <= meta["above"]:
        return False
    return True


def check_section(values: dict, schema: type, prefix: str) -> None:
    known = {f.name: f.metadata for f in fields(schema) if f.metadata}
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            raise ConfigError(f"{prefix}{key} is not a known key{hint}: valid keys are {', '.join(known)}")
    for key, meta in known.items():
        if key not in values:
            raise ConfigError(f"{prefix}{key} is missing: expected {_describe(meta)}")
        value = values[key]
        if meta["kind"] is int and isinstance(value, float) and value.is_integer() and not _ok(value, meta):
            # the command line reads 1e3 as the float 1000.0: say so, rather than echo a number the user never typed
            raise ConfigError(f"{prefix}{key}={value!r} is invalid: {_describe(meta)} (1e3 and 1000.0 read as floats: "
                              f"write {int(value)})")
        require(_ok(value, meta), f"{prefix}{key}", value, _describe(meta))


def resolved(cfg: DictConfig) -> dict:
    """``cfg`` as plain containers, every interpolation resolved; a resolver's own one-line ConfigError
    (``${ladder:…}``'s bad rung) is raised as itself rather than wrapped in OmegaConf's several lines."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as err:
        cause = err.__context__
        while cause is not None and not isinstance(cause, ConfigError):
            cause = cause.__context__
        if cause is None:
            raise
        raise cause from None


def check_schema(cfg: DictConfig) -> None:
    """Raise a one-line ConfigError for the first key that breaks the schema (all but the task's and scheme's
    own options)."""
    values = resolved(cfg)
    sections = SECTIONS
    root = {k: v for k, v in values.items() if k not in sections and k not in OPEN_SECTIONS}
    check_section(root, RootSchema, "")
    for section, schema in sections.items():
        check_section(values.get(section) or {}, schema, f"{section}.")
    model = values["model"]
    if model["d_model"] % model["n_heads"]:
        raise ConfigError(f"model.n_heads={model['n_heads']} does not divide model.d_model={model['d_model']}")
    betas = values["optim"]["betas"]
    if len(betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas):
        raise ConfigError(f"optim.betas={betas!r} is invalid: two numbers in [0, 1)")
    _check_surgery(values)
    # pos.momentum against the model's depth and the run's length; the scheme's own options: positional.build
    momentum.options_of(values["pos"], model["n_layers"], values["trainer"]["max_steps"])


def _check_surgery(values: dict) -> None:
    """init_from names a checkpoint; surgery replaces the fixed rope the weights were trained with."""
    if values["init_from"] is not None:
        try:
            checkpoint_path(values["init_from"])
        except FileNotFoundError:
            raise ConfigError(f"init_from={values['init_from']!r} is invalid: a run folder with "
                              "checkpoints/last.ckpt or a .ckpt file") from None
    if values["surgery_spectral_fraction"] <= 0:
        raise ConfigError(f"surgery_spectral_fraction={values['surgery_spectral_fraction']!r} is invalid: a number "
                          "in (0, 1]")
    if values["surgery"] is not None and values["pos"].get("name") != "rope":
        raise ConfigError(f"surgery={values['surgery']} needs pos=rope (the fixed rotary it replaces), "
                          f"not pos={values['pos'].get('name')}")


__all__ = ["ConfigError", "ModelSchema", "check_schema", "spec"]
