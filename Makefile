# `make study` and `make test` each set up the virtual environment .venv first (once).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: study test bench gpu-check setup clean-results catalogue

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

study: $(STAMP)
	$(BIN)/leaner run --cores all

test: $(STAMP)
	$(BIN)/python -m pytest -q

# After adding or changing a figure's or table's definition: its index and caption (shown.py).
catalogue: $(STAMP)
	$(BIN)/leaner catalogue

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# The checks a GPU machine must pass before a sweep (benchmarks/gpu_check.py; ARGS="--budget 450 --out DIR"; outputs under $OUT when set).
# Where the machine's own Python already has torch and the packages (../shared/tools/gpu-kit): NO_VENV=1.
gpu-check: $(if $(NO_VENV),,$(STAMP))
	$(if $(NO_VENV),$(PYTHON),$(BIN)/python) benchmarks/gpu_check.py $(ARGS)

clean-results:
	rm -rf results logs .snakemake
