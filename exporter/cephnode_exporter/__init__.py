"""cephnode-exporter: the host side of a Ceph storage node, for Prometheus."""

__version__ = "0.1.0"
