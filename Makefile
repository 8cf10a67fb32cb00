# Two commands on a fresh machine: `make run` and `make test`. Both create .venv when missing and
# install the project with the pinned constraints file.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REPORT ?= normdiff-report
SUITE ?= default

.PHONY: run test install kernels bench docs clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[all]'
	scripts/install_clang.sh
	$(MAKE) --no-print-directory kernels
	touch $(STAMP)

# flash-linear-attention's Triton norm kernels (fla-core), which tests/harness/commands/test_check_triton.py
# checks, go beside the environment, in $(KERNELS), not in it: transformers swaps fla's kernels in for
# Qwen3.5's gated delta rule whenever `fla` imports, on any device, and they cannot run on a CPU
# (the tests put $(KERNELS) on PYTHONPATH for their checks only). Where triton is not installed
# (it has wheels for Linux only) there is nothing to run them with.
KERNELS := $(VENV)/kernels
kernels:
	if $(BIN)/python -c 'import triton' 2>/dev/null; then \
		$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt --target $(KERNELS) --upgrade fla-core einops; fi

run: $(STAMP)
	$(BIN)/normdiff run --suite $(SUITE) --out $(REPORT)

# TEST_JOBS: pytest-xdist workers (auto: one per core). loadscope keeps a module on one worker, so
# its module fixtures (e.g. the default run test_mutants shares) run once; the order is conftest's.
TEST_JOBS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder -m "not serial"
	$(BIN)/python -m pytest -q -m serial

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_run.py

# The documentation site into docs/_build/html, strictly as tests/docs/test_docs_build.py builds it: a
# warning or a broken reference fails, and the teaching notebook is executed.
docs: $(STAMP)
	$(BIN)/python -m sphinx -W --keep-going -n -b html docs docs/_build/html

clean:
	rm -rf $(VENV) $(REPORT) .pytest_cache docs/_build
