"""Does a refactor of the training step change what a run computes? Train the same tiny jobs from two checkouts and
compare their metrics.csv byte for byte.

    python tools/step_equivalence.py train CHECKOUT OUT [JOB…]  # the jobs below (or those named), from CHECKOUT into OUT
    python tools/step_equivalence.py compare OUT_A OUT_B     # exit 1 unless every job's files are identical
    python tools/step_equivalence.py jobs                    # the job names

Each job runs ``CHECKOUT/train.py`` in a fresh process with ``PYTHONPATH=CHECKOUT/src:CHECKOUT``, so the code
under test is the checkout's, not the venv's editable install. metrics.csv holds no wall-clock column (its columns
are epoch, step and the metrics), so nothing is left out of its comparison. summary.json is compared too, as text,
without what differs between two trainings of one job from two checkouts: ``wall_seconds``, the folder it was
trained in and the code's commit (``machine.commit``, ``machine.dirty``).
"""

from __future__ import annotations

import json
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
    # packs: members with their own γ; a member diverging beside one that goes on (bf16-mixed); a fixed training
    # set with a final validation off the validation grid
    ("packed-momentum-gammas", ["task=mod_arith", "pos=rope", "seed=0,1", "pos.momentum.gamma=0,0.5",
                                "trainer.gradient_clip_val=0.5", "hydra/launcher=packed"], True),
    ("packed-pope-bf16-diverged", ["task=mod_arith", "pos=pope", "trainer.precision=bf16-mixed",
                                   "trainer.diverge_grad_norm=1e-9,1e4", "hydra/launcher=packed"], True),
    ("packed-dyck3-fixed-set", ["task=dyck3", "pos=spectral", "data.train_size=40", "trainer.val_every=7",
                                "seed=0,1,2", "hydra/launcher=packed", "hydra.launcher.pack=2"], True),
]


def train(checkout: Path, out: Path, only: list[str]) -> int:
    env = {**os.environ, "PYTHONPATH": f"{checkout}/src:{checkout}", "WANDB_MODE": "offline"}
    failed = 0
    for name, overrides, multi in (job for job in JOBS if not only or job[0] in only):
        folder = out / name
        where = [f"hydra.sweep.dir={folder}", "hydra.sweep.subdir=m${hydra:job.num}"] if multi else \
            [f"hydra.run.dir={folder}"]
        given = {o.split("=", 1)[0] for o in overrides}
        small = [o for o in SMALL if o.split("=", 1)[0] not in given]
        cmd = [sys.executable, str(checkout / "train.py"), *(["-m"] if multi else []), *small, *overrides, *where]
        result = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
        print(f"{name}: exit {result.returncode}", flush=True)
        if result.returncode:
            failed += 1
            print(result.stderr[-2000:], flush=True)
    return 1 if failed else 0


def _summary_text(path: Path, out: Path) -> str | None:
    """summary.json without its wall time and commit, the folder it was trained in written as OUT."""
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    summary.pop("wall_seconds", None)
    for key in ("commit", "dirty"):
        (summary.get("machine") or {}).pop(key, None)
    return json.dumps(summary, indent=1).replace(str(out), "OUT")


def _same_tree(a, b, roots: tuple[Path, Path]) -> bool:
    """Two loaded checkpoints: the same keys, in the same order, and equal values, tensors bitwise, paths (a
    Lightning checkpoint's callback state) under their OUT folders."""
    import torch

    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same_tree(a[k], b[k], roots) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same_tree(x, y, roots) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, str) and isinstance(b, str):
        return a.replace(str(roots[0]), "OUT") == b.replace(str(roots[1]), "OUT")
    return a == b


def _same_files(left: Path, right: Path, roots: tuple[Path, Path]) -> bool:
    """The same files (Hydra's own and train.log aside: their text names the folder), the same checkpoints and
    the same positional trace."""
    import numpy as np
    import torch

    def names(folder: Path) -> list[str]:
        return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                      if ".hydra" not in p.parts and p.name != "train.log")

    if names(left) != names(right):
        return False
    for ckpt in sorted(left.glob("checkpoints/*.ckpt")):
        other = right / ckpt.relative_to(left)
        if not _same_tree(torch.load(ckpt, weights_only=True), torch.load(other, weights_only=True), roots):
            return False
    if (left / "positional_trace.npz").is_file():
        a, b = np.load(left / "positional_trace.npz"), np.load(right / "positional_trace.npz")
        if list(a.keys()) != list(b.keys()) or not all(np.array_equal(a[k], b[k]) for k in a.keys()):
            return False
    return True


def compare(a: Path, b: Path) -> int:
    from ropelab.analysis.report.tables import pipe_table

    rows, differ = [], 0
    jobs = sorted({p.parent.relative_to(a) for name in ("metrics.csv", "summary.json") for p in a.rglob(name)})
    for rel in jobs:
        left, right = a / rel / "metrics.csv", b / rel / "metrics.csv"
        rows_of = len(left.read_text().splitlines()) - 1 if left.is_file() else 0
        same = left.is_file() == right.is_file() and (not left.is_file() or left.read_bytes() == right.read_bytes())
        summaries = _summary_text(a / rel / "summary.json", a), _summary_text(b / rel / "summary.json", b)
        same_summary = summaries[0] == summaries[1]
        same_files = (b / rel).is_dir() and _same_files(a / rel, b / rel, (a, b))
        differ += not (same and same_summary and same_files)
        word = {True: "identical", False: "DIFFERS"}
        rows.append([rel, rows_of, word[same], word[same_summary], word[same_files]])
    missing = sorted(str(p.parent.relative_to(b)) for name in ("metrics.csv", "summary.json") for p in b.rglob(name)
                     if not (a / p.relative_to(b)).is_file())
    print("\n".join(pipe_table(["job", "rows", "metrics.csv", "summary.json", "files, checkpoints, trace"], rows,
                               "lllll")))
    if missing:
        print("only in", b, ":", ", ".join(missing))
    print(f"{len(rows) - differ} of {len(rows)} identical")
    return 1 if differ or missing or not rows else 0


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        raise SystemExit(0 if len(sys.argv) > 1 else 2)
    if sys.argv[1] == "jobs":
        print("\n".join(name for name, _, _ in JOBS))
        raise SystemExit(0)
    command, first, second = sys.argv[1], Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve()
    if command == "train":
        second.mkdir(parents=True, exist_ok=True)
        raise SystemExit(train(first, second, sys.argv[4:]))
    raise SystemExit(compare(first, second))
