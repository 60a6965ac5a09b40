#!/usr/bin/env bash
# Build the Debian package cephnode-exporter_<version>_<arch>.deb from this checkout, then
# run lintian on it. `make deb` runs this; docs/packaging.md explains the package.
#
# The packaging lives in deploy/debian/ because the repository's top level is fixed; the
# build runs in a copy of the checkout under build/deb/ with deploy/debian/ as debian/,
# so the checkout itself gets no build products. Needs Debian 12's dpkg-dev, debhelper,
# dh-python, pybuild-plugin-pyproject and lintian (tests/setup-debian.sh installs them).
#
# Usage: deploy/build-deb.sh [OUTDIR]      (default: the checkout's top directory)
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
outdir=${1:-$top}
say() { printf 'build-deb: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

for tool in dpkg-buildpackage dh dh_python3 lintian; do
  command -v "$tool" >/dev/null || die "$tool is missing: run tests/setup-debian.sh as root"
done

# One version: the package's (exporter/cephnode_exporter/__init__.py) is the changelog's.
version=$(dpkg-parsechangelog -l "$top/deploy/debian/changelog" -S Version)
py_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$top/exporter/cephnode_exporter/__init__.py")
[ "$version" = "$py_version" ] ||
  die "deploy/debian/changelog says $version, cephnode_exporter.__version__ $py_version: add a changelog entry (dch -v $py_version)"

work=$top/build/deb
src=$work/cephnode-exporter-$version
rm -rf "$work"
mkdir -p "$src"
tar -C "$top" --exclude=./.git --exclude=./.venv --exclude=./build --exclude='./*.deb' \
  --exclude='*.egg-info' --exclude='*.so' --exclude=__pycache__ --exclude=.pytest_cache --exclude=.ruff_cache \
  --exclude=.mypy_cache -cf - . | tar -C "$src" -xf -
cp -a "$top/deploy/debian" "$src/debian"

say "building $version in $src"
# Debian's own interpreter and tools only: a venv or pyenv python3 earlier in PATH
# would otherwise build the package against another Python.
(cd "$src" && env -u VIRTUAL_ENV -u PYTHONPATH -u PYTHONHOME \
  PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
  dpkg-buildpackage --build=binary --unsigned-source --unsigned-changes) >"$work/build.log" 2>&1 ||
  {
    tail -n 40 "$work/build.log" >&2
    die "dpkg-buildpackage failed (whole log: $work/build.log)"
  }

# Architecture any: the compiled reader (exporter/cephnode_exporter/hostfs/_fastread.c).
deb=cephnode-exporter_${version}_$(dpkg --print-architecture).deb
[ -f "$work/$deb" ] || die "dpkg-buildpackage produced no $deb"
mkdir -p "$outdir"
cp "$work/$deb" "$outdir/$deb"

# Errors fail the build; every warning kept is explained in docs/packaging.md.
say "lintian $deb"
lintian --fail-on error --display-info --tag-display-limit 0 "$outdir/$deb" >&2 ||
  die "lintian reports errors on $deb"
say "built $outdir/$deb"
