"""``make gpu-check``: one command for anyone with a GPU, writing bench/gpu.{json,md}.

    ropelab gpucheck                      # on CUDA (refuses without it): bench/gpu.json + gpu.md
    ropelab gpucheck --accelerator cpu    # the same path forced onto the CPU, tiny settings
                                                    # → bench/out/gpu-check-cpu.{json,md} (untracked)

Four steps, each in its own process so that one failing does not hide the others:

1. **tests**: the tests marked ``gpu`` (tests/run/test_gpu.py) on the device (``ROPELAB_TEST_DEVICE``);
2. **runs**: one short bio_rotation run per registered scheme, ``trainer.accelerator=<device>
   trainer.precision=auto`` (one Hydra multirun); each summary.json must say completed, on that device;
3. **bench**: ``ropelab bench --device <device>`` (ours per scheme vs Hugging Face's Llama at the
   precision auto picks, bf16 on CUDA, and vs HF fp32; on CUDA with ``--levers``: torch.compile measured);
4. **throughput**: several jobs on one device at once: the same sweep of identical short jobs (seeds) with
   ``hydra/launcher=gpu_shared`` at each ``--concurrency`` (processes side by side) and with
   ``hydra/launcher=packed`` at each ``--packs`` (members trained together in one process, one vmapped step),
   jobs/hour against the first row.

``--tiny`` (the default off CUDA) shrinks all four to seconds: tiny model, 2 steps, the bench's ``--quick``.
tests/commands/test_gpucheck.py runs exactly that on the CPU, so the first GPU run is not the first run of this code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ropelab.analysis.report.tables import pipe_table
from ropelab.core import machine, positional
from ropelab.core.cli import REPO

ROOT = REPO
TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.mlp_hidden=64", "data.batch_size=4",
        "data.val_size=8", "data.test_size=8", "data.ood_size=8", "data.eval_batch_size=8", "task.gap_min=10",
        "task.gap_max=20", "task.ood.gap_min=20", "task.ood.gap_max=30"]


def _run(cmd: list[str], timeout: int, env: dict | None = None) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "WANDB_MODE": "offline", **(env or {})})
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        rc, out = 124, f"timed out after {timeout} s\n{(err.stdout or b'')[-3000:]!r}"
    return {"command": " ".join(cmd[1:]), "returncode": rc, "seconds": round(time.perf_counter() - start, 1),
            "tail": out[-2500:] if rc else out[-400:]}


def _summaries(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*/summary.json"))]


def step_tests(device: str, timeout: int) -> dict[str, Any]:
    result = _run([sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider",
                   str(ROOT / "tests" / "run" / "test_gpu.py")], timeout, env={"ROPELAB_TEST_DEVICE": device})
    lines = [line for line in result["tail"].splitlines() if line.strip()]
    result["summary"] = lines[-1] if lines else ""
    result["ok"] = result["returncode"] == 0 and "passed" in result["summary"] and "skipped" not in result["summary"]
    return result


def step_runs(device: str, tiny: bool, steps: int, runs_dir: Path, timeout: int) -> dict[str, Any]:
    schemes = positional.names()
    folder = runs_dir / "schemes"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "task=bio_rotation", f"pos={','.join(schemes)}",
           f"trainer.max_steps={steps}", f"trainer.val_every={max(1, steps // 2)}", f"trainer.accelerator={device}",
           "trainer.precision=auto", "trainer.progress=off", "rerun=true", "name=gpu-check",
           f"hydra.sweep.dir={folder}", "hydra.sweep.subdir=${pos.name}", *(TINY if tiny else [])]
    result = _run(cmd, timeout)
    rows = {}
    for s in _summaries(folder):
        rows[s["pos"]] = {"status": s["status"], "accelerator": s.get("accelerator"), "precision": s.get("precision"),
                          "compile": s.get("compile"), "steps": s.get("steps"), "wall_s": s.get("wall_seconds"),
                          "train_loss": s.get("final", {}).get("train/loss"),
                          "val_acc": s.get("final", {}).get("val/acc"), "error": s.get("error")}
    result["runs"] = rows
    result["ok"] = result["returncode"] == 0 and set(rows) == set(schemes) and all(
        r["status"] == "completed" and r["accelerator"] == device for r in rows.values())
    return result


def step_bench(device: str, tiny: bool, out: Path, timeout: int) -> dict[str, Any]:
    # the bench's own files: beside the output, but never as new files in the tracked bench/ folder
    bench_json = (ROOT / "bench" / "out" if out.parent == ROOT / "bench" else out.parent) / f"{out.stem}-bench.json"
    bench_json.parent.mkdir(parents=True, exist_ok=True)
    args = ["--quick"] if tiny else ["--levers", "--no-sweep-estimate", "--run-steps", "20"]
    result = _run([sys.executable, "-m", "ropelab", "bench", "--device", device, "--silent", "--out", str(bench_json),
                   *args], timeout)
    if bench_json.is_file():
        result["bench"] = json.loads(bench_json.read_text())
        result["table"] = bench_json.with_suffix(".md").read_text()
    result["ok"] = result["returncode"] == 0 and bool(result.get("bench", {}).get("steps"))
    return result


def step_throughput(device: str, tiny: bool, steps: int, jobs: int, concurrency: list[int], runs_dir: Path,
                    timeout: int, packs: list[int] = ()) -> dict[str, Any]:
    """The same ``jobs`` identical-length runs (seeds 0…jobs−1) at each concurrency (gpu_shared), then in packs
    of each size (packed): wall of the whole command (what a user waits for, start-ups included) and jobs per
    hour."""
    rows = []
    ways = [("gpu_shared", f"hydra.launcher.n_jobs={k}", k, f"throughput-n{k}") for k in concurrency]
    ways += [("packed", f"hydra.launcher.pack={k}", k, f"throughput-pack{k}") for k in packs]
    for launcher, setting, k, name in ways:
        folder = runs_dir / name
        cmd = [sys.executable, str(ROOT / "train.py"), "-m", "task=bio_rotation", "pos=rope",
               f"seed={','.join(map(str, range(jobs)))}", f"trainer.max_steps={steps}",
               f"trainer.val_every={max(1, steps // 2)}", f"trainer.accelerator={device}", "trainer.precision=auto",
               "trainer.progress=off", "rerun=true", "name=gpu-check-throughput", f"hydra.sweep.dir={folder}", "hydra.sweep.subdir=seed${seed}",
               f"hydra/launcher={launcher}", setting, *(TINY if tiny else [])]
        r = _run(cmd, timeout)
        done = [s for s in _summaries(folder) if s["status"] == "completed"]
        rows.append({"launcher": launcher, "n_jobs": k, "jobs": jobs, "completed": len(done), "steps": steps,
                     "wall_s": r["seconds"],
                     "jobs_per_hour": round(jobs * 3600 / r["seconds"], 1), "returncode": r["returncode"],
                     "tail": r["tail"] if r["returncode"] else ""})
    base = rows[0]["wall_s"] if rows else None
    for row in rows:
        row["speedup_vs_first"] = round(base / row["wall_s"], 2) if base else None
    return {"rows": rows, "ok": all(r["returncode"] == 0 and r["completed"] == jobs for r in rows)}


def markdown(result: dict[str, Any]) -> str:
    s = result["steps"]
    where = result.get("gpu") or f"{result['cpu']['model']} (accelerator forced to {result['device']})"
    lines = [f"# gpu-check {result['date'][:16]} — {where}", "",
             f"`{result['command']}`: torch {result['torch']}, {'tiny settings' if result['tiny'] else 'full settings'}"
             f", {result['seconds']} s in all, **{'all steps passed' if result['ok'] else 'FAILED: ' + ', '.join(k for k, v in s.items() if not v.get('ok'))}**",
             ""]
    if "tests" in s:
        lines += [f"## Tests marked gpu: {'ok' if s['tests']['ok'] else 'FAILED'} — {s['tests']['summary']} "
                  f"({s['tests']['seconds']} s)", ""]
    if "runs" in s:
        lines += [f"## One bio_rotation run per scheme: {'ok' if s['runs']['ok'] else 'FAILED'} ({s['runs']['seconds']} s)",
                  ""]
        fmt = lambda v: "–" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)  # noqa: E731
        lines += pipe_table(["scheme", "status", "device", "precision", "compile", "steps", "wall (s)", "train loss",
                             "val acc"],
                            [[name, r["status"], r["accelerator"], r["precision"], r["compile"], r["steps"], r["wall_s"],
                              fmt(r["train_loss"]), fmt(r["val_acc"])] for name, r in s["runs"]["runs"].items()],
                            "lllllrrrr")
        lines.append("")
    if "bench" in s:
        lines += [f"## Bench: {'ok' if s['bench']['ok'] else 'FAILED'} ({s['bench']['seconds']} s)", "",
                  s["bench"].get("table", s["bench"]["tail"]), ""]
    if "throughput" in s:
        lines += [f"## Several jobs on one device: {'ok' if s['throughput']['ok'] else 'FAILED'}", ""]
        lines += pipe_table(["launcher", "jobs at once", "jobs", "steps each", "completed", "wall (s)", "jobs/hour",
                             "vs the first row"],
                            [["packed (members)" if r.get("launcher") == "packed" else "gpu_shared (processes)",
                              r["n_jobs"], r["jobs"], r["steps"], r["completed"], r["wall_s"], r["jobs_per_hour"],
                              f"{r['speedup_vs_first']}×"] for r in s["throughput"]["rows"]], "lrrrrrrr")
        lines.append("")
    failed = [f"### {k}\n```\n{v.get('tail', '')[-2000:]}\n```" for k, v in s.items() if not v.get("ok") and k != "throughput"]
    return "\n".join(lines + failed) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ropelab gpucheck", description=__doc__.split("\n\n")[0])
    p.add_argument("--accelerator", default="cuda", choices=machine.ACCELERATORS,
                   help="cuda (default; refused without CUDA), or cpu to exercise the same path on the CPU")
    p.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=None,
                   help="tiny model, 2 steps, quick bench (default: on unless on CUDA)")
    p.add_argument("--steps", type=int, default=None, help="steps per scheme run (default 50; tiny 2)")
    p.add_argument("--jobs", type=int, default=None, help="jobs in each throughput sweep (default 8; tiny 2)")
    p.add_argument("--concurrency", default=None, help="n_jobs values, comma-separated (default 1,4,8; tiny 1,2)")
    p.add_argument("--packs", default=None,
                   help="hydra.launcher.pack values, comma-separated; 0 for none (default 4,8; tiny 2)")
    p.add_argument("--throughput-steps", type=int, default=None, help="steps per throughput job (default 400; tiny 2)")
    p.add_argument("--skip", default="", help="comma-separated steps to skip: tests,runs,bench,throughput")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path, markdown beside it (default bench/gpu.json on CUDA, bench/out/gpu-check-<device>.json)")
    p.add_argument("--runs-dir", type=Path, default=None, help="where the runs go (default runs/gpu-check-<device>)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per step")
    args = p.parse_args(argv)

    from ropelab.core.errors import ConfigError

    try:
        device, precision, why = machine.choose(args.accelerator, "auto")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tiny = (device != "cuda") if args.tiny is None else args.tiny
    out = args.out or (ROOT / "bench" / "gpu.json" if device == "cuda" else
                       ROOT / "bench" / "out" / f"gpu-check-{device}.json")
    runs_dir = args.runs_dir or ROOT / "runs" / f"gpu-check-{device}"
    steps = args.steps or (2 if tiny else 50)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    concurrency = [int(k) for k in (args.concurrency or ("1,2" if tiny else "1,4,8")).split(",")]
    packs = [int(k) for k in (args.packs or ("2" if tiny else "4,8")).split(",") if int(k)]
    out.parent.mkdir(parents=True, exist_ok=True)
    say = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731

    start = time.perf_counter()
    result: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": device,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None, "cpu": machine.cpu(),
        "torch": torch.__version__, "precision": precision, "precision_why": why, "tiny": tiny,
        "command": "ropelab gpucheck " + " ".join(argv if argv is not None else sys.argv[1:]),
        "steps": {}, **machine.git_commit()}
    say(f"gpu-check on {result['gpu'] or device} ({precision}: {why}); {'tiny' if tiny else 'full'} settings")
    if "tests" not in skip:
        say("1/4 tests marked gpu ...")
        result["steps"]["tests"] = step_tests(device, args.timeout)
    if "runs" not in skip:
        say(f"2/4 one bio_rotation run per scheme, {steps} steps ...")
        result["steps"]["runs"] = step_runs(device, tiny, steps, runs_dir, args.timeout)
    if "bench" not in skip:
        say("3/4 bench ...")
        result["steps"]["bench"] = step_bench(device, tiny, out, args.timeout)
    if "throughput" not in skip:
        say(f"4/4 several jobs at once: n_jobs {concurrency}, packs of {packs} ...")
        result["steps"]["throughput"] = step_throughput(
            device, tiny, args.throughput_steps or (2 if tiny else 400), args.jobs or (2 if tiny else 8), concurrency,
            runs_dir, args.timeout, packs)
    result["ok"] = all(step.get("ok") for step in result["steps"].values())
    result["seconds"] = round(time.perf_counter() - start, 1)
    text = markdown(result)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(text)
    print(text, end="")
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
