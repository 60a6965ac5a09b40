"""Logging in logfmt or JSON, the two formats log pipelines of Prometheus exporters expect."""

from __future__ import annotations

import json
import logging
import sys
import time

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
_NAMES = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warn",
    logging.ERROR: "error",
}


def _timestamp(record: logging.LogRecord) -> str:
    ms = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, str]:
    fields = {
        "ts": _timestamp(record),
        "level": _NAMES.get(record.levelno, record.levelname.lower()),
        "caller": f"{record.module}:{record.lineno}",
        "msg": record.getMessage(),
    }
    for key, value in getattr(record, "kv", {}).items():
        fields[key] = str(value)
    if record.exc_info:
        fields["err"] = logging.Formatter().formatException(record.exc_info).replace("\n", " | ")
    return fields


def _quote(value: str) -> str:
    if value and not any(c in value for c in ' "=\n\t\\'):
        return value
    return json.dumps(value)


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_quote(v)}" for k, v in _fields(record).items())


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record))


def setup(level: str, fmt: str) -> None:
    """Configure the root logger on stderr (journald picks it up under systemd)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])


def kv(**fields: object) -> dict[str, dict[str, object]]:
    """Structured fields for one log call: ``log.info("msg", extra=kv(collector="x"))``."""
    return {"kv": fields}
