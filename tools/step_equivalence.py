"""Does a refactor of the training step change what a run computes? Train the same tiny jobs from two checkouts and
compare their metrics.csv byte for byte.

    python tools/step_equivalence.py train CHECKOUT OUT [JOB…]  # the jobs below (or those named), from CHECKOUT into OUT
    python tools/step_equivalence.py compare OUT_A OUT_B     # exit 1 unless every job's metrics.csv is identical

Each job runs ``CHECKOUT/train.py`` in a fresh process with ``PYTHONPATH=CHECKOUT/src:CHECKOUT``, so the code
under test is the checkout's, not the venv's editable install. metrics.csv holds no wall-clock column (its columns
are epoch, step and the metrics), so nothing is left out of the comparison.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SMALL = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.mlp_hidden=64", "data.batch_size=8",
         "data.val_size=16", "data.test_size=16", "data.ood_size=16", "data.eval_batch_size=16", "trainer.threads=1",
         "trainer.accelerator=cpu", "trainer.precision=32-true", "trainer.max_steps=30", "trainer.val_every=10",
         "trainer.progress=off", "optim.warmup_steps=5"]
SCHEMES = ("alibi", "bifocal", "learned_abs", "nope", "pope", "rope", "rope_half", "sinusoidal", "spectral")

# (job name, overrides, multirun?)
JOBS: list[tuple[str, list[str], bool]] = [
    *((f"mod_arith-{s}", ["task=mod_arith", f"pos={s}"], False) for s in SCHEMES),
    ("dyck3-spectral", ["task=dyck3", "pos=spectral"], False),
    ("mod_arith-rope-gamma1", ["task=mod_arith", "pos=rope", "pos.momentum.gamma=1"], False),
    ("mod_arith-rope-gamma-warmup", ["task=mod_arith", "pos=rope", "pos.momentum.gamma=0.5",
                                     "pos.momentum.warmup_steps=10"], False),
    ("mod_arith-spectral-bf16", ["task=mod_arith", "pos=spectral", "trainer.precision=bf16-mixed"], False),
    ("mod_arith-pope-fused-clip", ["task=mod_arith", "pos=pope", "optim.fused=true",
                                   "trainer.gradient_clip_val=0.01"], False),
    ("packed-spectral", ["task=mod_arith", "pos=spectral", "seed=0,1", "optim.lr=1e-3,3e-3",
                         "hydra/launcher=packed", "hydra.launcher.pack=4"], True),
]


def train(checkout: Path, out: Path, only: list[str]) -> int:
    env = {**os.environ, "PYTHONPATH": f"{checkout}/src:{checkout}", "WANDB_MODE": "offline"}
    failed = 0
    for name, overrides, multi in (job for job in JOBS if not only or job[0] in only):
        folder = out / name
        where = [f"hydra.sweep.dir={folder}", "hydra.sweep.subdir=m${hydra:job.num}"] if multi else \
            [f"hydra.run.dir={folder}"]
        cmd = [sys.executable, str(checkout / "train.py"), *(["-m"] if multi else []), *SMALL, *overrides, *where]
        result = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
        print(f"{name}: exit {result.returncode}", flush=True)
        if result.returncode:
            failed += 1
            print(result.stderr[-2000:], flush=True)
    return 1 if failed else 0


def compare(a: Path, b: Path) -> int:
    rows, differ = [], 0
    for left in sorted(a.rglob("metrics.csv")):
        rel = left.relative_to(a)
        right = b / rel
        same = right.is_file() and left.read_bytes() == right.read_bytes()
        differ += not same
        rows.append(f"| {rel.parent} | {len(left.read_text().splitlines()) - 1} | {'identical' if same else 'DIFFERS'} |")
    missing = sorted(str(p.relative_to(b)) for p in b.rglob("metrics.csv") if not (a / p.relative_to(b)).is_file())
    print("| job | rows | metrics.csv |\n|---|---|---|\n" + "\n".join(rows))
    if missing:
        print("only in", b, ":", ", ".join(missing))
    print(f"{len(rows) - differ} of {len(rows)} identical")
    return 1 if differ or missing or not rows else 0


if __name__ == "__main__":
    command, first, second = sys.argv[1], Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve()
    if command == "train":
        second.mkdir(parents=True, exist_ok=True)
        raise SystemExit(train(first, second, sys.argv[4:]))
    raise SystemExit(compare(first, second))
