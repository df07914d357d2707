"""Training-step benchmark: our Llama per positional scheme against Hugging Face's LlamaForCausalLM.

    python -m ropelab.bench              # the reference config (make bench); writes bench/out/bench-<time>.{json,md}
    python -m ropelab.bench --quick      # tiny config, 1 round: checks that the bench runs (seconds)
    python -m ropelab.bench --levers     # also torch.compile, the other precision, bf16 attention
    python -m ropelab.bench --device cuda  # on a GPU (make gpu-check runs it there)

What one "step" is, for every configuration: forward, loss (``LitLM.loss``), backward, gradient clipping
at 1.0 (as ``trainer.gradient_clip_val``), AdamW step, zero_grad. Our model gets the optimiser of
``LitLM.configure_optimizers`` (the training path's param groups); HF's Llama, built from the same config
(random init, no download, ``attn_implementation="sdpa"``, same parameter count), gets AdamW with the same
hyper-parameters and the same decay / no-decay split.

Device and precision are those a training run would choose (``ropelab.core.machine.choose``, both ``auto`` by
default): bf16-mixed autocast on CUDA and on CPUs with native bf16, fp32 elsewhere. Every scheme and HF run at
that precision; when it is not fp32, HF (and rope) also run in fp32, so each row says how it compares with HF
at the same precision and with HF fp32.

Every configuration is built and warmed up first; then the timed rounds go round-robin over all of them
(each round starting one configuration later), so a drift in machine load hits all configurations alike.
Per configuration: the median and best step time over the rounds; speed ratios are taken per round and
then the median over rounds, from wall clock and from process CPU time (which a busy machine inflates less).
Only ratios measured within one run are meaningful; the JSON records the load average before, during and after.

FLOPs per step: 6 · (non-embedding parameters) · tokens + attention, 6 · layers · B · H · T² · (w_qk + w_v)
(QKᵀ and AV, forward and backward, causal half not subtracted). The physical limit of a step is its FLOPs at
the best GEMM rate of the precision it uses (fp32 or bf16), measured in the same run at the model's own shapes
and at one large square; "of limit" = that time over the row's best step time.

``--sweep-estimate`` also times the training step of every (task, scheme) of ``bifocal_table1`` at the task's
length and its evaluation forwards, and estimates the wall time of the whole sweep on this machine from process
CPU time (what a job gets when it has a core to itself).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from omegaconf import OmegaConf

import tasks
from ropelab.core import machine
from ropelab.core.cli import REPO

ROOT = REPO
CONF = ROOT / "conf"
OUT_DIR = ROOT / "bench" / "out"  # untracked (.gitignore): a bench run never dirties the tree

# (label, scheme, overrides on top of pos=<scheme>)
SCHEMES: list[tuple[str, str, list[str]]] = [
    ("rope", "rope", []),
    ("spectral", "spectral", []),
    ("bifocal", "bifocal", []),
    ("pope", "pope", []),
    ("alibi", "alibi", []),
    ("nope", "nope", []),
    ("rope+momentum", "rope", ["pos.momentum.gamma=0.5"]),
]

REFERENCE = dict(d_model=128, n_layers=4, n_heads=4, mlp_hidden=512, seq_len=256, batch_size=32, vocab_size=16)
QUICK = dict(d_model=32, n_layers=1, n_heads=2, mlp_hidden=64, seq_len=32, batch_size=4, vocab_size=16)

# conf/experiment/bifocal_table1.yaml: what --sweep-estimate prices (2 parallel one-thread jobs, as `make table1
# LAUNCHER=joblib` on 2 cores)
TABLE1 = dict(tasks=("dyck3", "bio_rotation", "mod_arith"), schemes=("rope", "spectral", "bifocal"), seeds=3,
              steps=400, val_every=50, batch_size=32, eval_batch_size=128, eval_size=256, parallel=2)

# targets of issue 12 (docs/speed.md): scheme ratios to rope, and the reference config against HF
SCHEME_TARGETS = {"pope": 0.85, "spectral": 0.95, "bifocal": 0.95}
NATIVE_BF16_VS_HF_FP32 = 2.0
AVX2_FRACTION_OF_FP32_PEAK = 0.75


def short_precision(precision: str) -> str:
    return "bf16" if str(precision).startswith("bf16") else "fp32"


# ----------------------------------------------------------------------------------------------- machine


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


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------------------------- matmul peak


def _time_call(fn: Callable[[], Any], min_seconds: float, min_calls: int = 2, best: bool = False,
               device: str = "cpu", reps: int = 1) -> float:
    """Median (``best``: fastest) seconds per call, calling ``fn`` until ``min_seconds`` elapsed, after a warm-up.
    On CUDA each sample is ``reps`` calls between two synchronisations."""
    fn()
    _sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_seconds:
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        _sync(device)
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
        seconds = _time_call(lambda: a @ b, min_seconds, best=True, device=device,  # a peak: the fastest call
                             reps=20 if device == "cuda" else 1)
        flops = 2.0 * m * k * n
        per_shape[name] = {"shape": [m, k, n], "gflops": round(flops / seconds / 1e9, 2)}
        if name != "square":
            flops_total, time_total = flops_total + flops, time_total + seconds
    model_rates = [v["gflops"] for k, v in per_shape.items() if k != "square"]
    return {"dtype": str(dtype).replace("torch.", ""), "peak_gflops": max(v["gflops"] for v in per_shape.values()),
            "model_peak_gflops": max(model_rates), "mix_gflops": round(flops_total / time_total / 1e9, 2),
            "shapes": per_shape}


# ----------------------------------------------------------------------------------------------- models


def optim_config() -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml").optim, resolve=True)


def flops_per_step(non_embedding_params: int, layers: int, heads: int, seq: int, batch: int, qk_width: int,
                   v_width: int) -> float:
    tokens = batch * seq
    return 6.0 * non_embedding_params * tokens + 6.0 * layers * batch * heads * seq * seq * (qk_width + v_width)


class Bench:
    """One configuration: a model, its optimiser and a ``step()`` that does the full training step."""

    def __init__(self, label: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 logits: Callable[[torch.Tensor], torch.Tensor], flops: float, params: int,
                 precision: str = "32-true", device: str = "cpu", note: str = ""):
        self.label, self.model, self.optimizer, self.logits = label, model, optimizer, logits
        self.flops, self.params, self.precision, self.device, self.note = flops, params, precision, device, note
        self.autocast = short_precision(precision) == "bf16"
        self.times: list[float] = []
        self.cpu_times: list[float] = []
        self.warmup_times: list[float] = []

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        from ropelab.core.lit import LitLM

        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):  # as Lightning's bf16-mixed
            logits = self.logits(inputs)
        loss = LitLM.loss(logits, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())  # one host sync per step, as the training loop's loss check


def build_ours(label: str, scheme: str, shape: dict, precision: str = "32-true", device: str = "cpu",
               compile_model: bool = False, attn_fp32: bool = True, note: str = "",
               overrides: Sequence[str] = ()) -> Bench:
    """``pos=<scheme>`` with ``overrides``, built as a run builds its model (``ropelab.core.build``) at ``shape``'s
    size, with the optimiser of the training path (LitLM's param groups)."""
    from ropelab.core.build import model_for
    from ropelab.core.config import compose
    from ropelab.core.lit import LitLM

    cfg = compose([f"pos={scheme}", *overrides, f"model.attn_fp32={attn_fp32}",
                   *(f"model.{key}={shape[key]}" for key in ("d_model", "n_layers", "n_heads", "mlp_hidden"))])
    model = model_for(cfg, shape["vocab_size"], shape.get("max_len", shape["seq_len"])).to(device)
    optimizer = LitLM(model, cfg.optim, max_steps=400).configure_optimizers()["optimizer"]
    non_embedding = model.num_parameters() - model.embed.weight.numel()
    qk_width = model.pos.qk_width(model.cfg.head_dim)
    flops = flops_per_step(non_embedding, model.cfg.n_layers, model.cfg.n_heads, shape["seq_len"],
                           shape["batch_size"], qk_width, qk_width)  # v is padded to the q/k width when they differ
    forward: Callable = model
    if compile_model:
        forward = torch.compile(model)
    return Bench(label, model, optimizer, forward, flops, model.num_parameters(), precision, device, note)


HF_DIR = ROOT / ".venv" / "hf"  # where `make bench` installs the hf extra, outside the training venv


def hf_available() -> bool:
    if HF_DIR.is_dir() and str(HF_DIR) not in sys.path:
        sys.path.append(str(HF_DIR))  # appended: the venv's own numpy, torch, … still come first
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def build_hf(label: str, shape: dict, precision: str = "32-true", device: str = "cpu") -> Bench:
    import transformers
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    transformers.logging.set_verbosity_error()
    config = HFConfig(vocab_size=shape["vocab_size"], hidden_size=shape["d_model"],
                      intermediate_size=shape["mlp_hidden"], num_hidden_layers=shape["n_layers"],
                      num_attention_heads=shape["n_heads"], num_key_value_heads=shape["n_heads"],
                      max_position_embeddings=shape["seq_len"], rms_norm_eps=1e-6, tie_word_embeddings=False,
                      use_cache=False, attention_bias=False, mlp_bias=False, initializer_range=0.02)
    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", torch_dtype=torch.float32).to(device)
    model.train()
    o = optim_config()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=o["lr"], betas=tuple(o["betas"]),
                                  eps=o["eps"])
    params = sum(p.numel() for p in model.parameters())
    non_embedding = params - model.model.embed_tokens.weight.numel()
    head_dim = shape["d_model"] // shape["n_heads"]
    flops = flops_per_step(non_embedding, shape["n_layers"], shape["n_heads"], shape["seq_len"],
                           shape["batch_size"], head_dim, head_dim)
    return Bench(label, model, optimizer, lambda idx: model(input_ids=idx).logits, flops, params, precision, device,
                 note=f"transformers {transformers.__version__}, attn {model.config._attn_implementation}")


# ----------------------------------------------------------------------------------------------- generators


def generator_rates(batch_size: int, min_seconds: float) -> dict[str, dict[str, Any]]:
    """Samples/s of every registered task's generator at its default config (training batches)."""
    from ropelab.core.config import compose
    from ropelab.core.data import draw

    out: dict[str, dict[str, Any]] = {}
    for name in tasks.names():
        try:
            task, _ = tasks.build_with_ood(OmegaConf.to_container(compose([f"task={name}"]).task, resolve=True))
            task = task.for_split("train")
            index = [0]

            def one_batch():
                draw(task, 0, "train", batch_size, index=index[0])
                index[0] += 1

            seconds = _time_call(one_batch, min_seconds, min_calls=3)
            out[name] = {"seq_len": task.seq_len, "samples_per_s": round(batch_size / seconds, 1)}
        except Exception as err:  # a task that cannot be built here is reported, not fatal
            out[name] = {"error": f"{type(err).__name__}: {err}"}
    return out


# ----------------------------------------------------------------------------------------------- the table1 sweep


def sweep_estimate(precision: str, device: str, steps: int, say: Callable, startup_s: float | None = None,
                   quick: bool = False) -> dict[str, Any]:
    """Estimated wall time of ``bifocal_table1`` (27 jobs) as ``TABLE1['parallel']`` one-thread jobs at a time.

    Per (task, scheme): the process CPU time of a training step at the task's length (batch 32) and of an
    evaluation forward (batch 128) at its validation and OOD lengths, median of ``steps`` after a warm-up. A job
    is 400 steps + 8 validations + test + OOD (2 batches each) + start-up (``startup_s``, from the default run,
    when given). CPU time, not wall: it is what a job costs when it has a core to itself, which a loaded machine
    inflates less than wall time. Lightning's own per-step work (logging, callbacks, 8 checkpoints) is not
    included: compare with real records (``summary.json`` ``wall_seconds``) where they exist."""
    from ropelab.core.config import compose
    from ropelab.core.data import draw

    t = TABLE1
    model_cfg = OmegaConf.to_container(OmegaConf.load(CONF / "model" / "llama.yaml"), resolve=True)
    per: dict[str, dict[str, Any]] = {}
    job_cpu_s: list[float] = []
    n_eval = math.ceil(t["eval_size"] / t["eval_batch_size"])
    for task_name in t["tasks"]:
        task, ood = tasks.build_with_ood(OmegaConf.to_container(compose([f"task={task_name}"]).task, resolve=True))
        train_batch = [torch.from_numpy(a).to(device) for a in draw(task.for_split("train"), 0, "train", t["batch_size"])]
        val_in = torch.from_numpy(draw(task.for_split("val"), 0, "val", t["eval_batch_size"], grouped=True)[0]).to(device)
        ood_in = torch.from_numpy(draw(ood.for_split("ood"), 0, "ood", t["eval_batch_size"], grouped=True)[0]).to(device)
        shape = dict(model_cfg, seq_len=task.seq_len, batch_size=t["batch_size"], vocab_size=len(task.vocab),
                     max_len=max(task.seq_len, ood.seq_len))
        if quick:
            shape.update(QUICK, seq_len=task.seq_len, vocab_size=len(task.vocab))
        for scheme in t["schemes"]:
            say(f"sweep estimate: {task_name} × {scheme} ...")
            bench = build_ours(scheme, scheme, shape, precision, device)

            def evaluate(inputs):
                with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=bench.autocast):
                    bench.model(inputs).float().argmax(-1)

            def cpu_seconds(fn, n):  # process CPU time; on CUDA, wall time (the GPU's time is not the process's)
                clock = time.perf_counter if device == "cuda" else time.process_time
                fn()  # warm-up
                _sync(device)
                out = []
                for _ in range(n):
                    c = clock()
                    fn()
                    _sync(device)
                    out.append(clock() - c)
                return statistics.median(out)

            train_s = cpu_seconds(lambda: bench.step(*train_batch), steps)
            val_s = cpu_seconds(lambda: evaluate(val_in), max(1, steps // 2))
            ood_s = cpu_seconds(lambda: evaluate(ood_in), max(1, steps // 2))
            job = (t["steps"] * train_s + (t["steps"] // t["val_every"] + 1) * n_eval * val_s + n_eval * ood_s
                   + (startup_s or 0.0))
            per[f"{task_name}/{scheme}"] = {"seq_len": task.seq_len, "ood_seq_len": ood.seq_len,
                                           "train_step_cpu_s": round(train_s, 4), "eval_forward_cpu_s": round(val_s, 4),
                                           "ood_forward_cpu_s": round(ood_s, 4), "job_cpu_s": round(job, 1)}
            job_cpu_s += [job] * t["seeds"]
    # jobs go to the parallel slots as they free up: the sum over slots, the longest job at the least
    total = max(sum(job_cpu_s) / t["parallel"], max(job_cpu_s))
    return {"estimate": True, "jobs": len(job_cpu_s), "parallel": t["parallel"], "threads_per_job": 1,
            "precision": precision, "startup_s_per_job": startup_s, "per_task_scheme": per,
            "job_cpu_s_total": round(sum(job_cpu_s), 1), "wall_s": round(total, 1),
            "note": "estimate from measured CPU time per step; excludes Lightning's per-step overhead"}


# ----------------------------------------------------------------------------------------------- a real run


def default_run(max_steps: int, threads: int | None, timeout: int = 900, accelerator: str = "auto") -> dict[str, Any]:
    """``python train.py`` (default config, ``max_steps`` steps) in a temporary folder: wall time and peak RSS.

    The peak is the child's ``VmHWM`` (/proc/<pid>/status), polled until it exits: not ``ru_maxrss``, which
    Linux carries over from the parent's address space at fork/exec (it would report this bench's own RSS)."""
    overrides = [f"trainer.max_steps={max_steps}", f"trainer.accelerator={accelerator}"]
    overrides += [f"trainer.threads={threads}"] if threads else []
    with tempfile.TemporaryDirectory(prefix="ropelab-bench-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={run_dir}"]
        with open(Path(tmp) / "out.txt", "w") as out:
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=tmp, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "WANDB_MODE": "offline"})
            deadline, peak_kib = start + timeout, 0
            status_file = Path(f"/proc/{proc.pid}/status")
            while proc.poll() is None:
                try:
                    for line in status_file.read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            peak_kib = max(peak_kib, int(line.split()[1]))
                except (OSError, ValueError):
                    pass
                if time.perf_counter() > deadline:
                    proc.kill()
                    proc.wait()
                    break
                time.sleep(0.05)
            wall = time.perf_counter() - start
        result: dict[str, Any] = {"command": "python train.py " + " ".join(overrides), "max_steps": max_steps,
                                  "returncode": proc.returncode, "wall_s": round(wall, 2),
                                  "peak_rss_mib": round(peak_kib / 1024, 1) if peak_kib else None}
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
            result.update(status=summary.get("status"), fit_test_s=summary.get("wall_seconds"),
                          precision=summary.get("precision"), accelerator=summary.get("accelerator"))
            if summary.get("wall_seconds") is not None:
                result["startup_and_teardown_s"] = round(wall - summary["wall_seconds"], 2)
        except (OSError, ValueError):
            result["output_tail"] = (Path(tmp) / "out.txt").read_text()[-1500:]
        return result


# ----------------------------------------------------------------------------------------------- main


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def _ratio(base: Bench, bench: Bench, cpu: bool = False) -> float:
    a, b = (base.cpu_times, bench.cpu_times) if cpu else (base.times, bench.times)
    return round(statistics.median([x / y for x, y in zip(a, b)]), 3)


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 12's targets against this run's rows: value, threshold, met (None where no target applies)."""
    rows, cpu, out = result["steps"], result["cpu"], []
    ref = rows.get("rope")
    if ref is None:
        return out
    if result["device"] == "cpu" and cpu["native_bf16"]:
        value = ref.get("vs_hf_fp32")
        out.append({"target": f"reference config (rope, {ref['precision']}) ≥ {NATIVE_BF16_VS_HF_FP32}× HF fp32",
                    "value": value, "threshold": NATIVE_BF16_VS_HF_FP32,
                    "met": None if value is None else value >= NATIVE_BF16_VS_HF_FP32})
    elif result["device"] == "cpu":
        value = ref["fraction_of_fp32_peak"]
        out.append({"target": f"reference config (rope, fp32) ≥ {AVX2_FRACTION_OF_FP32_PEAK} of the fp32 matmul peak",
                    "value": value, "threshold": AVX2_FRACTION_OF_FP32_PEAK, "met": value >= AVX2_FRACTION_OF_FP32_PEAK})
    else:
        out.append({"target": f"reference config (rope, {ref['precision']}) vs HF at the same precision (no target set)",
                    "value": ref.get("vs_hf"), "threshold": None, "met": None})
    for label, threshold in SCHEME_TARGETS.items():
        if label in rows:
            value = rows[label]["vs_rope"]
            out.append({"target": f"{label} ≥ {threshold} of rope's speed", "value": value, "threshold": threshold,
                        "met": value >= threshold})
    return out


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from ropelab.core import positional

    device, precision, why = machine.choose(args.device, args.precision)
    shape = dict(QUICK if args.quick else REFERENCE)
    for key in ("d_model", "n_layers", "n_heads", "mlp_hidden", "seq_len", "batch_size"):
        if getattr(args, key, None):
            shape[key] = getattr(args, key)
    threads = args.threads or cpu_info()["cores"] or 1
    torch.set_num_threads(threads)
    say = (lambda *a: None) if args.silent else (lambda *a: print(*a, file=sys.stderr, flush=True))
    result: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(), "device": device,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None, "precision": precision,
        "precision_why": why, "threads": threads, "shape": shape, "load_avg_start": load_avg(),
        "proc_loadavg_start": proc_loadavg(), "load_avg_rounds": [], "skipped": {},
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "silent"}}
    tokens = shape["batch_size"] * shape["seq_len"]
    t0 = time.perf_counter()
    say(f"device {device}, precision {precision} ({why}), {threads} thread(s), load {load_avg()}")

    # 1. GEMM rates at the model's shapes and one large square, fp32 and bf16
    shapes = matmul_shapes(shape["d_model"], shape["mlp_hidden"], tokens, shape["n_heads"])
    square = 128 if args.quick else 8192 if device == "cuda" else 1024
    soft_bf16 = device == "cpu" and not machine.native_bf16_cpu()  # software bf16: small and no square
    say("matmul peak ...")
    result["matmul"] = {"fp32": matmul_peak(shapes, torch.float32, args.matmul_seconds, device=device, square=square)}
    if not args.quick or short_precision(precision) == "bf16":
        result["matmul"]["bf16"] = matmul_peak(shapes, torch.bfloat16, args.matmul_seconds, device=device,
                                               max_rows=1024 if soft_bf16 else None,
                                               square=None if soft_bf16 else square)

    # 2. build every configuration: the schemes and HF at the run's precision; HF (and rope) in fp32 beside them
    registered = set(positional.names())
    configs: list[Bench] = []
    for label, name, overrides in SCHEMES:
        if args.schemes and label not in args.schemes:
            continue
        if name not in registered:
            result["skipped"][label] = f"pos={name} is not registered in ropelab.positional"
            continue
        configs.append(build_ours(label, name, shape, precision, device, overrides=overrides))
    fp32 = short_precision(precision) == "fp32"
    hf = not args.no_hf and hf_available()
    if args.no_hf:
        result["skipped"]["hf"] = "--no-hf"
    elif not hf:
        result["skipped"]["hf"] = "transformers is not installed (make bench installs it in .venv/hf)"
    else:
        configs.append(build_hf("hf", shape, precision, device))
        if not fp32:
            configs.append(build_hf("hf fp32", shape, "32-true", device))
    if not fp32 and "rope" in registered and (not args.schemes or "rope" in args.schemes):
        configs.append(build_ours("rope fp32", "rope", shape, "32-true", device))
    if args.levers and "rope" in registered:
        if fp32:  # the other precision, ours and HF
            configs.append(build_ours("rope bf16-mixed", "rope", shape, "bf16-mixed", device))
            if hf:
                configs.append(build_hf("hf bf16-mixed", shape, "bf16-mixed", device))
        else:  # attention in bf16 too (LlamaConfig.attn_fp32=False; it matters on CPU only)
            configs.append(build_ours("rope bf16 attention", "rope", shape, precision, device, attn_fp32=False))
        configs.append(build_ours("rope compiled", "rope", shape, precision, device,
                                  compile_model=True, note="torch.compile; warm-up 1 includes compiling"))

    generator = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, shape["vocab_size"], (shape["batch_size"], shape["seq_len"]), generator=generator)
    targets_ = torch.randint(0, shape["vocab_size"], (shape["batch_size"], shape["seq_len"]), generator=generator)
    inputs, targets_ = inputs.to(device), targets_.to(device)

    # 3. warm-up, then interleaved rounds
    for bench in configs:
        say(f"warm-up {bench.label} ...")
        for _ in range(args.warmup):
            t = time.perf_counter()
            bench.step(inputs, targets_)
            _sync(device)
            bench.warmup_times.append(time.perf_counter() - t)
    slow = {b.label for b in configs if soft_bf16 and b.autocast}  # software bf16: one step per round is plenty
    for r in range(args.rounds):
        result["load_avg_rounds"].append(load_avg()[0] if load_avg() else None)
        say(f"round {r + 1}/{args.rounds} (load {load_avg()}) ...")
        for bench in configs[r % len(configs):] + configs[: r % len(configs)]:
            steps = 1 if bench.label in slow else args.steps
            _sync(device)
            t, c = time.perf_counter(), time.process_time()
            for _ in range(steps):
                bench.step(inputs, targets_)
            _sync(device)
            bench.times.append((time.perf_counter() - t) / steps)
            bench.cpu_times.append((time.process_time() - c) / steps)

    rows: dict[str, dict[str, Any]] = {}
    peak_fp32 = result["matmul"]["fp32"]["peak_gflops"]
    for bench in configs:
        step_s, best_s = statistics.median(bench.times), min(bench.times)
        mm = result["matmul"].get(short_precision(bench.precision), result["matmul"]["fp32"])
        limit_s = bench.flops / (mm["peak_gflops"] * 1e9)  # the step at the best GEMM rate of its precision
        gflops = bench.flops / best_s / 1e9  # best round against the fastest matmul: like against like
        rows[bench.label] = {"precision": bench.precision, "step_s": round(step_s, 4), "best_step_s": round(best_s, 4),
                             "step_s_all": [round(t, 4) for t in bench.times],
                             "cpu_s": round(statistics.median(bench.cpu_times), 4),
                             "tokens_per_s": round(tokens / step_s, 1), "gflop_per_step": round(bench.flops / 1e9, 2),
                             "gflops_best": round(gflops, 2), "limit_s": _sig(limit_s),
                             "limit_gemm": f"{mm['dtype']} {mm['peak_gflops']} GFLOP/s",
                             "fraction_of_limit": _sig(limit_s / best_s),
                             "fraction_of_fp32_peak": _sig(gflops / peak_fp32),
                             "params": bench.params, "warmup_s": [round(t, 2) for t in bench.warmup_times]}
        if bench.note:
            rows[bench.label]["note"] = bench.note
    # speed ratios: per round (the configurations of one round ran back to back, under the same load), then the
    # median over rounds; "_cpu" is the same from process CPU time, which a busy machine inflates less
    by_label = {b.label: b for b in configs}
    for bench in configs:
        row = rows[bench.label]
        same = by_label.get("hf")  # HF at the run's precision; "vs_hf" only for rows at that precision
        hf32 = by_label.get("hf fp32" if not fp32 else "hf")
        for key, base in (("vs_hf", same if bench.precision == precision else None), ("vs_hf_fp32", hf32),
                          ("vs_rope", by_label.get("rope"))):
            if base is not None:
                row[key], row[key + "_cpu"] = _ratio(base, bench), _ratio(base, bench, cpu=True)
    result["steps"] = rows
    result["targets"] = targets(result)

    # 4. generators vs what training consumes (rope's tokens/s at each task's sequence length)
    say("generators ...")
    consume_tokens = rows.get("rope", next(iter(rows.values()), {})).get("tokens_per_s")
    gens = generator_rates(32 if not args.quick else 4, args.gen_seconds)
    for g in gens.values():
        if "samples_per_s" in g and consume_tokens:
            g["training_consumes_per_s"] = round(consume_tokens / g["seq_len"], 1)
            g["ratio"] = round(g["samples_per_s"] / g["training_consumes_per_s"], 1)
    result["generators"] = gens

    # 5. a real default run: peak RSS, wall time, start-up
    if args.run_steps:
        say(f"default run, {args.run_steps} steps ...")
        result["default_run"] = default_run(args.run_steps, args.threads, accelerator=device)

    # 6. the bifocal_table1 sweep, estimated from its own (task, scheme) step times
    if args.sweep_estimate:
        startup = (result.get("default_run") or {}).get("startup_and_teardown_s")
        result["sweep_estimate"] = sweep_estimate(precision, device, 2 if args.quick else 3, say, startup,
                                                  quick=args.quick)
    result["load_avg_end"] = load_avg()
    result["proc_loadavg_end"] = proc_loadavg()
    result["bench_seconds"] = round(time.perf_counter() - t0, 1)
    return result


def markdown(result: dict[str, Any]) -> str:
    cpu = result["cpu"]
    isa = "AMX" if cpu["amx_bf16"] else "AVX-512-bf16" if cpu["avx512_bf16"] else "AVX-512" if cpu["avx512f"] \
        else "AVX2" if cpu["avx2"] else "no AVX2"
    s = result["shape"]
    where = f"GPU {result['gpu']}, " if result.get("gpu") else ""
    rounds = result.get("load_avg_rounds") or []
    lines = [f"Bench {result['date'][:10]} — {where}{cpu['model']} ({cpu['cores']} cores, {isa}; flags "
             f"{' '.join(cpu['flags']) or 'none'}), torch {cpu['torch']}, device {result['device']}, "
             f"{result['threads']} thread(s)",
             f"Precision {result['precision']} ({result['precision_why']}). Load average (1 min) "
             f"{result['load_avg_start'][:1]} at the start, {min(rounds, default='–')}–{max(rounds, default='–')} "
             f"during the rounds, {result['load_avg_end'][:1]} at the end (/proc/loadavg "
             f"'{result.get('proc_loadavg_start', '')}' → '{result.get('proc_loadavg_end', '')}')",
             f"d_model {s['d_model']}, {s['n_layers']} layers, {s['n_heads']} heads, MLP {s['mlp_hidden']}, "
             f"seq {s['seq_len']}, batch {s['batch_size']}; full AdamW training step, median of "
             f"{result['args']['rounds']} interleaved rounds", "",
             "| config | precision | step median (s) | best (s) | tokens/s | vs HF same precision | vs HF fp32 "
             "| vs rope | GFLOP/s (best) | of limit | limit (s) at |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]

    def ratio(row, key):
        return f"{row[key]:.2f} ({row[key + '_cpu']:.2f})" if key in row else "–"

    for label, row in result["steps"].items():
        lines.append(f"| {label} | {row['precision']} | {row['step_s']:.4g} | {row['best_step_s']:.4g} | "
                     f"{row['tokens_per_s']:,.0f} | {ratio(row, 'vs_hf')} | {ratio(row, 'vs_hf_fp32')} | "
                     f"{ratio(row, 'vs_rope')} | {row['gflops_best']:.1f} | {100 * row['fraction_of_limit']:.0f} % | "
                     f"{row['limit_s']:.3g} at {row['limit_gemm']} |")
    lines += ["", "Ratios > 1 are faster: the median over rounds of the per-round ratio of step times (wall clock; "
              "process CPU time in brackets). \"of limit\": the step's FLOPs at the best GEMM rate of its precision "
              "(measured below, same run), over its best step time."]
    mm = result["matmul"]
    lines.append("GEMM rates (fastest call): " + "; ".join(
        f"{k} best {v['peak_gflops']:.1f} GFLOP/s (model shapes: best {v['model_peak_gflops']:.1f}, mix "
        f"{v['mix_gflops']:.1f}{', square ' + str(v['shapes']['square']['gflops']) if 'square' in v['shapes'] else ''})"
        for k, v in mm.items()))
    if result["skipped"]:
        lines.append("Skipped: " + "; ".join(f"{k} ({v})" for k, v in result["skipped"].items()))
    if result.get("targets"):
        lines += ["", "| target | value | met |", "|---|---:|---|"]
        for t in result["targets"]:
            met = "–" if t["met"] is None else "met" if t["met"] else "**missed**"
            value = "–" if t["value"] is None else f"{t['value']:.3g}"
            lines.append(f"| {t['target']} | {value} | {met} |")
    gens = result.get("generators", {})
    if gens:
        lines += ["", "| task generator | samples/s | training consumes/s | ratio |", "|---|---:|---:|---:|"]
        for name, g in gens.items():
            if "error" in g:
                lines.append(f"| {name} | error: {g['error'][:60]} | | |")
            else:
                lines.append(f"| {name} | {g['samples_per_s']:,.0f} | {g.get('training_consumes_per_s', '–')} | "
                             f"{g.get('ratio', '–')}× |")
    run = result.get("default_run")
    if run:
        lines += ["", f"Default run (`{run['command']}`): wall {run['wall_s']} s (fit + test {run.get('fit_test_s')} "
                      f"s), peak RSS {run.get('peak_rss_mib', '?')} MiB, {run.get('accelerator')} "
                      f"{run.get('precision')}, status {run.get('status', run.get('returncode'))}"]
    est = result.get("sweep_estimate")
    if est:
        lines += ["", f"bifocal_table1 ({est['jobs']} jobs, {est['parallel']} at a time, 1 thread each, "
                      f"{est['precision']}): **estimated** wall {est['wall_s'] / 60:.1f} min ({est['note']}; start-up "
                      f"{est['startup_s_per_job']} s per job)", "",
                  "| task / scheme | seq | train step CPU (s) | eval forward CPU (s) | job CPU (s) |",
                  "|---|---:|---:|---:|---:|"]
        for key, e in est["per_task_scheme"].items():
            lines.append(f"| {key} | {e['seq_len']} | {e['train_step_cpu_s']:.4f} | {e['eval_forward_cpu_s']:.4f} | "
                         f"{e['job_cpu_s']:.0f} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ropelab.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny config, 1 round, 1 step, no default run (a smoke test)")
    p.add_argument("--device", default="auto", choices=machine.ACCELERATORS,
                   help="as trainer.accelerator: auto (CUDA when present), cpu, gpu/cuda")
    p.add_argument("--precision", default="auto", help="as trainer.precision: auto, 32-true, bf16-mixed")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timed rounds (default 7; quick 1)")
    p.add_argument("--steps", type=int, default=None, help="steps per config per round (default 1)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per config first (default 2; quick 1)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores, as training)")
    p.add_argument("--schemes", nargs="*", default=None, help="only these labels (rope spectral ... rope+momentum)")
    p.add_argument("--no-hf", action="store_true", help="skip transformers' LlamaForCausalLM")
    p.add_argument("--levers", action="store_true",
                   help="also torch.compile (rope), the other precision (fp32 runs) or bf16 attention (bf16 runs)")
    p.add_argument("--run-steps", type=int, default=None,
                   help="steps of the real default run for peak RSS (default 20; 0 = skip; quick 0)")
    p.add_argument("--sweep-estimate", action=argparse.BooleanOptionalAction, default=None,
                   help="estimate the bifocal_table1 sweep's wall time (default: on; quick: off)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path, markdown beside it (default bench/out/bench-<UTC time>.json, untracked)")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    for key in ("d_model", "n_layers", "n_heads", "mlp_hidden", "seq_len", "batch_size"):
        p.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, dest=key)
    args = p.parse_args(argv)
    quick = args.quick
    args.rounds = args.rounds or (1 if quick else 7)
    args.steps = args.steps or 1
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 2)
    args.run_steps = args.run_steps if args.run_steps is not None else (0 if quick else 20)
    args.sweep_estimate = (not quick) if args.sweep_estimate is None else args.sweep_estimate
    args.matmul_seconds = 0.05 if quick else 0.3
    args.gen_seconds = 0.05 if quick else 0.3
    if args.out is None:
        args.out = OUT_DIR / f"bench-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}.json"
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from ropelab.core.errors import ConfigError

    args = parse_args(argv)
    try:
        result = run_bench(args)
    except ConfigError as err:  # e.g. --device cuda without CUDA
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2)
    table = markdown(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table)
    print(table, end="")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return result


if __name__ == "__main__":
    main()
