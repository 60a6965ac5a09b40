# cephnode-exporter: the two commands a newcomer needs are `make run` and `make test`.
# Both set up everything themselves on a fresh Debian 12 machine.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: run test bench soak lint format deps venv golden dashboards mixin clean deb man

# A venv with the package (editable) and the test tools; rebuilt when pyproject.toml,
# setup.py or the compiled reader's source changes. The editable install compiles
# hostfs/_fastread.c in place (gcc and the Python headers: python3-dev).
FASTREAD := exporter/cephnode_exporter/hostfs/_fastread.c
$(VENV)/.stamp: pyproject.toml setup.py $(FASTREAD)
	@# Debian's python3 ships venv without ensurepip until python3-venv is installed.
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || tests/setup-debian.sh python3-venv
	@command -v gcc >/dev/null && $(PYTHON) -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' || tests/setup-debian.sh gcc python3-dev
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

venv: $(VENV)/.stamp

# Debian packages the suite drives for real (promtool, node_exporter, systemd-analyze,
# openssl, and dpkg-buildpackage, debhelper, dh-python, lintian, debootstrap for the
# Debian package); installed with apt-get when missing and we are root.
deps:
	tests/setup-debian.sh

run: venv
	$(VENV)/bin/cephnode-exporter $(ARGS)

# The tests' temporary directories (pytest's --basetemp, cleared at the start of each run)
# on a tmpfs when /dev/shm has 6 GiB free: the fixture node trees (17,000 small files
# each) are built there in 0.4 s where an ext4 disk mounted with `discard` took 13 s, and
# removed as fast when their test passes (pyproject.toml). Otherwise pytest's default,
# under /tmp. TEST_BASETEMP=dir chooses; TEST_BASETEMP= keeps pytest's default.
TEST_BASETEMP ?= $(shell d=/dev/shm; [ -d $$d ] && [ -w $$d ] && \
	[ "$$(df -Pk $$d 2>/dev/null | awk 'NR == 2 { print $$4 }')" -ge 6291456 ] 2>/dev/null && \
	echo $$d/cephnode-exporter-tests-$$(id -u))

test: venv deps
	$(PY) -m ruff check exporter tests dashboards deploy alerts/mixin
	$(PY) -m ruff format --check exporter tests dashboards deploy alerts/mixin
	$(PY) -m mypy exporter/cephnode_exporter
	$(PY) -m pytest tests $(if $(TEST_BASETEMP),--basetemp=$(TEST_BASETEMP)) $(PYTEST_ARGS)

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
	$(PY) -m ruff check exporter tests dashboards deploy alerts/mixin
	$(PY) -m ruff format --check exporter tests dashboards deploy alerts/mixin
	$(PY) -m mypy exporter/cephnode_exporter

format: venv
	$(PY) -m ruff format exporter tests dashboards deploy alerts/mixin
	$(PY) -m ruff check --fix exporter tests dashboards deploy alerts/mixin

# Rewrite every generated file after an intended change, then review the diff: the golden
# files under tests/golden/ (the tests that compare with them, under --update-golden) and
# the Grafana dashboards (dashboards/*.json, from dashboards/generate.py). The same tests
# fail in `make test` while a file is stale; tests/test_generated.py fails when a test
# that compares with a golden file is missing here, or a golden file is written by none.
GOLDEN_TESTS := \
	tests/test_golden.py::test_dump_matches_golden \
	tests/test_collectors.py::test_collector_exposition \
	tests/test_check.py::test_check_json_matches_expected \
	tests/test_kernel.py::test_kernel_exposition \
	tests/test_net.py::test_net_exposition \
	tests/test_nvme.py::test_nvme_exposition \
	tests/test_iommu.py::test_iommu_exposition \
	tests/test_irq.py::test_collector_exposition

.PHONY: generate
generate: venv deps
	$(PY) -m pytest -q $(GOLDEN_TESTS) --update-golden
	$(MAKE) mixin man

golden: venv deps
	$(PY) -m pytest -q $(GOLDEN_TESTS) --update-golden

dashboards:
	$(PYTHON) dashboards/generate.py

# --- Debian package (deploy/debian/, docs/packaging.md) ----------------------------------
# `make deb` builds cephnode-exporter_<version>_<arch>.deb in this directory: dpkg-buildpackage
# (dh with pybuild, Debian 12's own python3 and libraries) in a copy of the checkout under
# build/deb, then lintian, whose errors fail it. Install the result on a Debian 12 node
# with `apt install ./cephnode-exporter_*.deb`. tests/test_deb.py builds it and installs
# it into a fresh Debian 12 chroot.
# Only the build tools (not the whole suite's list of `deps`).
DEB_TOOLS := dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all python3-all-dev \
	build-essential python3-setuptools python3-wheel lintian
deb:
	tests/setup-debian.sh $(DEB_TOOLS)
	deploy/build-deb.sh

# Rewrite the man page deploy/cephnode-exporter.1 from the argument parser; review and
# commit the diff (tests/test_packaging.py fails while it differs).
man: venv
	$(PY) deploy/manpage.py > deploy/cephnode-exporter.1.new
	mv deploy/cephnode-exporter.1.new deploy/cephnode-exporter.1

# Rewrite the rule files (alerts/cephnode-*.yml) and the dashboards from the monitoring
# mixin (alerts/mixin/, alerts/README.md "Monitoring mixin"); review and commit the diff
# (tests/test_mixin.py fails while they differ). generate.py runs first: its dashboards
# are the mixin's input. jsonnet 0.18 sorts keys, so format_dashboards.py lays the JSON
# out as generate.py does.
MIXIN_BUILD := build/mixin
mixin: dashboards
	@command -v jsonnet >/dev/null || tests/setup-debian.sh jsonnet
	rm -rf $(MIXIN_BUILD)
	mkdir -p $(MIXIN_BUILD)/dashboards
	jsonnet -J alerts/mixin -S -m $(MIXIN_BUILD) --tla-str part=rules alerts/mixin/build.jsonnet
	jsonnet -J alerts/mixin -m $(MIXIN_BUILD)/dashboards --tla-str part=dashboards alerts/mixin/build.jsonnet
	cp $(MIXIN_BUILD)/cephnode-rules.yml $(MIXIN_BUILD)/cephnode-alerts.yml alerts/
	$(PYTHON) alerts/mixin/format_dashboards.py dashboards $(MIXIN_BUILD)/dashboards dashboards

clean:
	rm -rf $(VENV) build exporter/*.egg-info .pytest_cache .ruff_cache
	rm -f cephnode-exporter_*.deb
