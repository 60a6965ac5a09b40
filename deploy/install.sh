#!/usr/bin/env bash
# Install cephnode-exporter on a Ceph node: a venv under /opt/cephnode-exporter, the
# system user, the systemd service and socket units and /etc/default/cephnode-exporter.
# Idempotent: run it again to upgrade or after installing Ceph. Starts nothing unless
# --start is given. See docs/install.md.
set -euo pipefail

NAME=cephnode-exporter
UNIT=$NAME.service
SOCKET=$NAME.socket
DEFAULT_PREFIX=/opt/$NAME
DROPIN_FILE=10-ceph-group.conf
SOCKET_DROPIN_FILE=30-systemd-socket.conf
MARKER=.installed-by-install.sh

usage() {
  cat <<EOF
Usage: install.sh [options]
       install.sh --uninstall [--purge] [--prefix DIR] [--root DIR]

Install:
  --source DIR       install from this source checkout (default: the checkout that
                     contains this script)
  --wheel FILE       install from a built wheel instead of a source checkout
  --find-links DIR   take every Python package from DIR, never from an index (offline
                     nodes: 'pip wheel -w DIR <checkout>' on a build host, then
                     --wheel DIR/cephnode_exporter-*.whl --find-links DIR)
  --python PY        interpreter for the venv, Python >= 3.11 (default: python3)
  --prefix DIR       installation directory (default: $DEFAULT_PREFIX)
  --ceph-group NAME  group that owns the Ceph admin sockets (default: ceph)
  --skip-venv        leave the venv alone; only (re)install the user, units and config
  --socket           socket activation: enable $SOCKET and make the service take
                     its socket (--web.systemd-socket) instead of binding one itself;
                     stays so on later runs until --no-socket
  --no-socket        back to the service binding --web.listen-address itself
  --start            enable the service (and the socket) and (re)start afterwards
Uninstall:
  --uninstall        stop and disable the units, remove them and the venv; keeps
                     /etc/default/$NAME, /etc/$NAME and the user
  --purge            with --uninstall: remove those too
Both:
  --root DIR         operate on the tree under DIR instead of / (staging, tests): never
                     calls systemctl; the venv there is not relocatable
  -h, --help         show this help
EOF
}

say() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

# --- arguments ---------------------------------------------------------------------
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source_dir=""
wheel=""
find_links=""
python=python3
prefix=$DEFAULT_PREFIX
root=""
ceph_group=ceph
skip_venv=no
socket_mode=keep
start=no
uninstall=no
purge=no

need_value() {
  if [ $# -lt 2 ] || [ -z "$2" ]; then
    die "$1 needs a value"
  fi
}
while [ $# -gt 0 ]; do
  case $1 in
    --source) need_value "$@"; source_dir=$2; shift 2 ;;
    --wheel) need_value "$@"; wheel=$2; shift 2 ;;
    --find-links) need_value "$@"; find_links=$2; shift 2 ;;
    --python) need_value "$@"; python=$2; shift 2 ;;
    --prefix) need_value "$@"; prefix=$2; shift 2 ;;
    --root) need_value "$@"; root=$2; shift 2 ;;
    --ceph-group) need_value "$@"; ceph_group=$2; shift 2 ;;
    --skip-venv) skip_venv=yes; shift ;;
    --socket) socket_mode=yes; shift ;;
    --no-socket) socket_mode=no; shift ;;
    --start) start=yes; shift ;;
    --uninstall) uninstall=yes; shift ;;
    --purge) purge=yes; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

case $prefix in
  /?*) prefix=${prefix%/} ;;
  *) die "--prefix must be an absolute path other than /: $prefix" ;;
esac
if [ -n "$root" ]; then
  [ -d "$root" ] || die "--root $root is not a directory"
  root=$(cd "$root" && pwd)
  [ "$root" != / ] || root=""
fi
[ "$purge" = no ] || [ "$uninstall" = yes ] || die "--purge only goes with --uninstall"
[ -z "$source_dir" ] || [ -z "$wheel" ] || die "give --source or --wheel, not both"
if [ -n "$root" ] && [ "$start" = yes ]; then
  die "--start cannot be combined with --root"
fi
if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  die "run as root (or stage into a directory with --root DIR)"
fi

# The service user must be able to read the venv whatever root's umask is.
umask 022

dest=$root$prefix
venv=$dest/venv
etc=$root/etc
unit_path=$etc/systemd/system/$UNIT
socket_path=$etc/systemd/system/$SOCKET
dropin_dir=$etc/systemd/system/$UNIT.d
sysusers_path=$etc/sysusers.d/$NAME.conf
default_path=$etc/default/$NAME
confdir=$etc/$NAME

# systemctl only when operating on the live system and systemd is PID 1.
have_systemd() { [ -z "$root" ] && [ -d /run/systemd/system ]; }

user_exists() {
  if [ -z "$root" ]; then
    getent passwd "$1" >/dev/null
  else
    grep -qE "^$1:" "$etc/passwd" 2>/dev/null
  fi
}

# "name:x:gid:" from the group database of the target tree.
group_entry() {
  if [ -z "$root" ]; then
    getent group "$1" || true
  elif [ -f "$etc/group" ]; then
    grep -E "^$1:" "$etc/group" || true
  fi
}

if [ "$start" = yes ] && ! have_systemd; then
  die "--start: systemd is not running on this host"
fi

# --- uninstall ---------------------------------------------------------------------
if [ "$uninstall" = yes ]; then
  if have_systemd; then
    systemctl disable --now "$SOCKET" 2>/dev/null || true
    systemctl disable --now "$UNIT" 2>/dev/null || true
  fi
  rm -f "$unit_path" "$socket_path" "$dropin_dir/$DROPIN_FILE" "$dropin_dir/$SOCKET_DROPIN_FILE" \
    "$sysusers_path"
  rmdir "$dropin_dir" 2>/dev/null || true
  if [ -d "$dest" ]; then
    # Remove only a directory this script created, never an arbitrary --prefix.
    if [ -e "$dest/$MARKER" ]; then
      rm -rf "$dest"
    else
      say "not removing $dest: no $MARKER in it (not installed by this script)"
    fi
  fi
  if [ "$purge" = yes ]; then
    rm -f "$default_path"
    rm -rf "$confdir"
    if user_exists "$NAME"; then
      if [ -n "$root" ]; then
        userdel --prefix "$root" "$NAME" || say "could not remove user $NAME from $root"
      else
        userdel "$NAME" || say "could not remove user $NAME"
      fi
    fi
  fi
  if have_systemd; then
    systemctl daemon-reload
    systemctl reset-failed "$UNIT" "$SOCKET" 2>/dev/null || true
  fi
  say "uninstalled from ${root:-/}"
  exit 0
fi

# --- install: preconditions ----------------------------------------------------------
for f in "$NAME.service" "$NAME.socket" "$NAME.sysusers" "$NAME.default"; do
  [ -f "$script_dir/$f" ] || die "$script_dir/$f is missing: run install.sh from its deploy/ directory"
done
if [ "$skip_venv" = no ]; then
  if [ -n "$wheel" ]; then
    [ -f "$wheel" ] || die "no such wheel: $wheel"
  else
    source_dir=${source_dir:-$script_dir/..}
    [ -f "$source_dir/pyproject.toml" ] || die "$source_dir is not a cephnode-exporter checkout (no pyproject.toml); use --source or --wheel"
    source_dir=$(cd "$source_dir" && pwd)
  fi
  command -v "$python" >/dev/null || die "no interpreter $python"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "$python is older than 3.11"
  "$python" -c 'import ensurepip, venv' 2>/dev/null ||
    die "$python cannot create venvs: apt-get install python3-venv"
  # The marker lets --uninstall remove $dest; never claim a directory holding anything
  # but a venv (think --prefix /usr/local).
  if [ -d "$dest" ] && [ ! -e "$dest/$MARKER" ]; then
    for entry in "$dest"/* "$dest"/.[!.]*; do
      [ -e "$entry" ] || continue
      [ "$entry" = "$venv" ] && [ -f "$venv/pyvenv.cfg" ] && continue
      die "$dest exists and holds more than a venv: choose another --prefix"
    done
  fi
fi

# --- the user --------------------------------------------------------------------------
mkdir -p "$etc/sysusers.d"
install -m 0644 "$script_dir/$NAME.sysusers" "$sysusers_path"
if command -v systemd-sysusers >/dev/null; then
  systemd-sysusers --root="${root:-/}" "$sysusers_path"
elif ! user_exists "$NAME"; then
  # No systemd-sysusers (minimal image): the same user with shadow's useradd.
  useradd ${root:+--prefix "$root"} --system --user-group --no-create-home \
    --home-dir / --shell /usr/sbin/nologin --comment "cephnode-exporter Prometheus exporter" "$NAME"
fi
gid=$(group_entry "$NAME" | cut -d: -f3)
[ -n "$gid" ] || die "user $NAME was not created"

# --- the venv ------------------------------------------------------------------------
if [ "$skip_venv" = no ]; then
  mkdir -p "$dest"
  touch "$dest/$MARKER"
  if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    say "creating venv $venv"
    "$python" -m venv --clear "$venv"
  fi
  pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input --quiet)
  if [ -n "$find_links" ]; then
    pip+=(--no-index --find-links "$find_links")
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if [ -z "$wheel" ]; then
    # Build from a copy: a build in the checkout would leave root-owned build/ and
    # egg-info/ directories in it.
    say "building a wheel from $source_dir"
    mkdir "$work/src"
    tar -C "$source_dir" --exclude=./.git --exclude=./.venv --exclude=./build \
      --exclude='*.egg-info' --exclude=__pycache__ -cf - . | tar -C "$work/src" -xf -
    "${pip[@]}" wheel --no-deps --wheel-dir "$work/dist" "$work/src"
    wheel=$(find "$work/dist" -name 'cephnode_exporter-*.whl' | head -n 1)
    [ -n "$wheel" ] || die "building the wheel produced nothing"
  fi
  say "installing $(basename "$wheel") into $venv"
  # First the dependencies (upgraded only when needed), then the package itself even when
  # the version number did not change.
  "${pip[@]}" install "$wheel"
  "${pip[@]}" install --force-reinstall --no-deps "$wheel"
  "$venv/bin/$NAME" --version >/dev/null || die "the installed $NAME does not run"
elif [ ! -x "$venv/bin/$NAME" ]; then
  say "warning: --skip-venv and $venv/bin/$NAME does not exist: the service cannot start"
fi

# --- the unit, its ceph-group drop-in, the configuration -------------------------------
mkdir -p "$etc/systemd/system" "$etc/default"
# The unit names the venv of the default prefix; point it at ours.
sed "s|$DEFAULT_PREFIX/venv/|$prefix/venv/|g" "$script_dir/$NAME.service" >"$unit_path.new"
chmod 0644 "$unit_path.new"
mv -f "$unit_path.new" "$unit_path"
# The socket unit is always installed; whether it is used is --socket's business.
install -m 0644 "$script_dir/$SOCKET" "$socket_path.new"
mv -f "$socket_path.new" "$socket_path"

# Socket activation: the service takes the socket systemd holds (sd_listen_fds(3)) via
# --web.systemd-socket, added to ExecStart= here rather than to ARGS, because
# /etc/default/$NAME is the administrator's and never rewritten. Requires= starts the
# socket whenever the service starts (without it the exporter exits: no socket passed).
# Without --socket or --no-socket the previous choice stays.
if [ "$socket_mode" = yes ]; then
  mkdir -p "$dropin_dir"
  cat >"$dropin_dir/$SOCKET_DROPIN_FILE.new" <<DROPIN
# Written by deploy/install.sh --socket: $NAME listens on the socket of $SOCKET
# (socket activation). Undo with install.sh --no-socket.
[Unit]
Requires=$SOCKET
After=$SOCKET

[Service]
ExecStart=
ExecStart=$prefix/venv/bin/$NAME serve --web.systemd-socket \$ARGS
DROPIN
  chmod 0644 "$dropin_dir/$SOCKET_DROPIN_FILE.new"
  mv -f "$dropin_dir/$SOCKET_DROPIN_FILE.new" "$dropin_dir/$SOCKET_DROPIN_FILE"
elif [ "$socket_mode" = no ] && [ -e "$dropin_dir/$SOCKET_DROPIN_FILE" ]; then
  rm -f "$dropin_dir/$SOCKET_DROPIN_FILE"
  rmdir "$dropin_dir" 2>/dev/null || true
fi
socket_active=no
[ -e "$dropin_dir/$SOCKET_DROPIN_FILE" ] && socket_active=yes

# SupplementaryGroups= naming a group that does not exist makes every start fail
# (status 216/GROUP), so the group is added by a drop-in that exists only while the
# group does. Re-run this script after installing or removing Ceph.
if [ -n "$(group_entry "$ceph_group")" ]; then
  mkdir -p "$dropin_dir"
  cat >"$dropin_dir/$DROPIN_FILE.new" <<DROPIN
# Written by deploy/install.sh because group "$ceph_group" exists on this host: lets
# $NAME open the Ceph admin sockets under /run/ceph. Re-run install.sh to update.
[Service]
SupplementaryGroups=$ceph_group
DROPIN
  chmod 0644 "$dropin_dir/$DROPIN_FILE.new"
  mv -f "$dropin_dir/$DROPIN_FILE.new" "$dropin_dir/$DROPIN_FILE"
else
  if [ -e "$dropin_dir/$DROPIN_FILE" ]; then
    rm -f "$dropin_dir/$DROPIN_FILE"
    rmdir "$dropin_dir" 2>/dev/null || true
  fi
  say "warning: no group $ceph_group here: $NAME runs without access to the Ceph admin" \
    "sockets (install Ceph or pass --ceph-group, then run install.sh again)"
fi

# Never overwrite the administrator's settings.
if [ -e "$default_path" ]; then
  if ! cmp -s "$script_dir/$NAME.default" "$default_path"; then
    say "keeping $default_path (differs from $script_dir/$NAME.default)"
  fi
else
  install -m 0644 "$script_dir/$NAME.default" "$default_path"
fi

# For --web.config.file and its TLS key: readable by the service, by no other user.
mkdir -p "$confdir"
chmod 0750 "$confdir"
if [ "$(id -u)" -eq 0 ]; then
  chown "0:$gid" "$confdir"
fi

# --- systemd -------------------------------------------------------------------------
if have_systemd; then
  systemctl daemon-reload
  if [ "$socket_active" = yes ]; then
    systemctl enable "$SOCKET"
  else
    # Left enabled, the socket would hold port 10060 against the service's own bind.
    systemctl disable --now "$SOCKET" 2>/dev/null || true
  fi
  if [ "$start" = yes ]; then
    systemctl enable "$UNIT"
    if [ "$socket_active" = yes ]; then
      # The service must stop before the socket takes the port over.
      systemctl stop "$UNIT"
      systemctl restart "$SOCKET"
    fi
    systemctl restart "$UNIT"
    say "started; check with: systemctl status $UNIT"
  elif systemctl is-active --quiet "$UNIT"; then
    say "$UNIT is running the previous version: systemctl restart $UNIT"
  elif [ "$socket_active" = yes ]; then
    say "installed; start with: systemctl enable --now $SOCKET $UNIT"
  else
    say "installed; start with: systemctl enable --now $UNIT"
  fi
else
  say "installed into ${root:-/}"
fi

