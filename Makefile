# The user's commands. `make` (or `make help`) lists them; each sets up .venv itself. Two matter most: `make run` and
# `make test` (what CI runs). Everything else is `ropelab <command>` (.venv/bin/ropelab; `ropelab --help`).
VENV    ?= .venv
PY      := $(VENV)/bin/python
ROPELAB := $(PY) -m ropelab
STAMP   := $(VENV)/.installed
ARGS    ?=
comma   := ,

.DEFAULT_GOAL := help
.PHONY: help setup run test test-all clean campaign reproduce report claims card bench gpu-check surgery mutate prune sync

help: ## these commands, one line each
	@echo "make <command> [ARGS=\"…\"]   (ARGS go to the command; ropelab --help lists the rest)"
	@awk -F':.*## ' '/^[a-z-]+:.*## / {printf "  %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(STAMP) ## create .venv and install ropelab (torch pinned to the CPU wheel)

# torch is installed first and pinned: 2.13.0 is a CPU wheel on disk here, anything looser pulls CUDA.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test]"
	touch $(STAMP)

run: $(STAMP) ## one training run: python train.py ARGS (e.g. ARGS="pos=spectral seed=1", or "-m experiment=<table>")
	$(PY) train.py $(ARGS)

# the tests of ropelab.core.surgery on transformers' Llama need the hf extra (.venv/hf, kept out of the venv: see bench)
test: $(STAMP) $(VENV)/hf/.installed ## the fast tests (what CI runs)
	$(PY) -m pytest $(ARGS)

test-all: $(STAMP) $(VENV)/hf/.installed ## every test, the slow ones too
	$(PY) -m pytest -m "" $(ARGS)

clean: ## remove .venv and the test caches (runs/ and results/ stay: see prune)
	rm -rf $(VENV) .pytest_cache .hypothesis

# A table is one declaration (conf/experiment/); the campaign runs every planned job of it without a record.
# TABLE: one or more names, comma-separated (a,b); ARGS="--plan" lists the jobs without running them.
TABLE ?=
campaign: $(STAMP) ## run a table's jobs that have no record yet: make campaign TABLE=<name> [ARGS=--plan]
	$(ROPELAB) campaign $(if $(TABLE),--tables $(TABLE)) $(ARGS)

# JOBS: how many records (reproduce's default: the 3 that trained fastest) or all
JOBS ?=
reproduce: $(STAMP) ## retrain a table's records into runs/reproduce/ and compare: make reproduce TABLE=<name> [JOBS=k|all]
	$(ROPELAB) reproduce $(TABLE) $(if $(JOBS),--jobs $(JOBS)) $(ARGS)

SWEEP ?=
report: $(STAMP) ## a sweep's or table's report: make report SWEEP=runs/<name>|results/<table> [ARGS="--out DIR"]
	@test -n "$(SWEEP)" || { echo "usage: make report SWEEP=runs/<name> [ARGS='--out DIR']" >&2; exit 2; }
	$(ROPELAB) report $(SWEEP) $(ARGS)

claims: $(STAMP) ## every paper claim decided from the records, README's claims tables rewritten [ARGS=--check]
	$(ROPELAB) claims --write-readme $(ARGS)

# score: train the scheme's missing jobs of conf/card/suite.yaml, then results/card/cards/<pos=…>/card.md. The card's
# other commands: ropelab card baselines | plan | cost (ropelab card --help).
POS   ?=
TASKS ?=
card: $(STAMP) ## one scheme's benchmark card: make card POS=<scheme> [TIER=quick | TASKS=a,b] [ARGS="pos.<option>=…"] [LAUNCHER=joblib]
	@test -n "$(POS)" || { echo "usage: make card POS=<scheme> [TIER=quick | TASKS=a,b] [ARGS=\"pos.<option>=…\"] (schemes: $$(ls conf/pos | sed 's/\.yaml$$//' | tr '\n' ' ')); ropelab card baselines|plan|cost" >&2; exit 2; }
	$(ROPELAB) card score $(POS) --tasks "$(TASKS)" $(if $(TIER),--tier $(TIER)) --args "$(ARGS) $(if $(LAUNCHER),hydra/launcher=$(LAUNCHER))"

# The `hf` extra (transformers) goes into $(VENV)/hf, beside the venv and seen only by the bench, the GPU check and
# surgery: inside the venv, torchmetrics would import transformers with every `import lightning` (+2.7 s start-up).
HF_STAMP := $(VENV)/hf/.installed
$(HF_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade --target $(VENV)/hf $$($(PY) -c \
	  "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['hf']))")
	touch $(HF_STAMP)

bench: $(HF_STAMP) ## the training step against HF's Llama [ARGS="--quick|--levers|--mixes|--device cuda"]
	$(ROPELAB) bench $(ARGS)

ACCEL ?= cuda
gpu-check: $(HF_STAMP) ## on a GPU: gpu tests, a run per scheme, the bench, jobs per GPU (ACCEL=cpu: tiny, on the CPU)
	$(ROPELAB) gpucheck --accelerator $(ACCEL) $(ARGS)

surgery: $(HF_STAMP) ## spectral surgery: pretrain rope on code_lm, swap in learnable spectral RoPE, fine-tune
	$(ROPELAB) surgery $(ARGS)

# mutmut on a scratch copy of HEAD in build/mutate/ (tools/mutate.py, [tool.mutmut]); hours, kept out of CI,
# resumable. ARGS="--max-children 2", "--only 'ropelab.core.positional.*'", "--record-only", "--fresh".
MUTATE_STAMP := $(VENV)/.mutate-installed
$(MUTATE_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test,mutate]"
	touch $(MUTATE_STAMP)

mutate: $(MUTATE_STAMP) ## mutation testing of the core math into results/mutation/
	$(PY) tools/mutate.py $(ARGS)

# checkpoints make runs/ grow (hundreds of MB after a few short runs); a pruned run can no longer resume
DAYS ?= 14
prune: $(STAMP) ## delete run folders' checkpoints older than DAYS (default 14; 0: all) under runs/, never results/
	$(ROPELAB) prune --older-than $(DAYS) $(ARGS)

# W&B skips runs it has uploaded already; needs network and `.venv/bin/wandb login` once
SYNC_DIR = $(or $(SWEEP),runs)
sync: $(STAMP) ## upload the offline W&B runs (logger=wandb) under SWEEP (default runs/) [ARGS=--dry-run]
	@found=$$(find $(SYNC_DIR) -type d -name 'offline-run-*' -path '*/wandb/*' 2>/dev/null | sort); \
	if [ -z "$$found" ]; then echo "no offline W&B runs under $(SYNC_DIR)"; \
	else $(VENV)/bin/wandb sync $(ARGS) $$found; fi
