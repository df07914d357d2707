"""The config schema and the one resolution of a run's config: ``RunConfig.of(cfg)``.

Hydra composes plain YAML; ``RunConfig.of`` resolves it once (every interpolation), validates it with pydantic
against the models below and decides the machine's choices (``ropelab.core.machine.decide``), so a run reads one
typed object. A broken key is one line naming the key, the value and what is allowed; misspelled keys are refused
too. The ``model`` section's schema is ``ModelSchema``, a plain dataclass that the model's own ``LlamaConfig``
extends. The ``task`` and ``pos`` groups are checked by their own builders (``tasks.build``,
``ropelab.core.positional.build``), which know each task's and scheme's options: ``ropelab.core.build.check_config``
builds the run (checking this schema first), so every mistake surfaces before the first step.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StrictFloat, StrictInt, StrictStr
from pydantic import ValidationError

from ropelab.core import machine
from ropelab.core.cli import RUN_GROUPS
from ropelab.core.errors import ConfigError
from ropelab.core.positional import momentum
from ropelab.core.runs import checkpoint_path

PRECISIONS = ("auto", "32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "64-true")
# Hydra reads trainer.precision=32 as a number: Lightning's own names for its short forms
PRECISION_NUMBERS = {16: "16-mixed", 32: "32-true", 64: "64-true"}
PROGRESS = ("auto", "bar", "lines", "off")


def ladder(task: str, rung: Any, key: str) -> Any:
    """``${ladder:TASK,RUNG,KEY}``: KEY of rung RUNG of TASK's size ladder (``RUNGS`` in tasks/TASK.py), so the
    task's yaml sets every size from one key, ``task.rung`` (conf/task/indirect_indexing.yaml); RUNG null is the
    ladder's top rung, the paper's sizes (the task's defaults). A config.yaml keeps the resolved sizes."""
    import tasks

    rungs = getattr(__import__(f"tasks.{task}", fromlist=["RUNGS"]), "RUNGS", None) if task in tasks.names() else None
    if rungs is None:
        raise ConfigError(f"ladder={task!r} is invalid: a task with a size ladder (RUNGS in tasks/<task>.py)")
    if rung is None:
        rung = max(rungs)
    if rung not in rungs:
        raise ConfigError(f"task.rung={rung!r} is invalid: one of {', '.join(map(str, rungs))} (RUNGS in tasks/{task}.py)")
    if key not in rungs[rung]:
        raise ConfigError(f"ladder={key!r} is invalid: one of {', '.join(rungs[rung])}")
    return rungs[rung][key]


OmegaConf.register_new_resolver("ladder", ladder, replace=True)


class _About(str):
    """What a field allows, in words: the second half of its one-line error."""


_KIND = {int: StrictInt, float: StrictFloat, bool: StrictBool, str: StrictStr, list: list}
_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list"}


def spec(kind: type, lo: float | None = None, hi: float | None = None, choices: tuple | None = None,
         optional: bool = False, above: float | None = None) -> Any:
    """A field's type for pydantic (strict: true is no integer, 1000.0 no integer, "1" no number) with its
    description: ``lo`` and ``hi`` inclusive bounds, ``above`` an exclusive lower bound (a learning rate > 0)."""
    if choices and kind is bool:  # a bool with choices also takes those words ("auto")
        typ, about = StrictBool | Literal[choices], "true, false or " + ", ".join(map(str, choices))
    elif choices:
        typ, about = Literal[choices], "one of " + ", ".join(map(str, choices))
    else:
        typ = Annotated[_KIND[kind], Field(ge=lo, le=hi, gt=above)] if kind in (int, float) else _KIND[kind]
        if (lo is not None or above is not None) and hi is not None:
            bounds = f" in {'[' if above is None else '('}{lo if above is None else above}, {hi}]"
        elif above is not None:
            bounds = f" > {above}"
        else:
            bounds = f" >= {lo}" if lo is not None else ""
        about = f"{_WORDS[kind]}{bounds}"
    if optional:
        typ, about = typ | None, f"{about} or null"
    return Annotated[typ, _About(about)]


def _about(hint: Any) -> str:
    for arg in getattr(hint, "__metadata__", ()):
        if isinstance(arg, _About):
            return arg
    return ""


@dataclass
class ModelSchema:
    """The config's ``model`` section (conf/model/llama.yaml): the model's shape. ``ropelab.core.model.LlamaConfig``
    is this and what the task gives (vocab_size, max_len)."""
    __pydantic_config__ = ConfigDict(extra="forbid")
    d_model: spec(int, 1) = 128        # Bifocal paper: hidden 128
    n_layers: spec(int, 1) = 4         # not stated by the paper; our choice
    n_heads: spec(int, 1) = 4          # Bifocal paper: 4 heads
    mlp_hidden: spec(int, 1) = 512
    norm_eps: spec(float, above=0) = 1e-6
    init_std: spec(float, above=0) = 0.02
    # keep SDPA in fp32 under bf16 autocast: the CPU bf16 SDPA backward is ~2x slower
    attn_fp32: spec(bool) = True


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrainerSchema(_Section):
    max_steps: spec(int, 1)
    val_every: spec(int, 1)
    gradient_clip_val: spec(float, 0, optional=True)
    diverge_grad_norm: spec(float, above=0, optional=True)
    accelerator: spec(str, choices=machine.ACCELERATORS)
    devices: spec(int, 1)
    precision: spec(str, choices=PRECISIONS)
    threads: spec(int, 1, optional=True)
    progress: spec(str, choices=PROGRESS)
    compile: spec(bool, choices=("auto",))  # true, false or auto (ropelab.core.machine.choose_compile)


class DataSchema(_Section):
    batch_size: spec(int, 1)
    val_size: spec(int, 1)
    test_size: spec(int, 1)
    ood_size: spec(int, 1)
    eval_batch_size: spec(int, 1)
    train_size: spec(int, 1, optional=True)  # null: batches drawn on the fly; N: a fixed set, epochs over it


class OptimSchema(_Section):
    lr: spec(float, above=0)
    pos_lr_scale: spec(float, 0)
    weight_decay: spec(float, 0)
    betas: spec(list)
    eps: spec(float, above=0)
    warmup_steps: spec(int, 0)
    min_lr_ratio: spec(float, 0, 1)
    fused: spec(bool, choices=("auto",))  # true, false or auto (ropelab.core.lit.choose_fused)


SECTIONS = {"model": ModelSchema, "trainer": TrainerSchema, "data": DataSchema, "optim": OptimSchema}


class RunConfig(_Section):
    """A run's config, resolved once and checked: the keys as attributes, ``values`` the resolved plain
    containers (what config.yaml writes and what the run builds from, each value exactly as composed), and
    ``machine`` the choices made for this machine (device, precision, compile, threads)."""
    seed: spec(int, 0)
    name: spec(str)
    resume: spec(str, optional=True)
    record: spec(str, optional=True)
    record_also: spec(list)
    variants: spec(list)  # the table's override sets the campaign expands (conf/experiment/), bookkeeping
    rerun: spec(bool)
    needs_checkpoint: spec(bool)
    retry_failed: spec(bool)
    init_from: spec(str, optional=True)
    surgery: spec(str, choices=("spectral",), optional=True)
    surgery_train: spec(str, choices=("all", "spectral"))
    surgery_spectral_fraction: spec(float, 0, 1)  # and > 0: _check_surgery
    surgery_phase_std: spec(float, 0)
    model: ModelSchema
    trainer: TrainerSchema
    data: DataSchema
    optim: OptimSchema
    task: dict
    pos: dict
    logger: dict | None = None
    experiment: Any = None
    _values: dict = PrivateAttr(default_factory=dict)
    _machine: machine.Machine | None = PrivateAttr(default=None)

    @property
    def values(self) -> dict:
        return self._values

    @property
    def machine(self) -> machine.Machine:
        """Decided at the first use, once: a config is checked on any machine, a run asks here where it trains."""
        if self._machine is None:
            self._machine = machine.decide(self.trainer)
        return self._machine

    def get(self, key: str, default: Any = None) -> Any:  # as a DictConfig's, for code that takes either
        return getattr(self, key, default)

    @classmethod
    def of(cls, cfg: DictConfig | RunConfig) -> RunConfig:
        """``cfg`` resolved and checked (a one-line ConfigError for the first key that breaks the schema, all
        but the task's and scheme's own options), with the machine's choices made; a RunConfig as it is."""
        if isinstance(cfg, RunConfig):
            return cfg
        values = resolved(cfg)
        trainer = values.get("trainer") or {}
        if type(trainer.get("precision")) in (int, float) and trainer["precision"] in PRECISION_NUMBERS:
            trainer["precision"] = PRECISION_NUMBERS[trainer["precision"]]
        try:
            settings = cls.model_validate({**values, **{s: values.get(s) or {} for s in SECTIONS}})
        except ValidationError as err:
            raise ConfigError(_first_mistake(err, values)) from None
        _check_relations(values)
        settings._values = values
        return settings


def _first_mistake(err: ValidationError, values: dict) -> str:
    """The one line for the first mistake, in the order a reader checks: the root keys, then model, trainer,
    data, optim; in each, a key it does not know before a known key's value."""
    order = ["", *SECTIONS]

    def rank(e: dict) -> tuple:
        section = e["loc"][0] if len(e["loc"]) > 1 and e["loc"][0] in SECTIONS else ""
        fields = list(_hints(SECTIONS[section] if section else RunConfig))
        name = e["loc"][1] if section else e["loc"][0]
        unknown = e["type"] in ("extra_forbidden", "unexpected_keyword_argument")
        return order.index(section), not unknown, fields.index(name) if name in fields else len(fields)

    first = min(err.errors(), key=rank)
    section = first["loc"][0] if len(first["loc"]) > 1 and first["loc"][0] in SECTIONS else ""
    schema, name = (SECTIONS[section], first["loc"][1]) if section else (RunConfig, first["loc"][0])
    prefix = f"{section}." if section else ""
    hints = _hints(schema)
    if first["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        known = [k for k in hints if section or k not in RUN_GROUPS]
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
        groups = "" if section else f"; config groups: {', '.join(RUN_GROUPS)}"
        return f"{prefix}{name} is not a known key{hint}: valid keys are {', '.join(known)}{groups}"
    about = _about(hints[name])
    if first["type"] == "missing":
        return f"{prefix}{name} is missing: expected {about}"
    value = (values.get(section) or {}).get(name) if section else values.get(name)
    if about.startswith("an integer") and isinstance(value, float) and value.is_integer():
        # the command line reads 1e3 as the float 1000.0: say so, rather than echo a number the user never typed
        return f"{prefix}{name}={value!r} is invalid: {about} (1e3 and 1000.0 read as floats: write {int(value)})"
    return f"{prefix}{name}={value!r} is invalid: {about}"


def _hints(schema: type) -> dict[str, Any]:
    """A schema's fields (config keys) in order, with their types as written."""
    return {k: v for k, v in typing.get_type_hints(schema, include_extras=True).items()
            if not k.startswith("_") and (not dataclasses.is_dataclass(schema)
                                          or k in {f.name for f in dataclasses.fields(schema)})}


def _check_relations(values: dict) -> None:
    """What no single key's type says: the model's heads divide its width, the betas, surgery, momentum."""
    model = values["model"]
    if model["d_model"] % model["n_heads"]:
        raise ConfigError(f"model.n_heads={model['n_heads']} does not divide model.d_model={model['d_model']}")
    betas = values["optim"]["betas"]
    if len(betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas):
        raise ConfigError(f"optim.betas={betas!r} is invalid: two numbers in [0, 1)")
    _check_surgery(values)
    # pos.momentum against the model's depth and the run's length; the scheme's own options: positional.build
    momentum.options_of(values["pos"], model["n_layers"], values["trainer"]["max_steps"])


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
    RunConfig.of(cfg)


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


__all__ = ["ConfigError", "ModelSchema", "RunConfig", "check_schema", "spec"]
