"""The bench's job mixes (``ropelab bench --mixes``, issue 23): jobs per core-hour of each paper table's
jobs under each lever that takes back a tiny model's fixed per-step cost, side by side in one run.

A *cell* is one distinct job shape of a table (a preset's job at its task, scheme, batch and length; seeds and
shape-preserving values such as γ > 0 share a cell), weighted by how many of the table's jobs it stands for and
their steps. Every cell trains under every lever set with real batches of its task, round-robin after a warm-up
(each round starting one configuration later). A step is the training step every run takes
(``ropelab.core.lit.train_step``): forward under autocast, the answer-only loss, backward, the divergence check's
gradient norm, clipping at ``trainer.gradient_clip_val``, AdamW step, learning-rate schedule, zero_grad and the
scheme's projection (``project_``).

Lever sets (cumulative in "levers on", alone otherwise):

* ``today``: the step before issue 23 — AdamW as torch picks it (a for-loop over the tensors on CPU), and two
  passes over the gradients for their norm (the divergence check's, then Lightning's ``clip_grad_norm_``).
* ``fused AdamW``: ``optim.fused`` (one kernel per tensor, ``ropelab.core.lit.choose_fused``).
* ``one grad norm``: clipping by the norm the divergence check computed (``LitLM.configure_gradient_clipping``).
* ``levers on``: both, the training default now.
* ``compiled``: ``levers on`` + ``torch.compile``, on one cell per table (``COMPILED_CELLS``), with the compile
  time (cold, the first step) and the steps a run needs before compiling pays (evaluation compiles again: not
  counted). Not in the table's jobs per core-hour: ``trainer.compile`` stays off by default (docs/speed.md).
* ``packed ×K``: ``levers on`` with K members of the cell (seeds 0…K−1) in one vmap'd step (``ropelab.core.packed``,
  a prototype), on the same cells, K = 4 and on mod_arith also 2 and 8 (``PACKS``): how the gain moves with the
  members, and across the cells with the tokens of a step; its time is per member (a pack step over K).

Jobs per core-hour: the table's jobs over the process CPU time their training steps take at one thread (a core
to itself), from the medians over rounds; start-up, evaluation and checkpoints are not included, so the ratios
say what the levers do to the training loop, which is where a job's time goes. Speed-ups are taken per round
(the configurations of one round ran back to back) and then the median over rounds.

``--profile``: where one step of each table's most common cell goes under ``levers on``: the phases timed
(forward, backward, then checks + clip + optimiser + schedule), and torch.profiler's self time of matmuls, attention kernels,
autocast's weight casts (what a cache of bf16 weights could at most take back) and everything else.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from omegaconf import OmegaConf

from ropelab.analysis.report.tables import pipe_table
from ropelab.core.lit import LitLM, Member, answer_loss, train_step
from ropelab.experiments.bench.hardware import sync

# (preset, overrides of one job, jobs it stands for, steps per job or None for the preset's max_steps)
Cell = tuple[str, tuple[str, ...], int, int | None]
GAMMAS_ABOVE_ZERO = 5  # momentum_gamma's γ 0.3, 0.5, 0.7, 1.0, 2.0: same shapes and ops, timed at γ = 0.5

MIXES: dict[str, list[Cell]] = {
    "bifocal_table1": [("bifocal_table1", (f"task={t}", f"pos={p}"), 3, None)
                       for t in ("dyck3", "bio_rotation", "mod_arith") for p in ("rope", "spectral", "bifocal")],
    "momentum_gamma": [("momentum_gamma", (f"task={t}", f"pos.momentum.gamma={g}"), 3 * n, None)
                       for t in ("assoc_recall", "variable_tracking", "global_counting", "mean_pooling")
                       for g, n in ((0, 1), (0.5, GAMMAS_ABOVE_ZERO))],
    "pope_indirect": [("pope_indirect", (f"pos={p}",), 3, None)
                      for p in ("rope", "pope", "rope_half", "alibi", "learned_abs", "sinusoidal")],
    # its max_steps 1000, 2000 × 2 seeds per rung: 4 jobs of 1,500 steps on average
    "indirect_indexing_b256": [("calibrate_indirect_indexing_b256", (f"task.rung={r}",), 4, 1500) for r in (1, 2)],
}
# the cells that also train compiled: each table's cheapest to compile, and rope and PoPE side by side
COMPILED_CELLS = {"bifocal_table1": (6,), "momentum_gamma": (1,), "pope_indirect": (0, 1), "indirect_indexing_b256": (0,)}
# issue 23's targets: all levers against today's default, and PoPE's step against rope's at the same shapes
MIX_TARGETS = {"bifocal_table1": 1.5, "momentum_gamma": 2.0}
POPE_VS_ROPE = 0.85

# members per pack on those cells: K = 4, and on the smallest job (mod_arith, where the fixed part weighs most) 2 to 8
PACKS = {"bifocal_table1": (2, 4, 8)}
PACK = 4
TODAY, FUSED, ONE_NORM, ON, COMPILED = "today", "fused AdamW", "one grad norm", "levers on", "compiled"


def packed(k: int) -> str:
    return f"packed ×{k}"


def members(lever: str) -> int:
    """How many members a step of ``lever`` trains: K for ``packed ×K``, else 1."""
    return int(lever.rpartition("×")[2]) if lever.startswith("packed ×") else 1


EXTRA = (COMPILED, *(packed(k) for k in sorted({PACK, *PACKS["bifocal_table1"]})))  # columns on some cells only
LEVERS: dict[str, dict[str, bool]] = {TODAY: dict(fused=False, one_norm=False), FUSED: dict(fused=True, one_norm=False),
                                      ONE_NORM: dict(fused=False, one_norm=True), ON: dict(fused=True, one_norm=True)}


def _divergence_checks_own_norm(model: torch.nn.Module) -> torch.Tensor:
    """The extra gradient pass of a step before issue 23: the divergence check took its own norm, and Lightning's
    clipping then computed it again (the shared step's check and clipping take the second)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


@dataclass
class Job:
    """One cell of a table: its model, both optimisers (unfused, fused) over the same weights, a batch."""
    mix: str
    label: str
    jobs: int
    steps: int
    model: torch.nn.Module
    members: dict[bool, Member]              # unfused, fused: the same weights, an optimiser and schedule each
    batch: tuple[torch.Tensor, torch.Tensor]
    autocast: bool
    device: str
    forward: Callable | None = None
    compiled: Callable | None = None
    packs: dict[int, Any] = field(default_factory=dict)  # K → (ropelab.core.packed.Pack of K members, its batch)
    compile_s: float | None = None
    times: dict[str, list[float]] = field(default_factory=dict)
    cpu_times: dict[str, list[float]] = field(default_factory=dict)

    def step(self, lever: str, phases: dict[str, float] | None = None) -> float:
        """One training step under ``lever``; with ``phases``, adds each phase's seconds to it."""
        if members(lever) > 1:
            pack, batch = self.packs[members(lever)]
            pack.step(batch)
            return 0.0
        flags = LEVERS[ON if lever == COMPILED else lever]
        member = self.members[flags["fused"]]
        forward = self.compiled if lever == COMPILED else self.model
        clock = _Clock(phases, self.device)
        inputs, targets = self.batch

        def losses() -> torch.Tensor:
            with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):
                loss = answer_loss(forward(inputs), targets)
            clock("forward")
            return loss.reshape(1)

        def after_backward() -> None:
            clock("backward")
            if not flags["one_norm"]:
                _divergence_checks_own_norm(self.model)

        value, = train_step([member], losses, 0, after_backward)
        if member.diverged is not None:
            raise RuntimeError(f"{self.label}: {member.why} in the bench")
        clock("checks + clip + optimiser + schedule")
        return value


class _Clock:
    def __init__(self, phases: dict[str, float] | None, device: str):
        self.phases, self.device, self.t = phases, device, time.perf_counter()

    def __call__(self, name: str) -> None:
        if self.phases is not None:
            sync(self.device)
            now = time.perf_counter()
            self.phases[name] = self.phases.get(name, 0.0) + now - self.t
            self.t = now


def _cell_overrides(cell: Cell, quick: bool) -> list[str]:
    from ropelab.experiments.bench.models import QUICK

    preset, overrides, _, _ = cell
    small = [f"model.{k}={QUICK[k]}" for k in ("d_model", "n_layers", "n_heads", "mlp_hidden")] if quick else []
    return [f"experiment={preset}", *overrides, *small] + (["data.batch_size=4"] if quick else [])


def build_pack(job: Job, cell: Cell, k: int, precision: str, device: str, quick: bool = False) -> None:
    from ropelab.core.config import compose
    from ropelab.core.packed import Pack

    pack = Pack([compose(_cell_overrides(cell, quick) + [f"seed={i}"]) for i in range(k)], precision, device)
    job.packs[k] = (pack, pack.batch(0))


def build_job(mix: str, cell: Cell, precision: str, device: str, quick: bool = False) -> Job:
    """The cell's job as training builds it (``ropelab.core.build.model_for``, ``LitLM.configure_optimizers``),
    with one real training batch of its task."""
    import tasks
    from ropelab.core.build import model_for
    from ropelab.core.config import compose
    from ropelab.core.data import draw
    from ropelab.experiments.bench.models import short_precision

    preset, overrides, jobs, steps = cell
    cfg = compose(_cell_overrides(cell, quick))
    task, ood = tasks.build_with_ood(OmegaConf.to_container(cfg.task, resolve=True))
    model = model_for(cfg, len(task.vocab), max(task.seq_len, ood.seq_len)).to(device)
    steps = steps or int(cfg.trainer.max_steps)
    clip = float(cfg.trainer.gradient_clip_val or 0) or 1.0
    members = {fused: Member.of(LitLM(model, {**OmegaConf.to_container(cfg.optim, resolve=True), "fused": fused}, steps,
                                      cfg.trainer.diverge_grad_norm), clip) for fused in (False, True)}
    inputs, targets = draw(task.for_split("train"), cfg.seed, "train", int(cfg.data.batch_size))
    batch = (torch.from_numpy(inputs).to(device), torch.from_numpy(targets).to(device))
    label = " ".join(o.split("=", 1)[1] if o.startswith(("task=", "pos=")) else o.replace("pos.momentum.gamma", "γ")
                     for o in overrides)
    label += f" (b{cfg.data.batch_size}, seq {task.seq_len})"
    return Job(mix, label, jobs, steps, model, members, batch, short_precision(precision) == "bf16", device)


def run_mixes(args, precision: str, device: str, say: Callable[[str], None], loads: list) -> dict[str, Any]:
    """Every chosen table's cells under every lever set, interleaved; the compiled and packed columns on the
    ``COMPILED_CELLS``. ``loads``: the 1-minute load average at each round is appended to it."""
    from ropelab.experiments.bench.hardware import load_avg

    names = args.mixes or list(MIXES)
    jobs = [build_job(mix, cell, precision, device, args.quick) for mix in names for cell in MIXES[mix]]
    configs: list[tuple[Job, str]] = [(job, lever) for job in jobs for lever in LEVERS]
    for mix in names:
        for index in COMPILED_CELLS[mix]:
            job = [j for j in jobs if j.mix == mix][index]
            if args.mix_compile:
                job.compiled = torch.compile(job.model)
                configs.append((job, COMPILED))
            for k in PACKS.get(mix, (PACK,)):
                build_pack(job, MIXES[mix][index], k, precision, device, args.quick)
                configs.append((job, packed(k)))
    reps: dict[tuple[str, str], int] = {}
    for job, lever in configs:  # warm-up; a compiled config's first step is its compile
        say(f"warm-up {job.mix}: {job.label}, {lever} ...")
        t = time.perf_counter()
        job.step(lever)
        sync(device)
        first = time.perf_counter() - t
        if lever == COMPILED:
            job.compile_s = first
        t = time.perf_counter()
        job.step(lever)
        sync(device)
        # enough steps per timed sample to rise above the clock and the scheduler's noise
        reps[job.label, lever] = max(1, min(20, round(args.mix_sample_s / max(time.perf_counter() - t, 1e-4))))
    for r in range(args.rounds):
        loads.append(load_avg()[0] if load_avg() else None)
        say(f"mixes: round {r + 1}/{args.rounds} (load {loads[-1]}) ...")
        for job, lever in configs[r % len(configs):] + configs[: r % len(configs)]:
            n = reps[job.label, lever]
            sync(device)
            t, c = time.perf_counter(), time.process_time()
            for _ in range(n):
                job.step(lever)
            sync(device)
            job.times.setdefault(lever, []).append((time.perf_counter() - t) / n)
            job.cpu_times.setdefault(lever, []).append((time.process_time() - c) / n)
    out = {"rounds": args.rounds, "tables": {name: summarise(name, [j for j in jobs if j.mix == name])
                                              for name in names}}
    out["targets"] = mix_targets(out["tables"])
    if args.profile:  # each table's most common job shape, and PoPE's beside rope's
        chosen = {name: max((j for j in jobs if j.mix == name), key=lambda j: j.jobs * j.steps) for name in names}
        chosen.update({f"{j.mix} (pope)": j for j in jobs if j.mix == "pope_indirect" and j.label.startswith("pope ")})
        out["profiles"] = {name: profile_step(job, device) for name, job in chosen.items()}
    return out


def summarise(name: str, jobs: list[Job]) -> dict[str, Any]:
    """Per cell: median step (wall, CPU) and speed-up over today per lever; per table: jobs per core-hour."""
    rounds = len(jobs[0].cpu_times[TODAY])
    levers = list(LEVERS)
    cells = []
    for job in jobs:
        row: dict[str, Any] = {"cell": job.label, "jobs": job.jobs, "steps": job.steps}
        for lever in levers + [x for x in EXTRA if x in job.times]:
            per = members(lever)  # a pack's step trains K members: per member
            row[lever] = {"step_ms": round(1e3 * statistics.median(job.times[lever]) / per, 3),
                          "cpu_ms": round(1e3 * statistics.median(job.cpu_times[lever]) / per, 3),
                          "cpu_ms_rounds": [round(1e3 * t / per, 3) for t in job.cpu_times[lever]],
                          "speedup": round(statistics.median(
                              per * a / b for a, b in zip(job.cpu_times[TODAY], job.cpu_times[lever])), 3)}
        if job.compile_s is not None:
            saved = statistics.median(job.times[ON]) - statistics.median(job.times[COMPILED])
            row[COMPILED]["compile_s"] = round(job.compile_s, 1)
            row[COMPILED]["pays_after_steps"] = round(job.compile_s / saved) if saved > 0 else None
            row[COMPILED]["pays_within_run"] = saved > 0 and job.compile_s / saved < job.steps
        cells.append(row)
    total_jobs = sum(j.jobs for j in jobs)

    def core_s(lever: str, r: int | None = None) -> float:  # CPU seconds of the table's training steps
        pick = (lambda ts: statistics.median(ts)) if r is None else (lambda ts: ts[r])
        return sum(j.jobs * j.steps * pick(j.cpu_times[lever]) for j in jobs)

    table: dict[str, Any] = {"jobs": total_jobs, "cells": cells, "levers": {}}
    for lever in levers:
        table["levers"][lever] = {"jobs_per_core_hour": round(3600 * total_jobs / core_s(lever), 2),
                                  "speedup": round(statistics.median(core_s(TODAY, r) / core_s(lever, r)
                                                                     for r in range(rounds)), 3)}
    return table


def mix_targets(tables: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, threshold in MIX_TARGETS.items():
        if name in tables:
            value = tables[name]["levers"][ON]["speedup"]
            out.append({"target": f"{name}: all levers ≥ {threshold}× today's jobs per core-hour", "value": value,
                        "threshold": threshold, "met": value >= threshold})
    cells = {c["cell"].split(" (")[0]: c for c in (tables.get("pope_indirect") or {}).get("cells", [])}
    # per round, then the median (the two ran back to back); compiled: what `make pope-table` runs (its 15,625 steps
    # pay for compiling)
    for lever in (ON, COMPILED):
        if lever in cells.get("rope", {}) and lever in cells.get("pope", {}):
            value = round(statistics.median(r / p for r, p in zip(cells["rope"][lever]["cpu_ms_rounds"],
                                                                    cells["pope"][lever]["cpu_ms_rounds"])), 3)
            out.append({"target": f"pope ≥ {POPE_VS_ROPE} of rope's step (pope_indirect, {lever})", "value": value,
                        "threshold": POPE_VS_ROPE, "met": value >= POPE_VS_ROPE})
    return out


def profile_step(job: Job, device: str, steps: int = 3) -> dict[str, Any]:
    """Where a step goes under ``levers on``: phases by clock, and op classes by torch.profiler's self time."""
    from torch.profiler import ProfilerActivity, profile

    phases: dict[str, float] = {}
    today: dict[str, float] = {}
    for _ in range(steps):  # side by side: the fixed part each lever takes back shows in its phase
        job.step(TODAY, today)
        job.step(ON, phases)
    weight_shapes = {tuple(p.shape) for p in job.model.parameters() if p.dim() >= 2}
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            job.step(ON)
    classes = {"matmul": 0.0, "attention kernels": 0.0, "softplus (PoPE)": 0.0, "weight casts (autocast)": 0.0,
               "other casts": 0.0, "everything else": 0.0}
    for e in prof.key_averages(group_by_input_shape=True):
        t = e.self_cpu_time_total / 1e3 / steps
        if e.key in ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"):
            classes["matmul"] += t
        elif "scaled_dot_product" in e.key or "flash_attention" in e.key:
            classes["attention kernels"] += t
        elif e.key in ("aten::softplus", "aten::softplus_backward"):
            classes["softplus (PoPE)"] += t
        elif e.key in ("aten::_to_copy", "aten::copy_"):
            shapes = [tuple(s) for s in (e.input_shapes or []) if s]
            classes["weight casts (autocast)" if shapes and shapes[0] in weight_shapes else "other casts"] += t
        else:
            classes["everything else"] += t
    total = sum(classes.values())
    return {"cell": job.label, "phases_ms": {k: round(1e3 * v / steps, 2) for k, v in phases.items()},
            "phases_today_ms": {k: round(1e3 * v / steps, 2) for k, v in today.items()},
            "ops_ms": {k: round(v, 2) for k, v in classes.items()},
            "ops_share": {k: round(v / total, 3) for k, v in classes.items()}}


def markdown(mixes: dict[str, Any]) -> list[str]:
    lines = ["", f"### Jobs per core-hour by table and lever (training steps at 1 thread, process CPU time; median "
                 f"of {mixes['rounds']} interleaved rounds)", "",
             *pipe_table(["table", "jobs", *LEVERS],
                         [[name, table["jobs"], *(f"{v['jobs_per_core_hour']:.1f} ({v['speedup']:.2f}×)"
                                                  for v in table["levers"].values())]
                          for name, table in mixes["tables"].items()], "lr" + "r" * len(LEVERS))]
    extra = [x for x in EXTRA if any(x in c for t in mixes["tables"].values() for c in t["cells"])]
    lines += ["", "Each cell: jobs per core-hour (speed-up over today, the median over rounds of the per-round "
                  "ratio). Per job shape, step CPU ms and speed-up (packed: per member):", ""]
    rows = []
    for name, table in mixes["tables"].items():
        for c in table["cells"]:
            cols = [f"{c[lever]['cpu_ms']:.1f} ({c[lever]['speedup']:.2f}×)" for lever in LEVERS]
            for lever in extra:
                v = c.get(lever)
                cols.append("–" if v is None else f"{v['cpu_ms']:.1f} ({v['speedup']:.2f}×)" + (
                    "" if lever != COMPILED else f", compile {v['compile_s']} s, pays after "
                    f"{v['pays_after_steps'] if v['pays_after_steps'] is not None else '∞'} steps"))
            rows.append([name, c["cell"], f"{c['jobs']} × {c['steps']}", *cols])
    lines += pipe_table(["table", "cell", "jobs × steps", *LEVERS, *extra], rows, "llr" + "r" * (len(LEVERS) + len(extra)))
    if mixes.get("targets"):
        lines += ["", *pipe_table(["target (issue 23)", "value", "met"],
                                  [[t["target"], f"{t['value']:.3g}", "met" if t["met"] else "**missed**"]
                                   for t in mixes["targets"]], "lrl")]
    for name, p in (mixes.get("profiles") or {}).items():
        phases = ", ".join(f"{k} {v:.1f} (today {p['phases_today_ms'][k]:.1f})" for k, v in p["phases_ms"].items())
        ops = ", ".join(f"{k} {v:.1f} ({100 * p['ops_share'][k]:.0f} %)" for k, v in p["ops_ms"].items())
        lines += ["", f"Where a step goes, {name} / {p['cell']} (levers on, ms per step): phases {phases}; "
                      f"self time by op class {ops}."]
    return lines
