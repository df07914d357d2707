"""The bench's command: ``run_bench`` runs every measure, ``markdown`` writes the table, ``main`` is
``ropelab bench``."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ropelab.analysis.report.tables import pipe_table
from ropelab.core import machine
from ropelab.experiments.bench.hardware import cpu_info, load_avg, matmul_peak, matmul_shapes, proc_loadavg, sync
from ropelab.experiments.bench.models import (QUICK, REFERENCE, ROOT, SCHEMES, Bench, build_hf, build_ours, hf_available,
                                              short_precision)
from ropelab.experiments.bench.mixes import MIXES, run_mixes
from ropelab.experiments.bench.mixes import markdown as mixes_markdown
from ropelab.experiments.bench.training import default_run, generator_rates, sweep_estimate


OUT_DIR = ROOT / "bench" / "out"  # untracked (.gitignore): a bench run never dirties the tree

# targets of issue 12 (docs/speed.md): scheme ratios to rope, and the reference config against HF
SCHEME_TARGETS = {"pope": 0.85, "spectral": 0.95, "bifocal": 0.95}
NATIVE_BF16_VS_HF_FP32 = 2.0
AVX2_FRACTION_OF_FP32_PEAK = 0.75


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
    if args.mixes is not None:  # the job-mix section alone (issue 23): a table's jobs under each lever
        result["mixes"] = run_mixes(args, precision, device, say, result["load_avg_rounds"])
        result.update(steps={}, targets=[], load_avg_end=load_avg(), proc_loadavg_end=proc_loadavg(),
                      bench_seconds=round(time.perf_counter() - t0, 1))
        return result

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
            sync(device)
            bench.warmup_times.append(time.perf_counter() - t)
    slow = {b.label for b in configs if soft_bf16 and b.autocast}  # software bf16: one step per round is plenty
    for r in range(args.rounds):
        result["load_avg_rounds"].append(load_avg()[0] if load_avg() else None)
        say(f"round {r + 1}/{args.rounds} (load {load_avg()}) ...")
        for bench in configs[r % len(configs):] + configs[: r % len(configs)]:
            steps = 1 if bench.label in slow else args.steps
            sync(device)
            t, c = time.perf_counter(), time.process_time()
            for _ in range(steps):
                bench.step(inputs, targets_)
            sync(device)
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
             f"'{result.get('proc_loadavg_start', '')}' → '{result.get('proc_loadavg_end', '')}')"]
    if result.get("mixes"):
        return "\n".join(lines + mixes_markdown(result["mixes"])) + "\n"
    lines += [f"d_model {s['d_model']}, {s['n_layers']} layers, {s['n_heads']} heads, MLP {s['mlp_hidden']}, "
              f"seq {s['seq_len']}, batch {s['batch_size']}; full AdamW training step, median of "
              f"{result['args']['rounds']} interleaved rounds", ""]

    def ratio(row, key):
        return f"{row[key]:.2f} ({row[key + '_cpu']:.2f})" if key in row else "–"

    lines += pipe_table(["config", "precision", "step median (s)", "best (s)", "tokens/s", "vs HF same precision",
                         "vs HF fp32", "vs rope", "GFLOP/s (best)", "of limit", "limit (s) at"],
                        [[label, row["precision"], f"{row['step_s']:.4g}", f"{row['best_step_s']:.4g}",
                          f"{row['tokens_per_s']:,.0f}", ratio(row, "vs_hf"), ratio(row, "vs_hf_fp32"),
                          ratio(row, "vs_rope"), f"{row['gflops_best']:.1f}", f"{100 * row['fraction_of_limit']:.0f} %",
                          f"{row['limit_s']:.3g} at {row['limit_gemm']}"] for label, row in result["steps"].items()],
                        "llrrrrrrrrl")
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
        lines += ["", *pipe_table(["target", "value", "met"],
                                  [[t["target"], "–" if t["value"] is None else f"{t['value']:.3g}",
                                    "–" if t["met"] is None else "met" if t["met"] else "**missed**"]
                                   for t in result["targets"]], "lrl")]
    gens = result.get("generators", {})
    if gens:
        lines += ["", *pipe_table(["task generator", "samples/s", "training consumes/s", "ratio"],
                                  [[name, f"error: {g['error'][:60]}", "", ""] if "error" in g else
                                   [name, f"{g['samples_per_s']:,.0f}", g.get("training_consumes_per_s", "–"),
                                    f"{g.get('ratio', '–')}×"] for name, g in gens.items()], "lrrr")]
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
                  *pipe_table(["task / scheme", "seq", "train step CPU (s)", "eval forward CPU (s)", "job CPU (s)"],
                              [[key, e["seq_len"], f"{e['train_step_cpu_s']:.4f}", f"{e['eval_forward_cpu_s']:.4f}",
                                f"{e['job_cpu_s']:.0f}"] for key, e in est["per_task_scheme"].items()], "lrrrr")]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ropelab bench", description=__doc__.split("\n\n")[0])
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
    p.add_argument("--mixes", nargs="*", default=None, choices=list(MIXES),
                   help="only the job-mix section: each table's jobs per core-hour under each lever (no names: "
                        "every table; ropelab.experiments.bench.mixes)")
    p.add_argument("--mix-compile", action=argparse.BooleanOptionalAction, default=None,
                   help="with --mixes, the compiled column on one cell per table (default: on; quick: off)")
    p.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                   help="with --mixes, where a step of each table's most common job shape goes (default: on)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path, markdown beside it (default bench/out/bench-<UTC time>.json, untracked)")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    for key in ("d_model", "n_layers", "n_heads", "mlp_hidden", "seq_len", "batch_size"):
        p.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, dest=key)
    args = p.parse_args(argv)
    quick = args.quick
    args.rounds = args.rounds or (1 if quick else 5 if args.mixes is not None else 7)
    args.steps = args.steps or 1
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 2)
    args.run_steps = args.run_steps if args.run_steps is not None else (0 if quick else 20)
    args.sweep_estimate = (not quick) if args.sweep_estimate is None else args.sweep_estimate
    args.matmul_seconds = 0.05 if quick else 0.3
    args.mix_compile = (not quick) if args.mix_compile is None else args.mix_compile
    args.mix_sample_s = 0.01 if quick else 0.15  # seconds of steps per timed sample of a job mix's cell
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
