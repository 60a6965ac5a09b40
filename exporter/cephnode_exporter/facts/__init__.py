"""The facts: what a collector's read step returns and the checks judge.

One module per collector, below both: ``collectors/<name>.py`` builds its facts and
turns them into metrics, ``checks/<name>.py`` judges them, and neither imports the
other. The types are plain dataclasses over the parsing layer's records (hostfs,
devices, ceph), so a metric and the tuning report read the very same values.
"""
