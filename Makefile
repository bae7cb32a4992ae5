# `make demo` and `make test` set everything up on a fresh machine: the virtual environment
# with the pinned versions, and Debian's OpenBLAS where apt-get can install it.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test lint docs bench blas clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# Optional: BLAS nodes use OpenBLAS when it is installed, DaCe's pure code otherwise.
blas:
	@if ! dpkg -s libopenblas-dev liblapacke-dev >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      libopenblas-dev liblapacke-dev >/dev/null) \
	    || echo "warning: could not install OpenBLAS; products use DaCe's pure BLAS"; \
	  else echo "note: OpenBLAS not installed; products use DaCe's pure BLAS"; fi; \
	fi

demo: $(STAMP) blas
	$(PY) -m hlo2dace.demo

lint: $(STAMP)
	$(PY) -m ruff check hlo2dace tests bench

test: $(STAMP) blas lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) -q

docs: $(STAMP)
	$(PY) -m hlo2dace.coverage docs/ops.md

bench: $(STAMP) blas
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py

clean:
	rm -rf .dacecache _dacegraphs .pytest_cache
