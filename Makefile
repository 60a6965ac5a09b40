# cephnode-exporter: the two commands a newcomer needs are `make run` and `make test`.
# Both set up everything themselves on a fresh Debian 12 machine.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: run test bench soak lint format deps venv golden dashboards clean

# A venv with the package (editable) and the test tools; rebuilt when setup.cfg changes.
$(VENV)/.stamp: setup.cfg pyproject.toml
	@# Debian's python3 ships venv without ensurepip until python3-venv is installed.
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || tests/setup-debian.sh python3-venv
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

venv: $(VENV)/.stamp

# Debian packages the suite drives for real (promtool, node_exporter, systemd-analyze,
# openssl); installed with apt-get when missing and we are root.
deps:
	tests/setup-debian.sh

run: venv
	$(VENV)/bin/cephnode-exporter $(ARGS)

test: venv deps
	$(PY) -m ruff check exporter tests dashboards
	$(PY) -m ruff format --check exporter tests dashboards
	$(PY) -m mypy exporter/cephnode_exporter
	$(PY) -m pytest tests $(PYTEST_ARGS)

# KPROFILE_ARGS: for the sampler's bench, e.g. KPROFILE_ARGS=--quick (no full 60 s cycle).
# ARGS=--quick: 3 short interleaved rounds, no sequential table (checks the method).
# strace and a C compiler measure the syscall limit (docs/performance.md, "Measuring
# against the syscall limit").
# Speed only: memory, descriptors and threads over many scrapes are `make soak`'s.
bench: venv deps
	@command -v strace >/dev/null && command -v cc >/dev/null || tests/setup-debian.sh strace gcc libc6-dev
	$(PY) tests/bench/bench.py $(ARGS)
	$(PY) tests/bench/bench_kprofile.py $(KPROFILE_ARGS)
	$(PY) tests/bench/bench_rules.py

# 10,000 scrapes by one client, then ten in parallel, against ten replayed OSDs; fails
# when RSS grows or passes 60 MB, or descriptors or threads grow (docs/performance.md,
# "Soak"). About 6 minutes on 2 cores. SOAK_ARGS, e.g. SOAK_ARGS="--scrapes 2000".
soak: venv
	$(PY) tests/bench/soak.py $(SOAK_ARGS)

lint: venv
	$(PY) -m ruff check exporter tests dashboards
	$(PY) -m ruff format --check exporter tests dashboards
	$(PY) -m mypy exporter/cephnode_exporter

format: venv
	$(PY) -m ruff format exporter tests dashboards
	$(PY) -m ruff check --fix exporter tests dashboards

# Rewrite the golden exposition files after an intended change; review the diff.
golden: venv deps
	$(PY) -m pytest tests/test_golden.py --update-golden

# Rewrite the Grafana dashboards (dashboards/*.json) from dashboards/generate.py; review
# and commit the diff (tests/test_dashboards.py fails while they differ).
dashboards:
	$(PYTHON) dashboards/generate.py

clean:
	rm -rf $(VENV) build exporter/*.egg-info .pytest_cache .ruff_cache
