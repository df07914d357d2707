#!/usr/bin/env bash
# The small length-extrapolation demonstration quoted in README "Length extrapolation" (scratch, runs/extrapolation_demo/,
# ≈ 25 min of one core): code_lm at window 64, 300 steps, 1 thread; every scheme at seed 0, rope and pope at seeds 0–2;
# rope (plain and YaRN ×4) and pope fine-tuned 60 steps at window 256; then the evaluation at 1×, 2×, 4×, 8×; and
# Dyck-3 (400 steps, rope, pope, spectral, bifocal, seed 0) at 1×, 2×, 4× its prefix length (runs/extrapolation_demo_dyck3/).
# Arguments are added to every training run. Run from the checkout: tools/extrapolation_demo.sh [overrides]
set -euo pipefail
PY=${PY:-.venv/bin/python}
DEMO=runs/extrapolation_demo
PRE=(task=code_lm task.window=64 task.ood.window=128 trainer.max_steps=300 trainer.val_every=50 trainer.threads=1)
FT=(task=code_lm task.window=256 task.ood.window=512 trainer.max_steps=60 trainer.val_every=20 optim.lr=1e-3
    optim.warmup_steps=10 trainer.threads=1)
EVAL=(--factors 1 2 4 8 --scaling none linear:auto ntk:auto yarn:auto yarn:4)
for job in rope:0 pope:0 learned_abs:0 alibi:0 nope:0 sinusoidal:0 spectral:0 bifocal:0 rope:1 pope:1 rope:2 pope:2; do
  p=${job%:*}; s=${job#*:}
  "$PY" train.py "${PRE[@]}" pos="$p" seed="$s" hydra.run.dir="$DEMO/${p}_s$s" "$@"
done
for s in 0 1 2; do
  "$PY" train.py "${FT[@]}" seed="$s" pos=rope pos.scaling=yarn pos.scaling_factor=4 pos.original_max_len=64 \
    init_from="$DEMO/rope_s$s" hydra.run.dir="$DEMO/rope_yarn4_ft_s$s" "$@"
  "$PY" train.py "${FT[@]}" seed="$s" pos=pope init_from="$DEMO/pope_s$s" hydra.run.dir="$DEMO/pope_ft_s$s" "$@"
done
"$PY" train.py "${FT[@]}" seed=0 pos=rope init_from="$DEMO/rope_s0" hydra.run.dir="$DEMO/rope_ft_s0" "$@"
"$PY" -m ropelab extrapolate "$DEMO" "${EVAL[@]}" --out "$DEMO/extrapolation" || true  # as make did: the Dyck-3 part runs regardless
for p in rope pope spectral bifocal; do
  "$PY" train.py task=dyck3 pos="$p" seed=0 trainer.threads=1 hydra.run.dir="${DEMO}_dyck3/${p}_s0" "$@"
done
"$PY" -m ropelab extrapolate "${DEMO}_dyck3" --factors 1 2 4 --out "${DEMO}_dyck3/extrapolation"
