"""An OSD admin socket that replays the payloads recorded from the real test cluster.

`make bench` starts one of these processes per simulated OSD, so each socket has its own
interpreter and answers one connection at a time, as a Ceph daemon's admin socket thread
does. The replies are the recorded JSON of ``tests/fixtures/ceph/<kind>.*.json`` (Ceph
16.2.15, recorded by ``tests/cephcluster.py record``), byte for byte except for the
options given on the command line.

    python tests/bench/osd_replay.py --socket /tmp/x/ceph-osd.0.asok --kind bluestore
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ceph"
COMMANDS = {
    "perf dump": "perf_dump",
    "perf histogram dump": "perf_histogram_dump",
    "dump_ops_in_flight": "dump_ops_in_flight",
    "config show": "config_show",
    "version": "version",
}
UNKNOWN = b"ERROR: (22) Invalid argument\n"


def replies(kind: str, debug_zero: bool, idle: bool) -> dict[str, bytes]:
    out = {}
    for command, stem in COMMANDS.items():
        data = json.loads((FIXTURES / f"{kind}.{stem}.json").read_bytes())
        if command == "config show" and debug_zero:
            # A tuned OSD (seed 004): every debug subsystem at 0/0.
            for key, val in data.items():
                if key.startswith("debug_") and "/" in str(val):
                    data[key] = "0/0"
        if command == "dump_ops_in_flight" and idle:
            data = {"ops": [], "num_ops": 0}
        out[command] = json.dumps(data).encode()
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
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve(args.socket, replies(args.kind, args.debug_zero, args.idle))
    finally:
        if os.path.exists(args.socket):
            os.unlink(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
