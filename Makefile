# Two commands matter: `make run` and `make test`. Both set up .venv themselves.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: run test test-all setup clean

setup: $(STAMP)

# torch is installed first and pinned: 2.13.0 is a CPU wheel on disk here, anything looser pulls CUDA.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(PY) train.py $(ARGS)

# the tests of ropelab.core.surgery on transformers' Llama need the hf extra (.venv/hf, kept out of the venv: see bench)
test: $(STAMP) $(VENV)/hf/.installed
	$(PY) -m pytest $(ARGS)

test-all: $(STAMP) $(VENV)/hf/.installed
	$(PY) -m pytest -m "" $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# Mutation testing of the core math (README "ropelab", its Mutation testing paragraph; tools/mutate.py, [tool.mutmut]
# in pyproject.toml): mutmut
# on a scratch copy of HEAD in build/mutate/, each mutant against the fast tests of its module; writes
# results/mutation/{README.md,summary.json} (commit them). Slow (hours on 2 shared cores), kept out of CI, resumable:
# run it again and only unchecked mutants run. ARGS="--max-children 2", "--only 'ropelab.core.positional.*'",
# "--record-only", "--fresh". mutmut is the `mutate` extra, installed into the venv on first use.
.PHONY: mutate
MUTATE_STAMP := $(VENV)/.mutate-installed
$(MUTATE_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test,mutate]"
	touch $(MUTATE_STAMP)

mutate: $(MUTATE_STAMP)
	$(PY) tools/mutate.py $(ARGS)

# Retrain JOBS of a committed table's records (default 3, the fastest-trained; JOBS=all) from their own config.yaml
# into runs/reproduce/ and compare: bit-identical metrics.csv on the CPU kind that made them, else within the table's
# seed spread (README, "Sweeps and reports"); nothing under results/ changes. E.g. make reproduce TABLE=bifocal_table1
# JOBS=1
.PHONY: reproduce
TABLE ?=
JOBS  ?= 3
reproduce: $(STAMP)
	$(PY) -m ropelab.reproduce $(TABLE) --jobs $(JOBS) $(ARGS)

# ---- sweeps and reports (README, "Sweeps and reports"). LAUNCHER=joblib runs jobs in parallel on this
# machine, LAUNCHER=slurm submits them to SLURM, LAUNCHER=packed trains same-shape jobs (seeds, γ, learning
# rates) together in one process (on a GPU; on these CPUs it pays only on mod_arith, docs/speed.md); ARGS adds
# overrides (e.g. ARGS="seed=0 trainer.max_steps=50").
SWEEP    ?=
LAUNCHER ?=
SWEEP_LAUNCHER = $(if $(LAUNCHER),hydra/launcher=$(LAUNCHER))

.PHONY: table1 phase pope momentum report

table1: $(STAMP)
	$(PY) train.py -m experiment=bifocal_table1 $(SWEEP_LAUNCHER) $(ARGS)

# the bio-rotation phase diagram (conf/experiment/bio_phase.yaml); its (lower, 100–200) cells are table1's jobs
phase: $(STAMP)
	$(PY) train.py -m experiment=bio_phase task.noise=same $(SWEEP_LAUNCHER) $(ARGS)
	$(PY) train.py -m experiment=bio_phase task.gap_min=20 task.gap_max=60 $(SWEEP_LAUNCHER) $(ARGS)
	$(PY) train.py -m experiment=bio_phase pos=bifocal task.noise=same $(SWEEP_LAUNCHER) $(ARGS)
	$(PY) train.py -m experiment=bio_phase pos=spectral optim.pos_lr_scale=10 $(SWEEP_LAUNCHER) $(ARGS)

pope: $(STAMP)
	$(PY) train.py -m experiment=pope_indirect $(SWEEP_LAUNCHER) $(ARGS)
	$(PY) train.py -m experiment=pope_indirect pos=alibi pos.heads_fraction=0.5 $(SWEEP_LAUNCHER) $(ARGS)

# PoPE's indirect-indexing table at the paper's 1M examples (issue 11; conf/experiment/pope_indirect.yaml).
# pope-curves: seed 0 of rope and pope (the learning curves). pope-table: the 6 columns × 3 seeds, ALiBi on half the
# heads and PoPE's uniform δ init (24 jobs), every command run even if one has a failed job (exit 1 at the end),
# then the report and the frequency-usage figure into results/pope_indirect/ (commit that folder).
# pope-gpu: the same on a CUDA machine (CUDA_VISIBLE_DEVICES picks it), each scheme's seeds trained together as one
# pack (hydra/launcher=packed, POPE_PACK members: a tiny model leaves the GPU idle, docs/speed.md); packs run one
# after another in one process. POPE_LAUNCHER=gpu_shared instead runs POPE_JOBS processes side by side, as before.
.PHONY: pope-curves pope-table pope-gpu
POPE_JOBS ?= 8
POPE_PACK ?= 3
POPE_LAUNCHER ?= packed
POPE_GPU_ARGS = $(if $(filter packed,$(POPE_LAUNCHER)),hydra.launcher.pack=$(POPE_PACK),hydra.launcher.n_jobs=$(POPE_JOBS))
# pope-gpu: the paper's fixed training set (data.train_size); POPE_PREFIX: the job folders' "data.train_size=…,"
# (Hydra sorts a job's overrides in its name), set by pope-gpu so that pope-table finds its seed-0 checkpoints
POPE_TRAIN_SIZE ?= 1000000
POPE_PREFIX ?=
POPE_FREQ   = results/pope_indirect/freq_usage$(if $(POPE_PREFIX),_train_size_$(POPE_TRAIN_SIZE))
# compiled steps are 1.36x faster on the CPU (docs/speed.md): at 15,625 steps compiling pays; pope-gpu leaves it auto
POPE_COMPILE ?= true
POPE_RUN   = runs/pope_indirect/$(POPE_PREFIX)pos=$(1),seed=0,task=indirect_indexing
pope-curves: $(STAMP)
	$(PY) train.py -m experiment=pope_indirect pos=rope,pope seed=0 trainer.compile=$(POPE_COMPILE) $(SWEEP_LAUNCHER) $(ARGS)

pope-table: $(STAMP)
	@st=0; \
	$(PY) train.py -m experiment=pope_indirect trainer.compile=$(POPE_COMPILE) $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=pope_indirect pos=alibi pos.heads_fraction=0.5 trainer.compile=$(POPE_COMPILE) $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=pope_indirect pos=pope pos.delta_init=uniform trainer.compile=$(POPE_COMPILE) $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) -m ropelab.report results/pope_indirect --out results/pope_indirect/report || st=1; \
	if [ -f "$(call POPE_RUN,rope)/checkpoints/last.ckpt" ] && [ -f "$(call POPE_RUN,pope)/checkpoints/last.ckpt" ]; then \
	  $(PY) -m ropelab.freq_usage "$(call POPE_RUN,rope)" "$(call POPE_RUN,pope)" --out $(POPE_FREQ) || st=1; \
	else echo "freq_usage: no checkpoints of the seed-0 rope and pope runs under runs/pope_indirect (trained elsewhere?)"; fi; \
	echo "next: git add results/pope_indirect && git commit -m 'records: pope_indirect' -- results/pope_indirect"; \
	exit $$st

# pope-gpu trains on the paper's fixed training set of 1M examples (data.train_size, epochs over it; issue 22) at the
# paper's sizes (the task's defaults): its jobs are recorded beside the on-the-fly ones, named data.train_size=….
pope-gpu: $(STAMP)
	$(MAKE) pope-table POPE_COMPILE=auto LAUNCHER=$(POPE_LAUNCHER) POPE_PREFIX=data.train_size=$(POPE_TRAIN_SIZE), \
	  ARGS="$(POPE_GPU_ARGS) trainer.accelerator=gpu data.train_size=$(POPE_TRAIN_SIZE) $(ARGS)"

# The size ladder (issue 22; conf/experiment/pope_ladder.yaml at batch 64, pope_ladder_b256.yaml at batch 256,
# pope_baselines.yaml): rope vs pope × rungs × 3 seeds,
# then Table 9's baselines and PoPE's δ init at one rung; each ends with its report in results/<preset>/ (the
# frequency usage of the learned rope and pope models: results/pope_ladder_b256/freq_usage). Calibrate first:
# make calibrate TASK=indirect_indexing. E.g. make pope-ladder LAUNCHER=joblib ARGS="trainer.threads=1"
.PHONY: pope-ladder pope-baselines
pope-ladder: $(STAMP)
	@st=0; \
	for preset in pope_ladder pope_ladder_b256; do \
	  $(PY) train.py -m experiment=$$preset $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	  $(PY) -m ropelab.report results/$$preset --out results/$$preset/report || st=1; \
	done; \
	echo "next: git add results/pope_ladder* && git commit -m 'records: pope_ladder' -- results/pope_ladder*"; \
	exit $$st

# rope and pope at the baselines' config are the batch-256 ladder's rung-1 jobs: results/pope_baselines links their
# records (pos=rope,seed=0,task=indirect_indexing → ../pope_ladder_b256/pos=rope,seed=0,task.rung=1,…), so the
# grid skips them as recorded; the ladder's rung 1 runs first so that the links resolve
# ALiBi on all heads has seeds 3–4 as well: its first three seeds disagreed (2 learned the lookup, 1 did not)
pope-baselines: $(STAMP)
	@st=0; \
	$(PY) train.py -m experiment=pope_ladder_b256 task.rung=1 $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=pope_baselines $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=pope_baselines pos=alibi pos.heads_fraction=0.5 $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=pope_baselines pos=pope pos.delta_init=uniform $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=pope_baselines pos=alibi seed=3,4 record=results/pope_baselines \
	  $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) -m ropelab.report results/pope_baselines || st=1; \
	$(PY) -m ropelab.learning_speed results/pope_baselines || st=1; \
	$(PY) -m ropelab.learning_speed results/pope_baselines --reference pope \
	  --out results/pope_baselines/report/against_pope || st=1; \
	echo "next: git add results/pope_baselines && git commit -m 'records: pope_baselines' -- results/pope_baselines"; \
	exit $$st

# both momentum sweeps (72 + 168 jobs × 500 steps), then their reports from the records in results/momentum_*
# (attention maps from runs/momentum_*/<job>/checkpoints). Resumable: run it again — recorded and completed jobs
# are skipped, interrupted ones resume; a failed job does not stop the rest (exit 1 at the end).
# E.g. make momentum LAUNCHER=joblib ARGS="trainer.threads=1"
momentum: $(STAMP)
	@status=0; \
	$(PY) train.py -m experiment=momentum_gamma $(SWEEP_LAUNCHER) $(ARGS) || status=1; \
	$(PY) train.py -m experiment=momentum_freqs $(SWEEP_LAUNCHER) $(ARGS) || status=1; \
	for s in momentum_gamma momentum_freqs; do \
	  if [ -d results/$$s ]; then \
	    $(PY) -m ropelab.report results/$$s --out results/$$s/report --no-attention || status=1; \
	    $(PY) -m ropelab.momentum_report results/$$s --out results/$$s/report --checkpoints runs/$$s || status=1; \
	  fi; \
	done; \
	exit $$status

# Calibration (issue 21, src/ropelab/experiments/calibrate.py): where rope learns a task before schemes are compared on it —
# conf/experiment/calibrate_<TASK>.yaml's grid of budgets × sizes, then the picks into results/calibration/<TASK>/report.
# make calibrate TASK=mod_arith [LAUNCHER=joblib ARGS="trainer.threads=1"]
.PHONY: calibrate bifocal-calibrated momentum-calibrated
CALIBRATE_ARGS_assoc_recall = --baseline pos.momentum.gamma=0
calibrate: $(STAMP)
	@test -n "$(TASK)" || { echo "usage: make calibrate TASK=<task> (one of: $$(ls conf/experiment | sed -n 's/^calibrate_\(.*\)\.yaml$$/\1/p' | tr '\n' ' '))" >&2; exit 2; }
	$(PY) train.py -m experiment=calibrate_$(TASK) $(SWEEP_LAUNCHER) $(ARGS)
	$(PY) -m ropelab.calibrate results/calibration/$(TASK) $(CALIBRATE_ARGS_$(TASK))

# Bifocal Table 1's mod 7 and Dyck-3 at the calibrated budgets, then the report and the speed/extrapolation table
bifocal-calibrated: $(STAMP)
	@st=0; \
	$(PY) train.py -m experiment=bifocal_calibrated_mod_arith $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=bifocal_calibrated_dyck3 $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) -m ropelab.report results/bifocal_calibrated --out results/bifocal_calibrated/report || st=1; \
	$(PY) -m ropelab.learning_speed results/bifocal_calibrated || st=1; \
	exit $$st

# the momentum γ sweeps at calibrated sizes and budgets (+ seeds 3–5 of global counting at γ 0 and 2, where 3 seeds
# could not tell), then their report
momentum-calibrated: $(STAMP)
	@st=0; \
	for p in $$(ls conf/experiment | sed -n 's/^\(momentum_calibrated_.*\)\.yaml$$/\1/p'); do \
	  $(PY) train.py -m experiment=$$p $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	done; \
	$(PY) train.py -m experiment=momentum_calibrated_global_counting pos.momentum.gamma=0,2.0 seed=3,4,5 \
	  record=results/momentum_calibrated $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) -m ropelab.report results/momentum_calibrated --out results/momentum_calibrated/report --no-attention || st=1; \
	$(PY) -m ropelab.momentum_report results/momentum_calibrated --out results/momentum_calibrated/report || st=1; \
	exit $$st

# issue 38: momentum's options (γ per layer, warm-up, adaptive, normalised) against constant γ on the four momentum
# tasks, seeds 300–302 (conf/experiment/momentum_options_*.yaml list the variants), and the rotary base table on a
# long and a local task (rope_base, rope_base_local); each command skips what is recorded
.PHONY: momentum-options rope-base
MOMENTUM_OPTION_VARIANTS = "" \
  "pos.momentum.gamma=1.0,2.0 pos.momentum.warmup_steps=100" \
  "pos.momentum.gamma=0 pos.momentum.per_layer=linear pos.momentum.gamma_shallow=2.0 pos.momentum.gamma_deep=0" \
  "pos.momentum.gamma=0 pos.momentum.per_layer=linear pos.momentum.gamma_shallow=0 pos.momentum.gamma_deep=2.0" \
  "pos.momentum.gamma=0 pos.momentum.adaptive.enabled=true" \
  "pos.momentum.gamma=1.0,2.0 pos.momentum.normalize=true"
momentum-options: $(STAMP)
	@st=0; \
	for p in $$(ls conf/experiment | sed -n 's/^\(momentum_options_.*\)\.yaml$$/\1/p'); do \
	  for v in $(MOMENTUM_OPTION_VARIANTS); do \
	    $(PY) train.py -m experiment=$$p $$v $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	  done; \
	done; \
	exit $$st

rope-base: $(STAMP)
	@st=0; \
	$(PY) train.py -m experiment=rope_base $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=rope_base_local $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	exit $$st

report: $(STAMP)
	@test -n "$(SWEEP)" || { echo "usage: make report SWEEP=runs/<name> [ARGS='--out DIR']" >&2; exit 2; }
	$(PY) -m ropelab.report $(SWEEP) $(ARGS)

# Every declared paper claim (conf/claims/) decided from the committed records, and README's claims tables
# rewritten from them (issue 36): make claims [ARGS=--check].
.PHONY: claims
claims: $(STAMP)
	$(PY) -m ropelab.claims --write-readme $(ARGS)

# Upload the offline W&B runs (logger=wandb without WANDB_MODE) under SWEEP, default runs/:
# make sync [SWEEP=runs/<name>] [ARGS=--dry-run]. Needs network and `.venv/bin/wandb login` once; W&B skips
# runs it has uploaded already.
.PHONY: sync
SYNC_DIR = $(or $(SWEEP),runs)
sync: $(STAMP)
	@found=$$(find $(SYNC_DIR) -type d -name 'offline-run-*' -path '*/wandb/*' 2>/dev/null | sort); \
	if [ -z "$$found" ]; then echo "no offline W&B runs under $(SYNC_DIR)"; \
	else $(VENV)/bin/wandb sync $(ARGS) $$found; fi

# Training-step benchmark vs Hugging Face's Llama (src/ropelab/experiments/bench/): writes bench/out/bench-<UTC time>.{json,md}
# (untracked: a bench run never dirties the tree; the run README quotes is kept in bench/, named there).
# ARGS="--quick" for a smoke run, "--levers" for compile/precision levers, "--threads 1" on a busy machine,
# "--device cuda" on a GPU, "--mixes" for the tables' jobs per core-hour under each lever (issue 23). The `hf` extra (transformers) is installed once
# into $(VENV)/hf, beside the venv and seen only by the bench: inside the venv, torchmetrics would import
# transformers with every `import lightning` (+2.7 s start-up and +24 MB for every training run, measured).
.PHONY: bench
HF_DIR   := $(VENV)/hf
HF_STAMP := $(HF_DIR)/.installed

$(HF_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade --target $(HF_DIR) $$($(PY) -c \
	  "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['hf']))")
	touch $(HF_STAMP)

bench: $(HF_STAMP)
	$(PY) -m ropelab.bench $(ARGS)

# One command for anyone with a GPU (src/ropelab/experiments/gpucheck.py): the tests marked gpu, one short bio_rotation run
# per scheme, the bench on CUDA (ours vs HF Llama, bf16) and several jobs at once on the GPU, side by side
# (gpu_shared, n_jobs 1,4,8) and packed (hydra/launcher=packed, 4 and 8 members: ARGS="--packs 4,8,16"); writes
# bench/gpu.{json,md} (commit them). ACCEL=cpu runs the same path on the CPU with tiny settings (≈ 1–2 min) into
# bench/out/gpu-check-cpu.{json,md}, as tests/test_gpucheck.py does.
.PHONY: gpu-check
ACCEL ?= cuda
gpu-check: $(HF_STAMP)
	$(PY) -m ropelab.gpucheck --accelerator $(ACCEL) $(ARGS)

# Spectral surgery (issue 15, src/ropelab/experiments/surgery/): pretrain rope on code_lm, swap in learnable
# spectral RoPE (outputs unchanged), fine-tune three arms; report in results/surgery/, runs in runs/surgery/.
# ≈ 15 min on 2 shared cores with 1 thread. ARGS="--pretrain-steps N --finetune-steps N --threads N".
.PHONY: surgery
surgery: $(HF_STAMP)
	$(PY) -m ropelab.surgery_experiment $(ARGS)

# Length extrapolation (issue 25; README "Length extrapolation"): every scheme trained on code_lm at window 128
# (conf/experiment/extrapolation_code_lm.yaml, 24 jobs), fine-tuned at 4× (extrapolation_code_lm_ft: 21 jobs + YaRN
# + ft, 3 jobs), then each run evaluated at 1×, 2×, 4×, 8× with rope's scalings as evaluation variants; the table,
# the figure and the CSV go to results/extrapolation_code_lm/extrapolation/ (commit it with the records).
# Resumable like any sweep; every step runs even if one has a failed job (exit 1 at the end).
# E.g. make extrapolation LAUNCHER=joblib ARGS="trainer.threads=1"; on a GPU LAUNCHER=gpu_shared.
.PHONY: extrapolation
EXTRAP_EVAL = --factors 1 2 4 8 --scaling none linear:auto ntk:auto yarn:auto yarn:4
extrapolation: $(STAMP)
	@st=0; \
	$(PY) train.py -m experiment=extrapolation_code_lm $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=extrapolation_code_lm_ft $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) train.py -m experiment=extrapolation_code_lm_ft pos=rope pos.scaling=yarn pos.scaling_factor=4 \
	  pos.original_max_len=128 $(SWEEP_LAUNCHER) $(ARGS) || st=1; \
	$(PY) -m ropelab.extrapolate runs/extrapolation_code_lm runs/extrapolation_code_lm_ft $(EXTRAP_EVAL) \
	  --reference rope 'rope+yarn×4 +ft' 'rope +ft' 'rope+yarn×auto (eval)' \
	  --out results/extrapolation_code_lm/extrapolation || st=1; \
	echo "next: git add results/extrapolation_code_lm results/extrapolation_code_lm_ft && git commit -m 'records: extrapolation'"; \
	exit $$st

# The small demonstration quoted in README "Length extrapolation" (scratch, runs/extrapolation_demo/, ≈ 25 min of one
# core): code_lm at window 64, 300 steps, 1 thread; every scheme at seed 0, rope and pope at seeds 0–2; rope (plain
# and YaRN ×4) and pope fine-tuned 60 steps at window 256; then the evaluation at 1×, 2×, 4×, 8×; and Dyck-3 (400 steps,
# rope, pope, spectral, bifocal, seed 0) at 1×, 2×, 4× its prefix length (runs/extrapolation_demo_dyck3/).
.PHONY: extrapolation-demo
DEMO     = runs/extrapolation_demo
DEMO_PRE = task=code_lm task.window=64 task.ood.window=128 trainer.max_steps=300 trainer.val_every=50 trainer.threads=1
DEMO_FT  = task=code_lm task.window=256 task.ood.window=512 trainer.max_steps=60 trainer.val_every=20 optim.lr=1e-3 \
           optim.warmup_steps=10 trainer.threads=1
extrapolation-demo: $(STAMP)
	@for job in rope:0 pope:0 learned_abs:0 alibi:0 nope:0 sinusoidal:0 spectral:0 bifocal:0 rope:1 pope:1 rope:2 pope:2; do \
	  p=$${job%:*}; s=$${job#*:}; \
	  $(PY) train.py $(DEMO_PRE) pos=$$p seed=$$s hydra.run.dir=$(DEMO)/$${p}_s$$s $(ARGS) || exit 1; \
	done; \
	for s in 0 1 2; do \
	  $(PY) train.py $(DEMO_FT) seed=$$s pos=rope pos.scaling=yarn pos.scaling_factor=4 pos.original_max_len=64 \
	    init_from=$(DEMO)/rope_s$$s hydra.run.dir=$(DEMO)/rope_yarn4_ft_s$$s $(ARGS) || exit 1; \
	  $(PY) train.py $(DEMO_FT) seed=$$s pos=pope init_from=$(DEMO)/pope_s$$s hydra.run.dir=$(DEMO)/pope_ft_s$$s $(ARGS) || exit 1; \
	done; \
	$(PY) train.py $(DEMO_FT) seed=0 pos=rope init_from=$(DEMO)/rope_s0 hydra.run.dir=$(DEMO)/rope_ft_s0 $(ARGS) || exit 1; \
	$(PY) -m ropelab.extrapolate $(DEMO) $(EXTRAP_EVAL) --out $(DEMO)/extrapolation; \
	for p in rope pope spectral bifocal; do \
	  $(PY) train.py task=dyck3 pos=$$p seed=0 trainer.threads=1 hydra.run.dir=$(DEMO)_dyck3/$${p}_s0 $(ARGS) || exit 1; \
	done; \
	$(PY) -m ropelab.extrapolate $(DEMO)_dyck3 --factors 1 2 4 --out $(DEMO)_dyck3/extrapolation

# The benchmark card (issue 37; README "Benchmark card"; src/ropelab/experiments/card.py): one scheme on every task of
# conf/card/suite.yaml against the baselines, verdict per task. make card POS=<scheme> [TASKS=a,b]
# [ARGS="pos.<option>=…"] checks POS, TASKS and ARGS first, trains only that scheme's missing jobs into
# results/card/<task>/ (ARGS beyond pos.* and how jobs run: a trial, into runs/card_trial/), then writes
# results/card/cards/<pos=…>/card.md. card-baselines: every scheme of conf/pos/ (the table a card compares with),
# then results/card/report/cross_table.md. card-plan: the suite's plan block (n, MDE) from the calibration records;
# card-cost: CPU-hours of the table and of one card from recorded wall times. E.g. make card POS=rope
# ARGS="pos.momentum.gamma=0.5" LAUNCHER=joblib (add trainer.threads=1 to ARGS on these 2 cores)
.PHONY: card card-baselines card-plan card-cost
POS   ?=
TASKS ?=
card: $(STAMP)
	@test -n "$(POS)" || { echo "usage: make card POS=<scheme> [TASKS=a,b] [ARGS=\"pos.<option>=…\"] (schemes: $$(ls conf/pos | sed 's/\.yaml$$//' | tr '\n' ' '))" >&2; exit 2; }
	$(PY) -m ropelab.card score $(POS) --tasks "$(TASKS)" --args "$(ARGS) $(SWEEP_LAUNCHER)"

card-baselines: $(STAMP)
	$(PY) -m ropelab.card baselines --tasks "$(TASKS)" --args "$(ARGS) $(SWEEP_LAUNCHER)"

card-plan: $(STAMP)
	$(PY) -m ropelab.card plan

card-cost: $(STAMP)
	$(PY) -m ropelab.card cost
