# Every target installs what is missing first, so a fresh clone needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install install-run browser test lint bench bench-quick campaign stories strictness clean run docs localstack-test cdk-synth checkov

install: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Fireline needs Python >= 3.11, found " + sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# What `make run` needs and no more: the package with its `local` extra (the emulator and
# the SAM transform), so a first run does not wait for the development tools. An
# environment make install already built has it all (dev includes local).
RUN_STAMP := $(VENV)/.installed-run

install-run: $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Fireline needs Python >= 3.11, found " + sys.version.split()[0]'
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then \
		echo "$(VENV) has the development install, which includes the local extra"; \
	else \
		test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
		$(BIN)/python -m pip install --quiet --upgrade pip; \
		$(BIN)/python -m pip install --quiet -e '.[local]'; \
	fi
	touch $(RUN_STAMP)

# checkov pins a `packaging` older than pytest accepts, so it lives in a virtualenv of its
# own, pinned: tests/integration/test_checkov.py runs it on the translated template.
CHECKOV_VENV := .venv-checkov
CHECKOV := $(CHECKOV_VENV)/bin/checkov
CHECKOV_VERSION := 3.3.30

$(CHECKOV):
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet 'checkov==$(CHECKOV_VERSION)'

checkov: install $(CHECKOV)
	$(BIN)/python -m pytest -q tests/integration/test_checkov.py

# The console's browser tests (tests/browser) drive Debian's Chromium with Playwright:
# Playwright's own browser download cannot reach its host, so the system's browser is
# installed here when missing (as root, as CI runs; otherwise say how).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "the browser tests need Chromium: sudo apt-get install chromium (they skip without it)"; \
	fi

browser: $(CHROMIUM)

# One worker per core. A file whose tests share a fixture of its own (a local cloud, a
# synthesized app) stays on one worker, built once; other tests spread one by one
# (tests/conftest.py marks the groups).
test: install $(CHECKOV) $(CHROMIUM)
	$(BIN)/python -m pytest -q -n $${TEST_WORKERS:-auto} --dist loadgroup

lint: install
	$(BIN)/ruff check functions infra/cdk tests docs/hooks
	$(BIN)/ruff format --check functions infra/cdk tests docs/hooks
	$(BIN)/mypy

# Opt-in: the local cloud's end-to-end tests against LocalStack (or another emulator).
localstack-test: install
	FIRELINE_ENDPOINT_URL=$${FIRELINE_ENDPOINT_URL:-http://localhost:4566} \
		$(BIN)/python -m pytest -q -m localstack tests/integration/test_localstack.py

# The benchmarks' own extra (APScheduler 3 and SQLAlchemy for the peer comparison), added
# to the environment make install built, never to make test's.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

# Ends by writing the README's and the docs' figure tables from the run's report
# (tests/bench/tables.py): what they quote is this run's, on this code.
# Two processes side by side, a scenario each at a time (the simulations are one core's
# work each; the report is written under a lock). The full-size end-to-end runs, the
# longest (up to half an hour of one core each), go first (bench_e2e.py's longest
# first), so the two processes end together rather than one running a long scenario
# alone at the end.
BENCH_MODULES := tests/bench/bench_e2e.py $(filter-out tests/bench/bench_e2e.py, \
	$(sort $(wildcard tests/bench/bench_*.py)))
# A full run takes under an hour on two cores; it resumes, skipping each scenario an
# earlier run completed on the same code (the report stamps each with the code it ran
# on; a change to the code, the template or the benchmarks starts them all again).
# FRESH=1 starts over.
bench: install $(BENCH_STAMP)
	$(if $(FRESH),rm -f .bench/report.json .bench/report.md)
	FIRELINE_BENCH_RESUME=1 $(BIN)/python -m pytest -q -s -rs -n $${BENCH_WORKERS:-2} \
		--dist load $(BENCH_MODULES) -o python_files="bench_*.py"
	PYTHONPATH=tests $(BIN)/python -m bench.tables

# The headline end-to-end, scale and cost keys at a tenth of their sizes
# (FIRELINE_BENCH_SCALE): the same scenarios in minutes. Their figures say the scale they
# ran at, and go to a report of their own (.bench/report-scale-0.1.json), never over the
# full-size figures the docs quote.
BENCH_QUICK_SCALE ?= 0.1
bench-quick: install $(BENCH_STAMP)
	FIRELINE_BENCH_SCALE=$(BENCH_QUICK_SCALE) $(BIN)/python -m pytest -q -s \
		-n $${BENCH_WORKERS:-2} --dist load \
		tests/bench/bench_e2e.py tests/bench/bench_scale.py tests/bench/bench_cost.py \
		tests/bench/bench_peer.py -o python_files="bench_*.py"

# The DynamoDB contract tests on dynalite too, an independent DynamoDB implementation
# (npm, installed into tests/dynalite on first use, run on 127.0.0.1). CI runs it.
strictness: install
	FIRELINE_DYNALITE=1 $(BIN)/python -m pytest -q -rs tests/contract -k dynalite

# The failure stories (tests/failure/README.md) with the figure each prints.
STORIES := tests/failure \
	tests/integration/test_ticker.py::test_second_ticker_takes_over_within_ttl_plus_one_tick_and_loses_nothing \
	tests/integration/test_ticker.py::test_ticker_whose_renewal_fails_stops_and_writes_nothing_more \
	tests/integration/test_ticker.py::test_stale_ticker_cannot_duplicate_move_backwards_or_lose_a_fire \
	tests/integration/test_ticker.py::test_clock_set_back_five_minutes_fires_nothing_twice \
	tests/integration/test_ticker.py::test_clock_set_forward_five_minutes_follows_the_misfire_policy \
	tests/integration/test_ticker.py::test_cancelled_queued_job_message_is_a_no_op \
	tests/integration/test_ticker.py::test_two_tickers_without_lease_converge_on_one_row_per_key \
	tests/integration/test_worker.py::test_kill_after_the_side_effect_before_the_ack_redelivers_and_the_effect_stays_once \
	tests/integration/test_workflows.py::test_a_failing_node_of_1000_retries_and_no_other_effect_repeats \
	tests/integration/test_workflows.py::test_a_permanent_failure_of_1000_blocks_descendants_and_retry_failed_finishes \
	tests/integration/test_long_jobs.py::test_a_thirty_minute_job_does_not_hold_up_one_second_jobs \
	tests/integration/test_api.py::test_bad_input_is_refused_naming_the_field_and_changes_nothing \
	tests/unit/test_changes.py::test_cancelling_a_job_whose_fire_was_just_materialized_cancels_that_fire \
	tests/sim/test_ticker_sim.py::test_an_invocation_killed_at_any_call_of_its_round_loses_nothing \
	tests/sim/test_ticker_sim.py::test_a_ticker_cut_off_from_its_lease_writes_nothing_once_another_could_hold_it \
	tests/sim/test_ticker_sim.py::test_a_backlog_larger_than_one_invocation_drains_with_progress_every_invocation \
	tests/sim/test_ticker_sim.py::test_one_call_in_ten_failing_or_timing_out_loses_no_fire_and_no_invocation \
	tests/integration/test_api_workflows.py::test_a_bad_definition_is_refused_naming_the_field_and_stores_nothing \
	tests/integration/test_handlers.py::test_worker_handler_fixture_batch_reports_the_keyless_record \
	tests/integration/test_handlers.py::test_a_ticker_event_naming_no_group_is_refused \
	tests/integration/test_handlers.py::test_workflow_handler_applies_events_and_reports_bad_ones \
	tests/unit/test_ticker_races.py::test_an_update_after_an_advance_keeps_the_new_versions_next_fire \
	tests/unit/test_ticker_races.py::test_a_pause_and_resume_after_an_advance_keeps_the_next_fire \
	tests/campaign/test_campaign.py::test_the_campaign_finds_no_violation \
	tests/integration/test_slot_faults.py::test_a_throttled_read_of_the_tenants_slots_leaves_no_run_slot_behind \
	tests/integration/test_slot_faults.py::test_a_throttled_give_back_of_the_run_slot_does_not_skip_the_next_fire \
	tests/integration/test_slot_faults.py::test_a_failed_run_whose_tenant_slot_give_back_is_throttled_still_gives_its_run_slot_and_retries \
	tests/unit/test_slot_give_backs.py::test_a_long_outcome_gives_back_the_run_slot_when_the_tenant_slots_give_back_fails \
	tests/unit/test_ticker_skip_records.py::test_skipped_fires_keep_their_record_when_the_tick_ends_right_after_the_advance \
	tests/unit/test_dispatch.py::test_a_summary_walks_past_a_fire_skipped_for_overlap_and_records_the_rest \
	tests/unit/test_invocation_share.py::test_containers_starting_one_tenants_jobs_at_one_instant_all_run_within_its_share \
	tests/unit/test_invocation_share.py::test_a_record_held_until_its_fire_time_decides_its_share_on_the_pool_as_it_is_then \
	tests/unit/test_ticker_skip_records.py::test_held_fires_are_dated_when_they_were_skipped_even_after_the_clock_steps_back \
	tests/unit/test_deadlines.py::test_a_job_the_invocation_cannot_give_its_deadline_goes_back_to_the_queue_unrun \
	tests/integration/test_noisy_neighbour_local.py::test_a_tenant_holding_40_long_jobs_leaves_room_for_another_tenants_job \
	tests/unit/test_invocation_share.py::test_a_tenant_holding_one_of_two_invocations_waits_while_another_tenant_runs \
	tests/unit/test_invocation_share.py::test_containers_left_holding_a_tenants_slots_run_no_more_of_it_than_its_share \
	tests/unit/test_class_share.py::test_a_tenant_at_its_share_of_a_class_waits_while_another_tenant_runs \
	tests/sim/test_noisy_neighbour_sim.py::test_a_tenants_runaway_jobs_do_not_change_another_tenants_outcomes \
	tests/integration/test_api_refused_at_registration.py::test_a_header_value_outside_latin_1_is_refused_422_naming_the_header \
	tests/integration/test_api_refused_at_registration.py::test_an_unregistered_python_handler_is_refused_400_naming_the_handler \
	tests/integration/test_api_refused_at_registration.py::test_every_get_route_refuses_a_query_parameter_it_does_not_take_400_naming_it \
	tests/unit/test_definition_digest.py::test_a_definition_rewritten_after_registration_is_refused_as_corrupt \
	tests/integration/test_aws_targets.py::test_a_role_outside_the_tenants_role_path_is_refused_at_registration_and_run_time \
	tests/integration/test_template.py::test_tenant_targets_are_called_through_the_target_caller_role_only \
	tests/integration/test_template.py::test_target_allowlist_arns_accepts_only_concrete_arns_of_the_target_services \
	tests/integration/test_cdk.py::test_an_app_that_sets_the_tenants_role_path_has_its_wildcard_acknowledged
stories: install
	POWERTOOLS_LOG_LEVEL=ERROR $(BIN)/python -m pytest -q -s -p no:logging $(STORIES)

# The fault campaign, long: CAMPAIGN_EXAMPLES random runs of the whole scheduler under
# faults (tests/campaign). It prints its seed first; `make campaign SEED=n` replays that run.
# KEEP_GOING=1 counts every invariant violated over the run instead of stopping at the first.
CAMPAIGN_EXAMPLES ?= 20000
KEEP_GOING ?= 0
ifndef SEED
SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
campaign: install
	@echo "campaign seed $(SEED): make campaign SEED=$(SEED) replays this run"
	FIRELINE_CAMPAIGN_EXAMPLES=$(CAMPAIGN_EXAMPLES) FIRELINE_CAMPAIGN_KEEP_GOING=$(KEEP_GOING) \
		$(BIN)/python -m pytest -q -s \
		--hypothesis-seed=$(SEED) tests/campaign

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis cdk.out site

# The example CDK app synthesized into cdk.out/, offline: no AWS account or credentials.
# The code is packaged alone (enough for the local cloud); BUNDLE=true pip-installs its
# requirements from PyPI into the asset, as `cdk deploy` needs.
BUNDLE ?= false
cdk-synth: install
	CDK_OUTDIR=cdk.out CDK_CONTEXT_JSON='{"fireline:bundle-dependencies": "$(BUNDLE)"}' \
		$(BIN)/python infra/cdk/app.py

# The whole scheduler on the embedded local cloud (moto), with example schedules.
# Extra flags: make run ARGS="--port 9000 --state-dir .fireline/state"
run: install-run
	$(BIN)/fireline local $(ARGS)

# The documentation site (docs/, mkdocs.yml) into site/, strictly: a broken link, a missing
# page or a page left out of the navigation fails the build. The API and CLI reference
# pages are generated at build time (docs/hooks/reference.py) from the OpenAPI document
# the API serves and from the CLI's parser.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean --site-dir site
