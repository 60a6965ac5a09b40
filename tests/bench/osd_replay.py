"""An OSD admin socket that replays the payloads recorded from the real test cluster.

`make bench` starts one of these processes per simulated OSD, so each socket has its own
interpreter and answers one connection at a time, as a Ceph daemon's admin socket thread
does. The replies are the recorded JSON of ``tests/fixtures/ceph/<kind>.*.json`` (Ceph
16.2.15, recorded by ``tests/cephcluster.py record``), byte for byte except for the
options given on the command line.

With ``--threads N`` the process also takes a real OSD's /proc shape: its main thread is
named ``ceph-osd`` (prctl(2) PR_SET_NAME; /proc/<pid>/stat shows the thread group
leader's name, and the exporter reads a socket's peer only when it is an OSD's), and it
runs N threads in all, named as a Pacific BlueStore OSD's threads are, that sleep. The
exporter finds this process as the socket's peer (SO_PEERCRED, socket(7)) and reads its
/proc/<pid>/stat and every /proc/<pid>/task/<tid>/status, as on a storage node; the
kernel builds those files for each read (fs/proc/array.c), which a fixture file cannot
stand in for. ``--osd-data`` points config show's osd_data at an OSD directory of the
fixture tree, so the exporter also follows its block link to the disk.

    python tests/bench/osd_replay.py --socket /tmp/x/ceph-osd.0.asok --kind bluestore
    python tests/bench/osd_replay.py --socket /tmp/x/ceph-osd.10.asok --threads 55 \\
        --osd-data /var/lib/ceph/osd/ceph-10
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import signal
import socket
import struct
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.fixtures.sysfsgen import _OSD_THREADS, _SHARD_THREAD  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "ceph"
# prctl(2): PR_SET_NAME names the calling thread (at most 15 bytes, TASK_COMM_LEN 16).
PR_SET_NAME = 15
COMMANDS = {
    "perf dump": "perf_dump",
    "perf histogram dump": "perf_histogram_dump",
    "dump_ops_in_flight": "dump_ops_in_flight",
    "config show": "config_show",
    "version": "version",
}
UNKNOWN = b"ERROR: (22) Invalid argument\n"


def set_thread_name(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl(PR_SET_NAME, {name!r})")


def thread_names(count: int) -> list[str]:
    """``count`` thread names of a BlueStore OSD, the main thread's first; the op shard
    threads (tp_osd_tp) fill up to ``count``, as they are most of a real OSD's."""
    names = [name for name, n, _vol, _invol in _OSD_THREADS for _ in range(n)]
    names += [_SHARD_THREAD[0]] * max(0, count - len(names))
    return names[:count]


def start_threads(count: int) -> None:
    """Name this thread ceph-osd and start ``count - 1`` more that sleep for good."""
    names = thread_names(count)
    set_thread_name(names[0])
    forever = threading.Event()
    # Small stacks: an idle thread needs little, and 55 default 8 MiB stacks per
    # process would only inflate the replay's address space.
    threading.stack_size(256 * 1024)
    for name in names[1:]:

        def sleep(name: str = name) -> None:
            set_thread_name(name)
            forever.wait()

        threading.Thread(target=sleep, name=name, daemon=True).start()


def replies(
    kind: str,
    debug_zero: bool,
    idle: bool,
    osd_data: str | None = None,
    name: str | None = None,
) -> dict[str, bytes]:
    out = {}
    for command, stem in COMMANDS.items():
        data = json.loads((FIXTURES / f"{kind}.{stem}.json").read_bytes())
        if command == "config show" and debug_zero:
            # A tuned OSD (as SUSE's IO500 run): every debug subsystem at 0/0.
            for key, val in data.items():
                if key.startswith("debug_") and "/" in str(val):
                    data[key] = "0/0"
        if command == "config show" and osd_data is not None:
            data["osd_data"] = osd_data
        if command == "config show" and name is not None:
            # A daemon names itself (the exporter checks it against the socket's id).
            data["name"] = name
        if command == "dump_ops_in_flight" and idle:
            data = {"ops": [], "num_ops": 0}
        out[command] = json.dumps(data).encode()
    # Recorded by tests/cephcluster.py record-network, at rest.
    network = FIXTURES / "network" / f"{kind}.dump_osd_network.rest.json"
    out["dump_osd_network"] = network.read_bytes()
    return out


def serve(path: str, answers: dict[str, bytes]) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            request = b""
            try:
                while not request.endswith((b"\0", b"\n")) and len(request) < 1024:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    request += chunk
                prefix = json.loads(request.rstrip(b"\0\n")).get("prefix", "")
                data = answers.get(prefix, UNKNOWN)
                conn.sendall(struct.pack(">I", len(data)) + data)
            except (OSError, ValueError):
                continue  # the client gave up, or sent garbage: next connection


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--kind", choices=("bluestore", "memstore"), default="bluestore")
    parser.add_argument("--debug-zero", action="store_true", help="every debug level 0/0")
    parser.add_argument("--idle", action="store_true", help="no ops in flight")
    parser.add_argument(
        "--threads", type=int, default=0, help="a real OSD's /proc shape: N threads in all"
    )
    parser.add_argument("--osd-data", help="config show's osd_data (a fixture OSD dir)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.threads > 0:
        start_threads(args.threads)
    match = re.search(r"ceph-(osd\.[0-9]+)\.asok$", args.socket)
    name = match.group(1) if match else None
    try:
        answers = replies(args.kind, args.debug_zero, args.idle, args.osd_data, name)
        serve(args.socket, answers)
    finally:
        if os.path.exists(args.socket):
            os.unlink(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
