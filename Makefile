# Two commands on a fresh machine: `make run` and `make test`. Both create .venv when missing and
# install the project with the pinned constraints file.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
REPORT ?= normdiff-report
SUITE ?= default

.PHONY: run test install bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[all]'
	scripts/install_clang.sh
	touch $(STAMP)

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

clean:
	rm -rf $(VENV) $(REPORT) .pytest_cache
