"""Kernel stack sampling for the ``kprofile`` collector: where the CPUs spend their time.

The reference cluster's worst bottleneck (77 % of CPU samples spinning on a lock, 61 %
under ``alloc_iova`` from the NVMe submission path, drivers/iommu/iova.c) was invisible to
every counter and only a one-off ``perf`` profile found it. This package turns that
profile into numbers that are always there:

- :mod:`.classify`: which class a sampled call chain belongs to (idle, user, kernel,
  spinlock, spinlock_iommu, iommu), and the per-window counts with a bounded set of
  spin-lock callers;
- :mod:`.perfscript`: a streaming parser of ``perf script`` text, line by line, with
  every input bounded (line length, frames per sample, malformed lines);
- :mod:`.runner`: one sampling window, ``perf record | perf script`` run as two
  subprocesses under a time and memory bound, killed and reaped on any fault;
- :mod:`.sampler`: the background thread that runs a window every interval and keeps
  the latest results for scrapes, which never wait for a window.

Why the ``perf`` tool and not ``perf_event_open`` from Python or eBPF: docs/kprofile.md.
Nothing here knows about Prometheus.
"""
