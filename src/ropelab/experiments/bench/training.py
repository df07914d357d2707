"""The bench's training-path measures: the task generators' rates, the ``bifocal_table1`` sweep estimate and one real
``train.py`` run."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import OmegaConf

from ropelab.experiments.bench.hardware import sync, time_call
from ropelab.experiments.bench.models import CONF, QUICK, ROOT, build_ours
import tasks


# conf/experiment/bifocal_table1.yaml: what --sweep-estimate prices (2 parallel one-thread jobs, as `make table1
# LAUNCHER=joblib` on 2 cores)
TABLE1 = dict(tasks=("dyck3", "bio_rotation", "mod_arith"), schemes=("rope", "spectral", "bifocal"), seeds=3,
              steps=400, val_every=50, batch_size=32, eval_batch_size=128, eval_size=256, parallel=2)


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

            seconds = time_call(one_batch, min_seconds, min_calls=3)
            out[name] = {"seq_len": task.seq_len, "samples_per_s": round(batch_size / seconds, 1)}
        except Exception as err:  # a task that cannot be built here is reported, not fatal
            out[name] = {"error": f"{type(err).__name__}: {err}"}
    return out


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
                sync(device)
                out = []
                for _ in range(n):
                    c = clock()
                    fn()
                    sync(device)
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
