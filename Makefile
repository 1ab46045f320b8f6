# Every target installs what is missing first, so a fresh clone needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint bench clean run

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Fireline needs Python >= 3.11, found " + sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check functions tests
	$(BIN)/ruff format --check functions tests
	$(BIN)/mypy

bench: install
	$(BIN)/python -m pytest -q -s tests/bench -o python_files="bench_*.py"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# The whole scheduler on the embedded local cloud (moto), with example schedules.
# Extra flags: make run ARGS="--port 9000 --state-dir .fireline/state"
run: install
	$(BIN)/fireline local $(ARGS)
