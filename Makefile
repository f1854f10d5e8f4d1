# Two set-up commands, both working on a fresh machine with only Python 3.11+:
#   make demo   venv + install + demo archive + nightly run + where the outputs are
#   make test   venv + install + the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ctxlake --lake data/lake demo --size 20MB --seed 7 --out data/demo-archive

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 tests

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf data/lake data/demo-archive data/out .pytest_cache
