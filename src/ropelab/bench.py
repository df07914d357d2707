"""Training-step benchmark: our Llama per positional scheme against Hugging Face's LlamaForCausalLM.

    python -m ropelab.bench              # the reference config (make bench); writes bench/bench.json + bench.md
    python -m ropelab.bench --quick      # tiny config, 1 round: checks that the bench runs (seconds)
    python -m ropelab.bench --levers     # also bf16 autocast (ours and HF) and torch.compile

What one "step" is, for every configuration: forward, loss (``LitLM.loss``), backward, gradient clipping
at 1.0 (as ``trainer.gradient_clip_val``), AdamW step, zero_grad. Our model gets the optimiser of
``LitLM.configure_optimizers`` (the training path's param groups); HF's Llama, built from the same config
(random init, no download, ``attn_implementation="sdpa"``, same parameter count), gets AdamW with the same
hyper-parameters and the same decay / no-decay split.

Every configuration is built and warmed up first; then the timed rounds go round-robin over all of them
(each round starting one configuration later), so a drift in machine load hits all configurations alike.
Per configuration: the median and best step time over the rounds; speed ratios are taken per round and
then the median over rounds, from wall clock and from process CPU time (which a busy machine inflates less).
Only ratios measured within one run are meaningful; the JSON records the load average before and after.

FLOPs per step: 6 · (non-embedding parameters) · tokens + attention, 6 · layers · B · H · T² · (w_qk + w_v)
(QKᵀ and AV, forward and backward, causal half not subtracted). The matmul peak is measured in the same run
at the model's own shapes (fp32 and bf16), so "fraction of peak" is relative to what this CPU does.
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
from typing import Any, Callable

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"

# (label, pos config overrides on top of conf/pos/<name>.yaml)
SCHEMES: list[tuple[str, str, dict]] = [
    ("rope", "rope", {}),
    ("spectral", "spectral", {}),
    ("bifocal", "bifocal", {}),
    ("pope", "pope", {}),
    ("alibi", "alibi", {}),
    ("nope", "nope", {}),
    ("rope+momentum", "rope", {"momentum": {"gamma": 0.5}}),
]

REFERENCE = dict(d_model=128, n_layers=4, n_heads=4, mlp_hidden=512, seq_len=256, batch_size=32, vocab_size=16)
QUICK = dict(d_model=32, n_layers=1, n_heads=2, mlp_hidden=64, seq_len=32, batch_size=4, vocab_size=16)


# ----------------------------------------------------------------------------------------------- machine


def cpu_info() -> dict[str, Any]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": model, "cores": cores, "avx2": "avx2" in flags, "avx512f": "avx512f" in flags,
            "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
            "torch": torch.__version__, "python": platform.python_version()}


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


# ----------------------------------------------------------------------------------------------- matmul peak


def _time_call(fn: Callable[[], Any], min_seconds: float, min_calls: int = 2, best: bool = False) -> float:
    """Median (``best``: fastest) seconds per call, calling ``fn`` until ``min_seconds`` elapsed, after a warm-up."""
    fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_seconds:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) if best else statistics.median(times)


def matmul_shapes(d: int, mlp: int, tokens: int, heads: int) -> dict[str, tuple[int, int, int]]:
    """(m, k, n) of the model's matmuls, forward and the weight-gradient form of backward."""
    return {"qkv": (tokens, d, 3 * d), "attn_out": (tokens, d, d), "gate_up": (tokens, d, 2 * mlp),
            "down": (tokens, mlp, d), "gate_up_wgrad": (d, tokens, 2 * mlp), "down_wgrad": (mlp, tokens, d)}


def matmul_peak(shapes: dict[str, tuple[int, int, int]], dtype: torch.dtype, min_seconds: float,
                max_rows: int | None = None) -> dict[str, Any]:
    """GFLOP/s per shape; ``max_rows`` caps the token dimension (bf16 without AMX is too slow for full size)."""
    per_shape, flops_total, time_total = {}, 0.0, 0.0
    for name, (m, k, n) in shapes.items():
        if max_rows:
            m, k = (min(m, max_rows), k) if not name.endswith("wgrad") else (m, min(k, max_rows))
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        seconds = _time_call(lambda: a @ b, min_seconds, best=True)  # a peak: the fastest call, not the median
        flops = 2.0 * m * k * n
        per_shape[name] = {"shape": [m, k, n], "gflops": round(flops / seconds / 1e9, 2)}
        flops_total, time_total = flops_total + flops, time_total + seconds
    rates = [v["gflops"] for v in per_shape.values()]
    return {"dtype": str(dtype).replace("torch.", ""), "peak_gflops": max(rates),
            "mix_gflops": round(flops_total / time_total / 1e9, 2), "shapes": per_shape}


# ----------------------------------------------------------------------------------------------- models


def pos_config(name: str, overrides: dict) -> dict:
    base = OmegaConf.to_container(OmegaConf.load(CONF / "pos" / f"{name}.yaml"), resolve=True)
    return OmegaConf.to_container(OmegaConf.merge(base, overrides), resolve=True)


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
                 autocast: bool = False, note: str = ""):
        self.label, self.model, self.optimizer, self.logits = label, model, optimizer, logits
        self.flops, self.params, self.autocast, self.note = flops, params, autocast, note
        self.times: list[float] = []
        self.cpu_times: list[float] = []
        self.warmup_times: list[float] = []

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        from ropelab.lit import LitLM

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            logits = self.logits(inputs)
        loss = LitLM.loss(logits, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())


def build_ours(label: str, pos: dict, shape: dict, compile_model: bool = False, autocast: bool = False) -> Bench:
    from types import SimpleNamespace

    from ropelab.lit import LitLM
    from ropelab.model import LlamaConfig, build_model

    cfg = LlamaConfig(vocab_size=shape["vocab_size"], d_model=shape["d_model"], n_layers=shape["n_layers"],
                      n_heads=shape["n_heads"], mlp_hidden=shape["mlp_hidden"], max_len=shape["seq_len"])
    torch.manual_seed(0)
    model = build_model(cfg, pos)
    # the optimiser of the training path (LitLM's param groups), without a Trainer around it
    optimizer = LitLM.configure_optimizers(SimpleNamespace(model=model, optim=optim_config(), max_steps=400))["optimizer"]
    non_embedding = model.num_parameters() - model.embed.weight.numel()
    qk_width = model.pos.qk_width(cfg.head_dim)
    flops = flops_per_step(non_embedding, cfg.n_layers, cfg.n_heads, shape["seq_len"], shape["batch_size"],
                           qk_width, qk_width)  # v is padded to the q/k width when they differ
    forward: Callable = model
    if compile_model:
        forward = torch.compile(model)
    return Bench(label, model, optimizer, forward, flops, model.num_parameters(), autocast=autocast)


HF_DIR = ROOT / ".venv" / "hf"  # where `make bench` installs the hf extra, outside the training venv


def hf_available() -> bool:
    if HF_DIR.is_dir() and str(HF_DIR) not in sys.path:
        sys.path.append(str(HF_DIR))  # appended: the venv's own numpy, torch, … still come first
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def build_hf(label: str, shape: dict, autocast: bool = False) -> Bench:
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
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", torch_dtype=torch.float32)
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
    return Bench(label, model, optimizer, lambda idx: model(input_ids=idx).logits, flops, params, autocast=autocast,
                 note=f"transformers {transformers.__version__}, attn {model.config._attn_implementation}")


# ----------------------------------------------------------------------------------------------- generators


def generator_rates(batch_size: int, min_seconds: float) -> dict[str, dict[str, Any]]:
    """Samples/s of every registered task's generator at its default config (training batches)."""
    import tasks
    from ropelab.data import build_tasks, draw

    out: dict[str, dict[str, Any]] = {}
    for name in tasks.names():
        path = CONF / "task" / f"{name}.yaml"
        try:
            task_cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True) if path.exists() else {"name": name}
            task, _ = build_tasks(task_cfg)
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


# ----------------------------------------------------------------------------------------------- a real run


def default_run(max_steps: int, threads: int | None, timeout: int = 900) -> dict[str, Any]:
    """``python train.py`` (default config, ``max_steps`` steps) in a temporary folder: wall time and peak RSS.

    The peak is the child's ``VmHWM`` (/proc/<pid>/status), polled until it exits: not ``ru_maxrss``, which
    Linux carries over from the parent's address space at fork/exec (it would report this bench's own RSS)."""
    overrides = [f"trainer.max_steps={max_steps}"] + ([f"trainer.threads={threads}"] if threads else [])
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
            result.update(status=summary.get("status"), fit_test_s=summary.get("wall_seconds"))
            if summary.get("wall_seconds") is not None:
                result["startup_and_teardown_s"] = round(wall - summary["wall_seconds"], 2)
        except (OSError, ValueError):
            result["output_tail"] = (Path(tmp) / "out.txt").read_text()[-1500:]
        return result


# ----------------------------------------------------------------------------------------------- main


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from ropelab import positional

    shape = dict(QUICK if args.quick else REFERENCE)
    for key in ("d_model", "n_layers", "n_heads", "mlp_hidden", "seq_len", "batch_size"):
        if getattr(args, key, None):
            shape[key] = getattr(args, key)
    threads = args.threads or cpu_info()["cores"] or 1
    torch.set_num_threads(threads)
    say = (lambda *a: None) if args.silent else (lambda *a: print(*a, file=sys.stderr, flush=True))
    result: dict[str, Any] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu_info(),
                              "threads": threads, "shape": shape, "load_avg_start": load_avg(), "skipped": {},
                              "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "silent"}}
    tokens = shape["batch_size"] * shape["seq_len"]
    t0 = time.perf_counter()

    # 1. matmul peak at the model's shapes
    shapes = matmul_shapes(shape["d_model"], shape["mlp_hidden"], tokens, shape["n_heads"])
    say("matmul peak ...")
    result["matmul"] = {"fp32": matmul_peak(shapes, torch.float32, args.matmul_seconds)}
    if not args.quick:
        result["matmul"]["bf16"] = matmul_peak(shapes, torch.bfloat16, args.matmul_seconds, max_rows=1024)

    # 2. build every configuration
    registered = set(positional.names())
    configs: list[Bench] = []
    for label, name, overrides in SCHEMES:
        if args.schemes and label not in args.schemes:
            continue
        if name not in registered:
            result["skipped"][label] = f"pos={name} is not registered in ropelab.positional"
            continue
        configs.append(build_ours(label, pos_config(name, overrides), shape))
    if args.no_hf:
        result["skipped"]["hf"] = "--no-hf"
    elif not hf_available():
        result["skipped"]["hf"] = "transformers is not installed (make bench installs it in .venv/hf)"
    else:
        configs.append(build_hf("hf", shape))
    if args.levers and "rope" in registered:
        configs.append(build_ours("rope bf16-mixed", pos_config("rope", {}), shape, autocast=True))
        if hf_available() and not args.no_hf:
            configs.append(build_hf("hf bf16-mixed", shape, autocast=True))
        configs.append(build_ours("rope compiled", pos_config("rope", {}), shape, compile_model=True))

    generator = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, shape["vocab_size"], (shape["batch_size"], shape["seq_len"]), generator=generator)
    targets = torch.randint(0, shape["vocab_size"], (shape["batch_size"], shape["seq_len"]), generator=generator)

    # 3. warm-up, then interleaved rounds
    for bench in configs:
        say(f"warm-up {bench.label} ...")
        for _ in range(args.warmup):
            t = time.perf_counter()
            bench.step(inputs, targets)
            bench.warmup_times.append(time.perf_counter() - t)
    slow = {b.label for b in configs if "bf16" in b.label}  # software bf16 here: one step per round is plenty
    for r in range(args.rounds):
        say(f"round {r + 1}/{args.rounds} (load {load_avg()}) ...")
        for bench in configs[r % len(configs):] + configs[: r % len(configs)]:
            steps = 1 if bench.label in slow else args.steps
            t, c = time.perf_counter(), time.process_time()
            for _ in range(steps):
                bench.step(inputs, targets)
            bench.times.append((time.perf_counter() - t) / steps)
            bench.cpu_times.append((time.process_time() - c) / steps)

    peak = result["matmul"]["fp32"]["peak_gflops"]
    rows: dict[str, dict[str, Any]] = {}
    for bench in configs:
        step_s, best_s = statistics.median(bench.times), min(bench.times)
        gflops = bench.flops / best_s / 1e9  # best round against the fastest matmul: like against like
        rows[bench.label] = {"step_s": round(step_s, 4), "best_step_s": round(best_s, 4),
                             "step_s_all": [round(t, 4) for t in bench.times],
                             "cpu_s": round(statistics.median(bench.cpu_times), 4),
                             "tokens_per_s": round(tokens / step_s, 1), "gflop_per_step": round(bench.flops / 1e9, 2),
                             "gflops_best": round(gflops, 2), "fraction_of_fp32_peak": round(gflops / peak, 3),
                             "params": bench.params, "warmup_s": [round(t, 2) for t in bench.warmup_times]}
        if bench.note:
            rows[bench.label]["note"] = bench.note
    # speed ratios: per round (the configurations of one round ran back to back, under the same load), then the
    # median over rounds; "_cpu" is the same from process CPU time, which a busy machine inflates less
    by_label = {b.label: b for b in configs}
    for baseline, key in (("hf", "vs_hf_fp32"), ("rope", "vs_rope")):
        if baseline in by_label:
            base = by_label[baseline]
            for bench in configs:
                rows[bench.label][key] = round(statistics.median(
                    [b / t for b, t in zip(base.times, bench.times)]), 3)
                rows[bench.label][key + "_cpu"] = round(statistics.median(
                    [b / t for b, t in zip(base.cpu_times, bench.cpu_times)]), 3)
    result["steps"] = rows

    # 4. generators vs what training consumes (rope's tokens/s at each task's sequence length)
    say("generators ...")
    consume_tokens = rows.get("rope", next(iter(rows.values()), {})).get("tokens_per_s")
    gens = generator_rates(32 if not args.quick else 4, args.gen_seconds)
    for g in gens.values():
        if "samples_per_s" in g and consume_tokens:
            g["training_consumes_per_s"] = round(consume_tokens / g["seq_len"], 1)
            g["ratio"] = round(g["samples_per_s"] / g["training_consumes_per_s"], 1)
    result["generators"] = gens

    # 5. a real default run: peak RSS and wall time
    if args.run_steps:
        say(f"default run, {args.run_steps} steps ...")
        result["default_run"] = default_run(args.run_steps, args.threads)
    result["load_avg_end"] = load_avg()
    result["bench_seconds"] = round(time.perf_counter() - t0, 1)
    return result


def markdown(result: dict[str, Any]) -> str:
    cpu = result["cpu"]
    isa = "AMX" if cpu["amx_bf16"] else "AVX-512" if cpu["avx512f"] else "AVX2" if cpu["avx2"] else "no AVX2"
    s = result["shape"]
    lines = [f"Bench {result['date'][:10]} — {cpu['model']} ({cpu['cores']} cores, {isa}), torch {cpu['torch']}, "
             f"{result['threads']} thread(s), load avg {result['load_avg_start']} → {result['load_avg_end']}",
             f"d_model {s['d_model']}, {s['n_layers']} layers, {s['n_heads']} heads, MLP {s['mlp_hidden']}, "
             f"seq {s['seq_len']}, batch {s['batch_size']}; full AdamW training step, median of "
             f"{result['args']['rounds']} interleaved rounds", "",
             "| config | step median (s) | best (s) | tokens/s | vs HF fp32 (CPU time) | vs rope (CPU time) "
             "| GFLOP/s (best) | of fp32 matmul peak |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def ratio(row, key):
        return f"{row[key]:.2f} ({row[key + '_cpu']:.2f})" if key in row else "–"

    for label, row in result["steps"].items():
        lines.append(f"| {label} | {row['step_s']:.3f} | {row['best_step_s']:.3f} | {row['tokens_per_s']:,.0f} | "
                     f"{ratio(row, 'vs_hf_fp32')} | {ratio(row, 'vs_rope')} | {row['gflops_best']:.1f} | "
                     f"{100 * row['fraction_of_fp32_peak']:.0f} % |")
    lines += ["", "Ratios > 1 are faster: the median over rounds of the per-round ratio of step times (wall clock; "
              "process CPU time in brackets)."]
    mm = result["matmul"]
    lines.append("Matmul at the model's shapes (fastest call): " + "; ".join(
        f"{k} peak {v['peak_gflops']:.1f} GFLOP/s (mix {v['mix_gflops']:.1f})" for k, v in mm.items()))
    if result["skipped"]:
        lines.append("Skipped: " + "; ".join(f"{k} ({v})" for k, v in result["skipped"].items()))
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
        lines += ["", f"Default run (`{run['command']}`): wall {run['wall_s']} s, peak RSS "
                      f"{run.get('peak_rss_mib', '?')} MiB, status {run.get('status', run.get('returncode'))}"]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ropelab.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny config, 1 round, 1 step, no default run (a smoke test)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timed rounds (default 7; quick 1)")
    p.add_argument("--steps", type=int, default=None, help="steps per config per round (default 1)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per config first (default 2; quick 1)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores, as training)")
    p.add_argument("--schemes", nargs="*", default=None, help="only these labels (rope spectral ... rope+momentum)")
    p.add_argument("--no-hf", action="store_true", help="skip transformers' LlamaForCausalLM")
    p.add_argument("--levers", action="store_true", help="also bf16 autocast (ours, HF) and torch.compile (rope)")
    p.add_argument("--run-steps", type=int, default=None,
                   help="steps of the real default run for peak RSS (default 20; 0 = skip; quick 0)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "bench.json", help="JSON path (markdown beside it)")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    for key in ("d_model", "n_layers", "n_heads", "mlp_hidden", "seq_len", "batch_size"):
        p.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, dest=key)
    args = p.parse_args(argv)
    quick = args.quick
    args.rounds = args.rounds or (1 if quick else 7)
    args.steps = args.steps or 1
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 2)
    args.run_steps = args.run_steps if args.run_steps is not None else (0 if quick else 20)
    args.matmul_seconds = 0.05 if quick else 0.3
    args.gen_seconds = 0.05 if quick else 0.3
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    result = run_bench(args)
    table = markdown(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table)
    print(table, end="")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return result


if __name__ == "__main__":
    main()
