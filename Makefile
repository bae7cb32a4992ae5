# `make demo` and `make test` set everything up on a fresh machine: the virtual environment
# with the pinned versions (mpi4py among the test extras; the cuda extra's NVIDIA wheels,
# about 630 MB, for the nvcc compile check of tests/test_cuda_compile.py), and Debian's
# OpenBLAS, LAPACKE, FFTW and OpenMPI where apt-get can install them.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test lint docs bench libs clean
NATIVE_PACKAGES := libopenblas-dev liblapacke-dev libfftw3-dev libopenmpi-dev openmpi-bin chromium

$(STAMP): pyproject.toml | libs  # OpenMPI first: mpi4py may build against it
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cuda]'
	touch $(STAMP)

# Products use OpenBLAS, linear algebra LAPACK, FFTs FFTW; without them products are loop
# nests and linear algebra and FFTs raise UnsupportedError naming the missing package.
# Sharded programs run as MPI jobs on OpenMPI (mpirun, and the headers DaCe's communication
# library compiles against); without it their tests are skipped, naming the packages (under
# make test, which installs them, they fail).
libs:
	@if ! dpkg -s $(NATIVE_PACKAGES) >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      $(NATIVE_PACKAGES) >/dev/null) \
	    || echo "warning: could not install $(NATIVE_PACKAGES)"; \
	  else echo "note: not all of $(NATIVE_PACKAGES) are installed"; fi; \
	fi

demo: $(STAMP) libs
	$(PY) -m hlo2dace.demo

lint: $(STAMP)
	$(PY) -m ruff check hlo2dace tests bench

# HLO2DACE_REQUIRE_ALL: what this target installs must be there; a test that needs a
# missing piece fails instead of being skipped (tests/util.py, needs)
test: $(STAMP) libs lint
	HLO2DACE_REQUIRE_ALL=1 $(PY) -m pytest -n $(PYTEST_WORKERS) -q

docs: $(STAMP)
	$(PY) -m hlo2dace.coverage docs/ops.md

bench: $(STAMP) libs
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py

clean:
	rm -rf .dacecache _dacegraphs .pytest_cache
