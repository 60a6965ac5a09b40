"""Ceph daemons on this node, through their admin sockets.

:mod:`.asok` is the client (protocol, allowlist, deadlines, bounded parallel queries);
:mod:`.discovery` finds the OSD sockets. Neither knows anything about Prometheus: the
``osd`` collector turns their results into metrics. See docs/ceph.md.
"""
