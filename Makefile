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

test: $(STAMP)
	$(PY) -m pytest $(ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -m "" $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
