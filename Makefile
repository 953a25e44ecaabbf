# `make study` and `make test` each set up the virtual environment .venv first (once).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# `make demo` first: a result in about a minute (set-up aside), in demo/.
.PHONY: demo study test test-fast reproduce bench gpu-check setup clean-results schema timm-table

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Both papers' small study end to end (configs/demo.yaml: 10 models, their kappa, figures, tables
# and findings) in demo/, apart from the default study's results/.
demo: $(STAMP)
	$(BIN)/leaner run --cores all --directory demo --configfile $(CURDIR)/configs/demo.yaml

study: $(STAMP)
	$(BIN)/leaner run --cores all

# The suite's tiers (tests/conftest.py TIERS): everything but the default study's re-run (CI's);
# the inner loop's units and one tiny workflow; the default study against its reference.
# JOBS: pytest-xdist's worker processes, each running whole test modules (JOBS=0: none, in order).
JOBS ?= 2
WORKERS = -n $(JOBS) --dist loadfile
test: $(STAMP)
	$(BIN)/python -m pytest -q --tier fast,slow $(WORKERS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q --tier fast $(WORKERS)

reproduce: $(STAMP)
	$(BIN)/python -m pytest -q --tier reproduce

# After changing the config schema, a task or a dataset kind: schemas/config.schema.json.
schema: $(STAMP)
	$(BIN)/leaner schema

# After a config plans a new timm backbone shape, or timm moves: the table planning reads instead of
# importing timm (src/leaner/models/timm_families.py).
timm-table: $(STAMP)
	$(BIN)/python -c 'import sys; from leaner.models.timm_families import write_table; \
	from leaner.workflow.plan import timm_variants; write_table(timm_variants(*sys.argv[1:]))' config.yaml configs/*.yaml

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# The checks a GPU machine must pass before a sweep (benchmarks/gpu_check.py; ARGS="--budget 450 --out DIR"; outputs under $OUT when set).
# Where the machine's own Python already has torch and the packages (../shared/tools/gpu-kit): NO_VENV=1.
gpu-check: $(if $(NO_VENV),,$(STAMP))
	$(if $(NO_VENV),$(PYTHON),$(BIN)/python) benchmarks/gpu_check.py $(ARGS)

clean-results:
	rm -rf results logs .snakemake demo
