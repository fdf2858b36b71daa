# Two commands on a fresh machine:  `make run` (the embedded default) and `make test`.
# Both create .venv first. The torch pin lives here only (TORCH): the default is the CPU build this
# project's CI machines install from local files; GPU users pass their CUDA wheel, e.g.
#   make setup TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

PROFILE ?= paper
FORCE   ?=
LAUNCHER ?=
LAUNCHER_ARGS ?=
METHODS ?=
REPRO   = $(PY) scripts/reproduce.py --profile $(PROFILE) $(if $(FORCE),--force) $(if $(LAUNCHER),--launcher $(LAUNCHER)) $(foreach a,$(LAUNCHER_ARGS),--launcher-arg $(a)) $(if $(METHODS),--methods $(METHODS))

.PHONY: setup run test test-all lint clean table1 table2 figure2 bench

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: setup          ## train + evaluate the embedded default (make run ARGS="method=sled")
	$(PY) train.py $(ARGS)

test: setup         ## fast test tier (what CI runs)
	$(PY) -m pytest -m "not slow" -q $(PYTEST_ARGS)

test-all: setup     ## every test, slow ones included (gpu ones skip without CUDA)
	$(PY) -m pytest -q $(PYTEST_ARGS)

table1: setup       ## results/table1.{md,csv,tex}  (PROFILE=paper|tiny|smoke, FORCE=1, METHODS=all, LAUNCHER=slurm LAUNCHER_ARGS="hydra.launcher.partition=gpu")
	$(REPRO) table1

table2: setup       ## results/table2.{md,csv,tex}
	$(REPRO) table2

figure2: setup      ## results/figure2.{png,csv}
	$(REPRO) figure2

bench: setup        ## results/bench/<profile>.{json,md,png}  (PROFILE=cpu-tiny by default, or gpu-base)
	$(PY) scripts/bench.py --profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),cpu-tiny)

lint: setup
	$(VENV)/bin/ruff check scaleformer tests scripts train.py

clean:
	rm -rf results/debug .pytest_cache
