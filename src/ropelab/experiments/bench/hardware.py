"""The bench's machine: CPU, load, and the matmul peak at the model's shapes (the physical limit of a step)."""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

from ropelab.core import machine


def cpu_info() -> dict[str, Any]:
    info = machine.cpu()
    flags = set(info["flags"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": info["model"], "cores": cores, "flags": list(info["flags"]), "avx2": "avx2" in flags,
            "avx512f": "avx512f" in flags, "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
            "native_bf16": machine.native_bf16_cpu(), "torch": torch.__version__,
            "python": platform.python_version()}


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def proc_loadavg() -> str:
    """/proc/loadavg as it reads (1, 5, 15 min averages, runnable/all tasks, last pid), or ''."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return ""


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_call(fn: Callable[[], Any], min_seconds: float, min_calls: int = 2, best: bool = False,
               device: str = "cpu", reps: int = 1) -> float:
    """Median (``best``: fastest) seconds per call, calling ``fn`` until ``min_seconds`` elapsed, after a warm-up.
    On CUDA each sample is ``reps`` calls between two synchronisations."""
    fn()
    sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_seconds:
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync(device)
        times.append((time.perf_counter() - t) / reps)
    return min(times) if best else statistics.median(times)


def matmul_shapes(d: int, mlp: int, tokens: int, heads: int) -> dict[str, tuple[int, int, int]]:
    """(m, k, n) of the model's matmuls, forward and the weight-gradient form of backward."""
    return {"qkv": (tokens, d, 3 * d), "attn_out": (tokens, d, d), "gate_up": (tokens, d, 2 * mlp),
            "down": (tokens, mlp, d), "gate_up_wgrad": (d, tokens, 2 * mlp), "down_wgrad": (mlp, tokens, d)}


def matmul_peak(shapes: dict[str, tuple[int, int, int]], dtype: torch.dtype, min_seconds: float,
                max_rows: int | None = None, device: str = "cpu", square: int | None = None) -> dict[str, Any]:
    """GFLOP/s per shape, plus one ``square`` GEMM (the machine's best rate, not only at our shapes).

    ``peak_gflops``: the best rate over all of them, the physical limit a step is measured against;
    ``model_peak_gflops`` and ``mix_gflops`` (total FLOPs over total time): the model's shapes only.
    ``max_rows`` caps the token dimension (bf16 in software is too slow for full size)."""
    per_shape, flops_total, time_total = {}, 0.0, 0.0
    all_shapes = dict(shapes, **({"square": (square, square, square)} if square else {}))
    for name, (m, k, n) in all_shapes.items():
        if max_rows and name != "square":
            m, k = (min(m, max_rows), k) if not name.endswith("wgrad") else (m, min(k, max_rows))
        a = torch.randn(m, k, dtype=dtype, device=device)
        b = torch.randn(k, n, dtype=dtype, device=device)
        seconds = time_call(lambda: a @ b, min_seconds, best=True, device=device,  # a peak: the fastest call
                             reps=20 if device == "cuda" else 1)
        flops = 2.0 * m * k * n
        per_shape[name] = {"shape": [m, k, n], "gflops": round(flops / seconds / 1e9, 2)}
        if name != "square":
            flops_total, time_total = flops_total + flops, time_total + seconds
    model_rates = [v["gflops"] for k, v in per_shape.items() if k != "square"]
    return {"dtype": str(dtype).replace("torch.", ""), "peak_gflops": max(v["gflops"] for v in per_shape.values()),
            "model_peak_gflops": max(model_rates), "mix_gflops": round(flops_total / time_total / 1e9, 2),
            "shapes": per_shape}
