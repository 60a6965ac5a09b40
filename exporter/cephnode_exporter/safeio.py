"""Reading the files an operator names on the command line, within bounds.

A profile (``--profile``) or a web config (``--web.config.file``) is read once at start-up,
from a path anyone who writes the unit file or the container spec chooses. Read naively,
``/dev/zero`` grows without end (1.9 GB before the kernel said no), a FIFO blocks the
start for ever, and a YAML document nested thousands of levels deep overflows the
composer's recursion. This module bounds all three, so each becomes one clear error that
the command line turns into exit code 2.

Used by :mod:`cephnode_exporter.profile`; ``webconfig`` should read through
:func:`read_config_text` and :func:`check_yaml_depth` too.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

import yaml

from cephnode_exporter.hostfs import file_kind

# A profile or a web config is a few KiB; 1 MiB leaves room for comments and long
# certificate lists while bounding what a wrong path can cost.
MAX_CONFIG_BYTES = 1 << 20
# Mappings and sequences inside each other. A profile needs four levels (checks, a check,
# a parameter, a list), a web config five; PyYAML's composer recurses about three Python
# frames per level, so a few hundred levels already reach Python's recursion limit.
MAX_YAML_DEPTH = 32
# libyaml's parser when PyYAML was built with it (Debian's python3-yaml is): 30 times
# faster than the pure-Python one, which takes seconds on a 1 MiB document.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ConfigFileError(ValueError):
    """A configuration file cannot be used; the message is one line naming the file."""


def read_config_text(path: str, what: str, limit: int = MAX_CONFIG_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes.

    The file is opened with O_NONBLOCK (a FIFO's open returns at once instead of waiting
    for a writer) and refused unless fstat says it is a regular file: not a FIFO, a
    device such as /dev/zero, a socket or a directory. The size is checked on the open
    descriptor and again by reading at most ``limit`` + 1 bytes, since a file may grow
    between the two. ``what`` names the file in the message ("profile").
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigFileError(f"{what} {path}: {_reason(exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigFileError(f"{what} {path}: not a regular file ({file_kind(st.st_mode)})")
        if st.st_size > limit:
            raise ConfigFileError(
                f"{what} {path}: {st.st_size} bytes, larger than the limit of {limit}"
            )
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ConfigFileError(f"{what} {path}: larger than the limit of {limit} bytes")
    except OSError as exc:
        raise ConfigFileError(f"{what} {path}: {_reason(exc)}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def check_yaml_depth(text: str, source: str, limit: int = MAX_YAML_DEPTH) -> None:
    """Raise ConfigFileError when YAML ``text`` nests collections deeper than ``limit``,
    or is not valid YAML (the message is one line, with the line and column).

    PyYAML's parser is a state machine with its own stack, so walking the events costs
    no Python recursion; only composing the document recurses. Checking the depth on
    the events first turns a deep document into an error instead of a RecursionError.
    """
    depth = 0
    try:
        for event in yaml.parse(text, Loader=YAML_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limit:
                    line = event.start_mark.line + 1 if event.start_mark else 0
                    raise ConfigFileError(
                        f"{source}: nested deeper than {limit} levels (line {line})"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{source}: not valid YAML: {yaml_error_line(exc)}") from None


def load_yaml(text: str, source: str) -> Any:
    """Safe-load YAML ``text`` after :func:`check_yaml_depth`; ConfigFileError (one line)
    when it is too deep or not valid YAML."""
    check_yaml_depth(text, source)
    try:
        return yaml.load(text, Loader=YAML_LOADER)  # YAML_LOADER is a safe loader
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{source}: not valid YAML: {yaml_error_line(exc)}") from None


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: PyYAML's own text spans several, with a source excerpt."""
    if isinstance(exc, yaml.MarkedYAMLError):
        where = exc.problem_mark or exc.context_mark
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = exc.problem or exc.context or "syntax error"
        return f"{problem}{at}"
    return " ".join(str(exc).split())


def _reason(exc: OSError) -> str:
    return exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
