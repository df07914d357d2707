"""What a run ran on, and what that machine does fast: recorded in every summary.json.

``describe()`` gives the CPU model and the flags that decide speed (AVX2, AVX-512, native bf16, AMX), or the
GPU, plus torch's version and the git commit of the code (with ``dirty`` when the tree had edits), so a
report can say when one table mixes machines or code versions.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]  # the checkout: src/ropelab/core/machine.py

# What ``auto`` precision resolves to on the CPU, set by a campaign that finishes a group whose records ran on
# another CPU kind (joined by a committed kind check) at the precision auto chose there: its jobs keep their names
# and compute as the group did; the resolved precision is recorded in each summary's identity as always.
AUTO_PRECISION_ENV = "ROPELAB_AUTO_PRECISION"

SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")


@functools.cache
def cpu() -> dict:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return {"model": model, "flags": [f for f in SPEED_FLAGS if f in flags]}


def native_bf16(flags) -> bool:
    """A CPU with these flags runs bf16 matmuls in hardware (AVX-512-bf16 or AMX), not in a software path ~27x slower
    than fp32."""
    return bool(set(flags) & {"avx512_bf16", "amx_bf16"})


def auto_precision_as(precisions, flags) -> str | None:
    """The precision ``auto`` takes (``AUTO_PRECISION_ENV``) so that a job computes as records that ran at
    ``precisions`` did: their one precision, where a CPU with ``flags`` runs it in hardware (32-true anywhere,
    bf16-mixed with native bf16); None where they ran at several, or this CPU cannot."""
    ran = set(precisions)
    if len(ran) != 1:
        return None
    precision = ran.pop()
    return precision if precision == "32-true" or (precision == "bf16-mixed" and native_bf16(flags)) else None


def native_bf16_cpu() -> bool:
    """This machine's CPU runs bf16 matmuls in hardware (``native_bf16``)."""
    return native_bf16(cpu()["flags"])


@functools.cache
def git_commit() -> dict:
    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        # only code counts as dirty: results/ and runs/ change while sweeps run
        dirty = bool(git("status", "--porcelain", "--", "src", "tasks", "conf", "train.py"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": dirty if commit else None}


def describe(accelerator: str = "cpu") -> dict:
    info = {"cpu": cpu(), "torch": torch.__version__, **git_commit()}
    if accelerator == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def label(info: dict) -> str:
    """One short string for a report row: the GPU, or the CPU model and its fastest matmul flag."""
    if info.get("gpu"):
        return info["gpu"]
    flags = info.get("cpu", {}).get("flags", [])
    best = next((f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags), "no-avx2")
    return f"{info.get('cpu', {}).get('model', '?')} [{best}]"


ACCELERATORS = ("auto", "cpu", "gpu", "cuda")


def choose(accelerator: str, precision: str) -> tuple[str, str, str]:
    """(accelerator, precision, why) for ``trainer.accelerator`` / ``trainer.precision``, resolving ``auto``.

    auto precision: bf16-mixed on CUDA and on CPUs with native bf16 (there attention stays fp32, see
    ``LlamaConfig.attn_fp32``); fp32 elsewhere, where bf16 runs in software and is many times slower."""
    from ropelab.core.errors import ConfigError

    cuda = torch.cuda.is_available()
    if accelerator in ("gpu", "cuda") and not cuda:
        raise ConfigError(f"trainer.accelerator={accelerator} but torch sees no CUDA device: use auto or cpu")
    device = "cuda" if accelerator in ("gpu", "cuda") or (accelerator == "auto" and cuda) else "cpu"
    if precision != "auto":
        return device, precision, "as configured"
    if device == "cuda":
        return device, "bf16-mixed", "auto: CUDA"
    if (pinned := os.environ.get(AUTO_PRECISION_ENV)) in ("32-true", "bf16-mixed"):
        return device, pinned, f"auto: {AUTO_PRECISION_ENV}={pinned} (as the records of this job's group)"
    if native_bf16_cpu():
        return device, "bf16-mixed", f"auto: CPU has native bf16 ({', '.join(cpu()['flags'])})"
    return device, "32-true", "auto: CPU has no native bf16 (it would run in software)"


def choose_compile(setting: bool | str, device: str) -> tuple[bool, str]:
    """(compile?, why) for ``trainer.compile``: true / false as configured, or ``auto``.

    auto is off on both devices. Measured on the 2-core Xeon (AMX, bf16-mixed, 1 thread, default model): a
    compiled training step is 1.3x faster, but compiling costs 79 s cold (under load) before the first step and
    again for evaluation (no grad, batch 128, the OOD length), so a 400-step run does not earn it back
    (docs/speed.md). On CUDA it is not measured yet: ``make gpu-check`` measures the compiled step and its compile time
    there (bench row "rope compiled") so this rule can change with numbers, not guesses."""
    if isinstance(setting, bool):
        return setting, "as configured"
    if device == "cuda":
        return False, "auto: off on CUDA until measured (make gpu-check measures it)"
    return False, "auto: off on CPU (compiling costs more than it saves in a run of this length, measured)"


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parallel_jobs() -> int:
    """Jobs of this sweep that share this machine at once: joblib's n_jobs (-1 or unset: one per core), else 1."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return 1
    n_jobs = OmegaConf.select(HydraConfig.get(), "launcher.n_jobs", default=None)
    if n_jobs in (None, -1) and "joblib" in str(HydraConfig.get().launcher.get("_target_", "")):
        return cores()
    return max(1, int(n_jobs or 1))


def threads(setting: int | None) -> int:
    """``trainer.threads``, or null: the cores, shared by the sweep's parallel joblib jobs instead of oversubscribing."""
    return int(setting) if setting else max(1, cores() // parallel_jobs())


@dataclass(frozen=True)
class Machine:
    """What a run decided about this machine, once (``decide``): every later reader takes it from here."""
    accelerator: str
    precision: str
    why: str            # of the precision: as configured, or what auto found
    compile: bool
    compile_why: str
    threads: int
    devices: int


def decide(trainer) -> Machine:
    """The machine's choices for a config's ``trainer`` section (``ropelab.core.schema.TrainerSchema``)."""
    accelerator, precision, why = choose(trainer.accelerator, trainer.precision)
    compiled, compile_why = choose_compile(trainer.compile, accelerator)
    return Machine(accelerator, precision, why, compiled, compile_why, threads(trainer.threads), trainer.devices)
