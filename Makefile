# Two set-up commands, both working on a fresh machine with only Python 3.11+:
#   make demo   venv + install + demo archive + nightly run + where the outputs are
#   make test   venv + install + the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean browser ccusage demo-identical

# (compileall: the bytecode an installed package has; an editable install under
# PYTHONDONTWRITEBYTECODE would compile every module again in every process, ~0.35 s each)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q pipeline
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ctxlake --lake data/lake demo --size 20MB --seed 7 --out data/demo-archive

test: $(STAMP) browser ccusage
	CTXLAKE_CCUSAGE=$${CTXLAKE_CCUSAGE:-$(CCUSAGE)} $(BIN)/python -m pytest -q -n 2 tests

# ccusage 20.0.24, the reference usage reports (tests/test_usage_ccusage.py compares every
# report with it), installed from npm into .cache/ when npm is here; otherwise those tests
# skip and say why.
CCUSAGE := $(CURDIR)/.cache/ccusage/node_modules/.bin/ccusage
ccusage:
	@[ -x "$(CCUSAGE)" ] || { command -v npm >/dev/null 2>&1 \
	  && npm install --silent --no-audit --no-fund --prefix .cache/ccusage ccusage@20.0.24 >/dev/null \
	  || echo "ccusage is not installed (no npm, or the registry is out of reach): the ccusage comparisons will skip"; }

# Debian's chromium for the HTML report's browser tests (tests/test_html_report.py), with CJK
# and emoji fonts for their screenshots; installed when missing and we are root, otherwise
# those tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 && [ -d /usr/share/fonts/opentype/noto ] || { [ "$$(id -u)" = 0 ] \
	  && command -v apt-get >/dev/null 2>&1 && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null; } \
	  || echo "chromium is missing (install it as root: apt-get install chromium); the browser tests will skip"; }

# The demo outputs against bench/demo_manifest.json (sha256 per file; exit 1 on a difference).
demo-identical: $(STAMP)
	$(BIN)/python bench/demo_identical.py

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf data/lake data/demo-archive data/out .pytest_cache
