# Two commands on a fresh machine:  `make run` (the embedded default) and `make test`.
# Both create .venv first, with exactly the versions in requirements.lock (torch's pin included: the
# lock is the one place it lives). The CPU build comes from the local wheel on this project's machines;
# GPU users take the same torch release as a CUDA build from PyTorch's index, e.g.
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128
# and CPU-only users elsewhere TORCH_INDEX=https://download.pytorch.org/whl/cpu.
PYTHON ?= python3
VENV   ?= .venv
LOCK   := requirements.lock
TORCH_INDEX ?=
# `make lock TORCH=torch==X` moves torch's pin; otherwise the lock keeps the one it has.
TORCH  ?= $(shell grep -E '^torch==' $(LOCK))
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

PROFILE ?= paper
FORCE   ?=
LAUNCHER ?=
LAUNCHER_ARGS ?=
METHODS ?=
YES     ?=
REPRO   = $(PY) scripts/reproduce.py --profile $(PROFILE) $(if $(FORCE),--force) $(if $(YES),--yes) $(if $(LAUNCHER),--launcher $(LAUNCHER)) $(foreach a,$(LAUNCHER_ARGS),--launcher-arg $(a)) $(if $(METHODS),--methods $(METHODS)) $(if $(OUT_DIR),--out-dir $(OUT_DIR))

.PHONY: setup check-lock lock run default-results test test-all test-kernels test-compat lint clean table1 table2 table_qa masformer_table1 masformer_figure3 masformer_table2 masformer_figure4 masformer_lm_placement masformer_ablation masformer_continual figure2 bench bench-step bench-step-compiled bench-compare gpu-check gpu-perf wheels

setup: $(STAMP)

# A changed lock rebuilds the environment from scratch, so nothing outside the lock survives in it.
$(STAMP): pyproject.toml $(LOCK) Makefile
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $$(grep -E '^(pip|setuptools|wheel)==' $(LOCK))
	$(if $(TORCH_INDEX),$(PY) -m pip install -q '$(TORCH)' --index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -r $(LOCK)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) scripts/lock.py check
	touch $(STAMP)

check-lock: setup   ## installed versions == requirements.lock
	$(PY) scripts/lock.py check

lock:               ## re-resolve the pyproject's ranges to the newest releases into requirements.lock, then run the tests
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q --upgrade pip setuptools wheel
	.venv-lock/bin/python -m pip install -q '$(TORCH)' $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	.venv-lock/bin/python -m pip install -q '.[dev,slurm]'
	$(PYTHON) scripts/lock.py write .venv-lock
	rm -rf .venv-lock
	$(MAKE) test

run: setup          ## train + evaluate the embedded default (make run ARGS="method=sled")
	$(PY) train.py $(ARGS)

default-results: setup  ## results/default/: the default run's scores and its input-blind baselines (the README's first table)
	$(PY) scripts/default_results.py

# A pytest-xdist worker per core (at most 8: the rehearsal's BART-base-shaped runs need memory), a test file's
# tests on one worker (its module fixtures built once); each worker takes its share of the threads
# (tests/conftest.py). TEST_WORKERS=0 runs them in this process, one after another.
TEST_WORKERS ?= auto
XDIST = -n $(TEST_WORKERS) $(if $(filter auto,$(TEST_WORKERS)),--maxprocesses 8) --dist loadfile
test: setup         ## fast test tier (what CI runs)
	$(PY) -m pytest -m "not slow" -q $(XDIST) $(PYTEST_ARGS)

test-all: setup     ## every test, slow ones included (gpu ones skip without CUDA)
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

# Floating-point results differ across torch's CPU kernels; the goldens must hold on every one of them.
KERNELS ?= default avx2
test-kernels: setup ## the golden tests again under each torch CPU kernel family (ATEN_CPU_CAPABILITY), as CI runs them
	@for cap in $(KERNELS); do echo "ATEN_CPU_CAPABILITY=$$cap"; \
	  ATEN_CPU_CAPABILITY=$$cap $(PY) -m pytest -q tests/test_golden.py -k "not mutation" $(PYTEST_ARGS) || exit 1; done

COMPAT ?= newest lowest
test-compat: setup  ## the compat tier in throwaway venvs per transformers release (COMPAT="newest lowest 5.20.0")
	$(PY) scripts/compat_check.py $(COMPAT)

table1: setup       ## results/table1.{md,csv,tex}  (PROFILE=paper|dryrun|rehearsal|tiny|smoke, FORCE=1, METHODS=all, OUT_DIR=dir, YES=1, LAUNCHER=slurm LAUNCHER_ARGS="hydra.launcher.partition=gpu")
	$(REPRO) table1

table2: setup       ## results/table2.{md,csv,tex}
	$(REPRO) table2

table_qa: setup     ## results/table_qa.{md,csv,tex}: question answering on ledgers (PROFILE=tiny by default, or smoke)
	$(subst --profile $(PROFILE),--profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),tiny),$(REPRO)) table_qa

masformer_table1: setup  ## results/<profile>/masformer_table1.{md,csv}: MASFormer's perplexity against C (PROFILE=tiny: the CPU demonstration, smoke: seconds)
	$(subst --profile $(PROFILE),--profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),tiny),$(REPRO)) masformer_table1

masformer_figure3: setup  ## results/<profile>/masformer_figure3.{png,csv,md}: perplexity by length, from masformer_table1's runs (PROFILE=tiny by default)
	$(subst --profile $(PROFILE),--profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),tiny),$(REPRO)) masformer_figure3

masformer_table2: setup  ## results/<profile>/masformer_table2.{md,csv,tex}: MASFormer's summarization against C (PROFILE=tiny by default, or smoke)
	$(subst --profile $(PROFILE),--profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),tiny),$(REPRO)) masformer_table2

masformer_figure4: setup  ## results/<profile>/masformer_figure4.{png,csv,md}: R-2 against C, from masformer_table2's runs (PROFILE=tiny by default)
	$(subst --profile $(PROFILE),--profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),tiny),$(REPRO)) masformer_figure4

masformer_lm_placement: setup  ## results/<profile>/masformer_lm_placement.{md,csv}: where the full layers sit on language modeling, Table 1's grid (PROFILE=tiny by default)
	$(subst --profile $(PROFILE),--profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),tiny),$(REPRO)) masformer_lm_placement

masformer_ablation: setup  ## results/<profile>/masformer_ablation.{md,csv,tex}: where MASFormer's full layers sit (PROFILE=tiny by default, or smoke)
	$(subst --profile $(PROFILE),--profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),tiny),$(REPRO)) masformer_ablation

masformer_continual: setup  ## results/<profile>/masformer_continual.{md,csv,tex}: fine-tuning after continual training or not (PROFILE=tiny by default, or smoke)
	$(subst --profile $(PROFILE),--profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),tiny),$(REPRO)) masformer_continual

figure2: setup      ## results/figure2.{png,csv}
	$(REPRO) figure2

bench: setup        ## results/bench/<profile>.{json,md,png}  (PROFILE=cpu-tiny by default, or gpu-base)
	$(PY) scripts/bench.py --profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),cpu-tiny)

bench-step: setup   ## results/bench/step-overhead.{json,md}: the training step's framework overhead on the CPU, before/after (~20 min)
	$(PY) scripts/bench_step.py --rounds 3

bench-step-compiled: setup   ## results/bench/step-compiled.{json,md}: the defaults against every layer compiled (inductor) on the CPU (~25 min)
	$(PY) scripts/bench_step.py --variants after,compiled --name step-compiled --rounds 2

bench-compare: setup  ## results/bench/compare-memory.{json,md}: `scaleformer compare`'s peak memory and time up to 100,000 documents (~15 min)
	$(PY) scripts/bench_compare.py

.PHONY: rehearsal bench-read
rehearsal: setup    ## the paper profile's path offline at the real lengths: local mirrors of SCROLLS and BookSum, table1, table2 and table_qa on BART-base/T5-base shapes (results/rehearsal_full/; hours on 2 cores; PROFILE=rehearsal: minutes)
	@for a in table1 table2 table_qa; do $(PY) scripts/reproduce.py $$a --profile $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),rehearsal_full) $(if $(METHODS),--methods $(METHODS)) || exit 1; done

bench-read: setup   ## results/bench/read-memory.{json,md}: peak memory of reading a NarrativeQA-like split as it grows, streaming vs in memory (~3 min)
	$(PY) -m scaleformer.bench.read_memory --out results/bench/read-memory.json

.PHONY: bench-eval
bench-eval: setup  ## results/bench/batched-eval-cpu*.{json,md}: documents per second of 32 ledgers, one at a time vs batched: 32 and 64 forced tokens at 1 and 4 beams (the first also under glibc's default heap, the setting's before), and the tiny table's own decoding (~65 min)
	SCALEFORMER_KEEP_FREED_MEMORY=0 $(PY) -m scaleformer.bench.batched_eval --methods truncation,sled --new-tokens 32 --tag glibc --out results/bench
	$(PY) -m scaleformer.bench.batched_eval --methods truncation,sled --new-tokens 32 --out results/bench
	$(PY) -m scaleformer.bench.batched_eval --methods sled --new-tokens 64 --tag sled64 --out results/bench
	$(PY) -m scaleformer.bench.batched_eval --methods truncation,sled,scaleformer_middle --beams 4 --new-tokens 128 --stop eos --tag eval --out results/bench

.PHONY: bench-bucketed
bench-bucketed: setup  ## results/bench/bucketed-training-cpu.{json,md}: operators and ms per training document, one per micro-batch vs bucketed 4 and 8, SummScreenFD shape (~10 min)
	$(PY) -m scaleformer.bench.bucketed_training --out results/bench/bucketed-training-cpu.json --repeats 10

.PHONY: bench-decode
bench-decode: setup  ## results/bench/decode-overhead*-cpu.{json,md}: decoding's per-token overhead on the CPU, transformers' loop (dynamic, static cache) vs the decoding step (eager, compiled), 1 and 4 beams, the tiny reader and BART-base's shape (~12 min)
	$(PY) -m scaleformer.bench.decode_overhead --out results/bench/decode-overhead-cpu.json --repeats 20
	$(PY) -m scaleformer.bench.decode_overhead --backbone bart_base_shape --caches 'dynamic,static,step,step (compiled)' --repeats 10 --out results/bench/decode-overhead-bart-base-shape-cpu.json

DIR ?=
GPU_CHECK_ARGS ?=
gpu-check:          ## on a GPU machine: prepare .venv-gpu from the lock (wheels/ if present), run `pytest -m gpu` and the gpu-base bench; results in DIR
	@test -n "$(DIR)" || { echo "error: DIR is required: make gpu-check DIR=/path/to/results"; exit 2; }
	$(PYTHON) scripts/gpu_check.py $(DIR) $(GPU_CHECK_ARGS)

GPU_PERF_ARGS ?=
gpu-perf:           ## on a GPU machine, after gpu-check (its .venv-gpu): table1's training cells, optimisations off and on (results/gpu-perf/DATE/, results/dryrun/table1-gpu.*)
	$(if $(wildcard .venv-gpu/bin/python),.venv-gpu/bin/python,$(PY)) scripts/gpu_perf.py $(GPU_PERF_ARGS)

# GPU_PYTHON=3.12: wheels for the GPU machine's Python when it is not this one's. A distribution
# published only as source (antlr4-python3-runtime, rouge-score: pure Python) is built into a wheel here.
GPU_PYTHON ?=
WHEEL_FOR = $(if $(GPU_PYTHON),--python-version $(GPU_PYTHON) --implementation cp $(foreach n,17 24 27 28 31 34 35,--platform manylinux_2_$(n)_x86_64) --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
wheels: setup       ## wheels/ for an offline GPU machine: every locked distribution but torch and CUDA's (the machine's own)
	grep -viE '^(torch|nvidia-|triton|#)' $(LOCK) | grep . > .wheels-reqs.txt
	while read -r req; do \
	  $(PY) -m pip download -q --only-binary=:all: --no-deps $(WHEEL_FOR) "$$req" -d wheels 2>/dev/null \
	  || $(PY) -m pip wheel -q --no-deps "$$req" -w wheels || exit 1; \
	done < .wheels-reqs.txt
	rm -f .wheels-reqs.txt

lint: setup
	$(VENV)/bin/ruff check scaleformer tests scripts train.py

clean:
	rm -rf results/debug .pytest_cache .venv-lock .venv-compat
