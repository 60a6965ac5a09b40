"""NUMA nodes and their CPUs, to say on which nodes a process may run.

``/sys/devices/system/node/node<N>/cpulist`` (Documentation/ABI/stable/sysfs-devices-node,
drivers/base/node.c) lists the node's CPUs in the cpulist format. A CPU taken offline is
removed from its node's list (``numa_remove_cpu()`` on x86), so the lists hold exactly the
CPUs a thread can run on. A kernel without CONFIG_NUMA has no ``node`` directory: the
topology is then unknown, which is not an error.
"""

from __future__ import annotations

import os
import re

from cephnode_exporter.hostfs import HostFS, ParseError, parse_cpulist, read_text

NODE_DIR = ("devices", "system", "node")
_NODE_RE = re.compile(r"node([0-9]{1,4})")  # \d would also match "٣"


def read_node_cpus(fs: HostFS) -> dict[int, frozenset[int]] | None:
    """node -> its online CPUs; None without NUMA support (no node directory)."""
    base = fs.sys(*NODE_DIR)
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, base) from None
    nodes: dict[int, frozenset[int]] = {}
    for name in names:
        m = _NODE_RE.fullmatch(name)
        if m is None:
            continue
        path = os.path.join(base, name, "cpulist")
        text = read_text(path)
        try:
            nodes[int(m.group(1))] = frozenset(parse_cpulist(text))
        except ValueError as exc:
            raise ParseError(path, str(exc)) from None
    return dict(sorted(nodes.items()))


def cpus_per_node(cpus: frozenset[int], nodes: dict[int, frozenset[int]]) -> dict[int, int]:
    """How many of ``cpus`` each node holds; nodes holding none are left out (so are
    CPUs on no node: offline ones, which an affinity mask may still name)."""
    out = {}
    for node, node_cpus in nodes.items():
        n = len(cpus & node_cpus)
        if n:
            out[node] = n
    return out
