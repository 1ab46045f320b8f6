# Every target installs what is missing first, so a fresh clone needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint bench clean run localstack-test cdk-synth

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Fireline needs Python >= 3.11, found " + sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# One worker per core; a test file stays on one worker, so its module fixtures (a local
# cloud, a synthesized app) are built once.
test: install
	$(BIN)/python -m pytest -q -n $${TEST_WORKERS:-auto} --dist loadfile

lint: install
	$(BIN)/ruff check functions infra/cdk tests
	$(BIN)/ruff format --check functions infra/cdk tests
	$(BIN)/mypy

# Opt-in: the local cloud's end-to-end tests against LocalStack (or another emulator).
localstack-test: install
	FIRELINE_ENDPOINT_URL=$${FIRELINE_ENDPOINT_URL:-http://localhost:4566} \
		$(BIN)/python -m pytest -q -m localstack tests/integration/test_localstack.py

bench: install
	$(BIN)/python -m pytest -q -s tests/bench -o python_files="bench_*.py"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis cdk.out

# The example CDK app synthesized into cdk.out/, offline: no AWS account or credentials.
# The code is packaged alone (enough for the local cloud); BUNDLE=true pip-installs its
# requirements from PyPI into the asset, as `cdk deploy` needs.
BUNDLE ?= false
cdk-synth: install
	CDK_OUTDIR=cdk.out CDK_CONTEXT_JSON='{"fireline:bundle-dependencies": "$(BUNDLE)"}' \
		$(BIN)/python infra/cdk/app.py

# The whole scheduler on the embedded local cloud (moto), with example schedules.
# Extra flags: make run ARGS="--port 9000 --state-dir .fireline/state"
run: install
	$(BIN)/fireline local $(ARGS)
