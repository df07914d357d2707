"""The surgery experiment (issue 15): pretrain with fixed RoPE on code_lm, spectralize, fine-tune, compare.

    make surgery                                        # = ropelab surgery
    ropelab surgery --pretrain-steps 400 --finetune-steps 120 --threads 1   # the defaults

1. **pretrain**: our backbone (conf/model/llama.yaml) with ``pos=rope`` on ``code_lm`` (the installed torch
   package's source, character level), seed 0, saved to ``<runs>/pretrain/checkpoints/last.ckpt``.
2. **the swap**: the checkpoint is loaded and spectralized (Ω = its inv_freq, A = 1, Φ = 0); the logits and
   the loss on the fine-tuning validation set are computed before and after (must be equal: Δ = 0).
3. **fine-tune**, three arms from the same checkpoint, the same batches (seed 1) and optimiser settings,
   ``--finetune-steps`` steps each, through ``train.py``'s own path (``init_from=… surgery=spectral``):
   ``control`` (fixed rope), ``spectral_only`` (surgery, only Ω, A, Φ train), ``spectral_all`` (surgery,
   everything trains). The first logged training loss of each arm is the loss at the swap, on the same batch.
4. **report**: loss curves, Ω drift per pair, Φ per pair and a test of the paper's saw-tooth claim (signs
   alternating between neighbouring pairs; mean offset ≈ 7.6e-4 rad), written to ``--out`` as README.md,
   surgery.json and surgery.png.

Saw-tooth statistics, per arm, over the final Φ (H heads × P pairs; the scheme is shared by all layers):
alternation = the fraction of neighbouring pairs (i, i+1) of one head whose Φ have opposite signs (a
saw-tooth: → 1; no structure: ≈ 0.5), its two-sided exact binomial p against 0.5, and a permutation p (the
pairs of each head shuffled, 20 000 times: the fraction of shuffles alternating at least as often, which
keeps each head's sign balance); lag-1 autocorrelation of Φ along the pairs (saw-tooth: negative); mean |Φ|
and mean |Φ_{i+1} − Φ_i| in radians beside the paper's 7.6e-4.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import torch

from ropelab.core.config import compose
from ropelab.experiments.surgery.phase import analyse_trace
from ropelab.experiments.surgery.report import write_report
from ropelab.experiments.surgery.swap import swap_check
from ropelab.experiments.surgery.training import ARMS, machine_info, read_metrics, train


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ropelab surgery", description=__doc__.split("\n\n")[0])
    p.add_argument("--pretrain-steps", type=int, default=400)
    p.add_argument("--finetune-steps", type=int, default=120)
    p.add_argument("--pretrain-lr", type=float, default=3e-3)
    p.add_argument("--finetune-lr", type=float, default=1e-3)
    p.add_argument("--pos-lr-scale", type=float, default=1.0, help="optim.pos_lr_scale while fine-tuning")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: the machine is shared)")
    p.add_argument("--runs", type=Path, default=Path("runs/surgery"), help="run folders (checkpoints)")
    p.add_argument("--out", type=Path, default=Path("results/surgery"), help="report folder")
    p.add_argument("--reuse", action="store_true", help="keep completed runs instead of training them again")
    p.add_argument("--tiny", action="store_true", help="a tiny model and data (a smoke test of the pipeline)")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite README.md and surgery.png from --out/surgery.json and the run folders (no training)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.report_only:
        return write_report(json.loads((args.out / "surgery.json").read_text()), args.out, regenerated=True)
    t0 = time.time()
    say = lambda msg: print(f"[surgery {time.time() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    torch.set_num_threads(args.threads)
    os.environ.setdefault("WANDB_MODE", "offline")
    load_start = [round(x, 2) for x in os.getloadavg()]

    base = ["task=code_lm", "pos=rope", f"trainer.threads={args.threads}", "trainer.compile=false", "logger=csv",
            "rerun=" + ("false" if args.reuse else "true")]
    if args.tiny:
        base += ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.mlp_hidden=64", "task.window=32",
                 "task.ood.window=48", "data.batch_size=4", "data.val_size=16", "data.test_size=8", "data.ood_size=8",
                 "data.eval_batch_size=8"]
    P, F = args.pretrain_steps, args.finetune_steps
    pre_warm, ft_warm = min(40, max(1, P // 10)), min(20, max(1, F // 10))
    pretrain_overrides = [*base, "seed=0", f"trainer.max_steps={P}", f"trainer.val_every={max(1, P // 5)}",
                          f"optim.lr={args.pretrain_lr}", f"optim.warmup_steps={pre_warm}"]
    pre_dir = args.runs / "pretrain"
    pre = train(pretrain_overrides, pre_dir, say)

    finetune_seed = 1
    tune = [*base, f"seed={finetune_seed}", f"trainer.max_steps={F}", f"trainer.val_every={max(1, F // 5)}",
            f"optim.lr={args.finetune_lr}", f"optim.warmup_steps={ft_warm}", f"optim.pos_lr_scale={args.pos_lr_scale}",
            f"init_from={pre_dir}"]
    say("swap check ...")
    pre_cfg = compose(pretrain_overrides)
    swap = swap_check(pre_cfg, pre_dir, finetune_seed)
    say(f"swap: val loss {swap['val_loss_before']:.6f} -> {swap['val_loss_after']:.6f}, "
        f"max |d logits| {swap['max_abs_logit_diff']:.3g}")

    arms, metrics = {}, {"pretrain": read_metrics(pre_dir)}
    for name, (extra, _) in ARMS.items():
        run_dir = args.runs / name
        summary = train([*tune, *extra], run_dir, say)
        metrics[name] = read_metrics(run_dir)
        m = metrics[name]
        arm = {"overrides": [o for o in [*tune, *extra] if not o.startswith(("rerun=", "logger="))],
               "run_dir": str(run_dir), "wall_seconds": summary["wall_seconds"], "final": summary["final"],
               "trainable_params": summary.get("trainable_params"), "first_loss": m["train/loss"][0],
               "val_curve": {str(k): v for k, v in sorted(m.get("val/loss", {}).items())},
               "train_loss": [m["train/loss"][k] for k in sorted(m["train/loss"])]}
        if name != "control":
            arm["trace"] = analyse_trace(run_dir)
        arms[name] = arm

    wall = time.time() - t0
    result = {
        "command": "ropelab surgery " + " ".join(shlex.quote(a) for a in argv) if argv
        else "ropelab surgery",
        "machine": {**machine_info(args.threads), "load_start": load_start,
                    "load_end": [round(x, 2) for x in os.getloadavg()], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
        "wall_s": wall,
        "settings": {"pretrain_steps": P, "finetune_steps": F, "pretrain_lr": args.pretrain_lr,
                     "finetune_lr": args.finetune_lr, "pos_lr_scale": args.pos_lr_scale, "threads": args.threads,
                     "pretrain_warmup": pre_warm, "finetune_warmup": ft_warm, "finetune_seed": finetune_seed,
                     "model": dict(pre_cfg.model), "head_dim": pre_cfg.model.d_model // pre_cfg.model.n_heads,
                     "window": pre_cfg.task.window, "ood_window": pre_cfg.task.ood.window,
                     "batch_size": pre_cfg.data.batch_size, "runs": str(args.runs), "tiny": args.tiny},
        "pretrain": {"overrides": [o for o in pretrain_overrides if not o.startswith(("rerun=", "logger="))],
                     "wall_seconds": pre["wall_seconds"], "final": pre["final"], "params": pre["params"]},
        "swap": swap, "arms": arms,
        "swap_equal_to_control": all(arms[n]["first_loss"] == arms["control"]["first_loss"] for n in arms),
    }
    write_report(result, args.out)
    say(f"wrote {args.out}/README.md, surgery.json, surgery.png in {wall:.0f} s")
    return result
