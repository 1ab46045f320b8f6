# Every target installs what is missing first, so a fresh clone needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint bench campaign clean run localstack-test

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

# Opt-in: the local cloud's end-to-end tests against LocalStack (or another emulator).
localstack-test: install
	FIRELINE_ENDPOINT_URL=$${FIRELINE_ENDPOINT_URL:-http://localhost:4566} \
		$(BIN)/python -m pytest -q -m localstack tests/integration/test_localstack.py

bench: install
	$(BIN)/python -m pytest -q -s tests/bench -o python_files="bench_*.py"

# The fault campaign, long: CAMPAIGN_EXAMPLES random runs of the whole scheduler under
# faults (tests/campaign). It prints its seed first; `make campaign SEED=n` replays that run.
CAMPAIGN_EXAMPLES ?= 10000
ifndef SEED
SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
campaign: install
	@echo "campaign seed $(SEED): make campaign SEED=$(SEED) replays this run"
	FIRELINE_CAMPAIGN_EXAMPLES=$(CAMPAIGN_EXAMPLES) $(BIN)/python -m pytest -q -s \
		--hypothesis-seed=$(SEED) tests/campaign

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# The whole scheduler on the embedded local cloud (moto), with example schedules.
# Extra flags: make run ARGS="--port 9000 --state-dir .fireline/state"
run: install
	$(BIN)/fireline local $(ARGS)
