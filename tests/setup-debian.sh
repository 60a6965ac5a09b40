#!/usr/bin/env bash
# Install the Debian packages the test suite drives for real. Idempotent and quick when
# everything is present; needs root (apt-get) only when something is missing.
set -euo pipefail

# package -> a file it installs, to tell whether it is present without dpkg races
declare -A PROVIDES=(
  [prometheus]=/usr/bin/promtool
  [prometheus-alertmanager]=/usr/bin/prometheus-alertmanager
  [prometheus-node-exporter]=/usr/bin/prometheus-node-exporter
  [systemd]=/usr/bin/systemd-analyze
  [openssl]=/usr/bin/openssl
  [shellcheck]=/usr/bin/shellcheck
  [iproute2]=/usr/sbin/ip
  [linux-perf]=/usr/bin/perf
  [ethtool]=/usr/sbin/ethtool
  [ceph-mon]=/usr/bin/ceph-mon
  [ceph-mgr]=/usr/bin/ceph-mgr
  [ceph-osd]=/usr/bin/ceph-osd
  [ceph-common]=/usr/bin/ceph
  # librados' Python binding for the pgs collector (ceph-common depends on it; listed so
  # that a missing binding is installed, not discovered by a failing test)
  [python3-rados]=/usr/lib/python3/dist-packages/rados.cpython-311-x86_64-linux-gnu.so
  # builds the Debian 13 and unstable chroots that hold the newer Ceph releases the tests
  # also run (tests/chroots.py); those suites never enter this machine's apt sources
  [debootstrap]=/usr/sbin/debootstrap
  # `make deb` (deploy/debian/): dpkg-buildpackage with dh and pybuild's pyproject
  # plugin (the package's metadata is PEP 621 only), then lintian on the result
  [dpkg-dev]=/usr/bin/dpkg-buildpackage
  [debhelper]=/usr/bin/dh
  [dh-python]=/usr/bin/dh_python3
  [pybuild-plugin-pyproject]=/usr/share/dh-python/dhpython/build/plugin_pyproject.py
  [python3-all]=/usr/share/doc/python3-all/copyright
  # the compiled reader's headers for every supported Python, and gcc (build-essential)
  [python3-all-dev]=/usr/share/doc/python3-all-dev/copyright
  [build-essential]=/usr/share/build-essential/list
  [python3-setuptools]=/usr/lib/python3/dist-packages/setuptools/__init__.py
  [python3-wheel]=/usr/lib/python3/dist-packages/wheel/__init__.py
  [lintian]=/usr/bin/lintian
  # the compiled reader of the scrape's hot loops (exporter/.../hostfs/_fastread.c),
  # built by `make venv` and in the Debian package
  [gcc]=/usr/bin/gcc
  [python3-dev]=/usr/include/python3.11/Python.h
  # man --warnings checks the man page (tests/test_packaging.py)
  [man-db]=/usr/bin/man
  # builds the monitoring mixin (alerts/mixin/, `make mixin`, tests/test_mixin.py)
  [jsonnet]=/usr/bin/jsonnet
)

want=("$@")
if [ ${#want[@]} -eq 0 ]; then
  want=("${!PROVIDES[@]}")
fi

missing=()
for pkg in "${want[@]}"; do
  file="${PROVIDES[$pkg]:-}"
  if [ -n "$file" ] && [ -e "$file" ]; then
    continue
  fi
  if [ -z "$file" ] && dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
    continue
  fi
  missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup-debian: missing ${missing[*]}; not root, so not installing (tests needing them skip, or fail under CI=true)" >&2
  exit 0
fi
echo "setup-debian: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Package scripts must not start the daemons we run ourselves in the tests.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
