"""Structured log lines: stdlib logging, a JSON formatter, and one way to write an event.

An event is a message that reads well as text and the same facts as fields:
``log_event(log, logging.INFO, "hook ConnectNetwork OK", plugin="vlan", ...)`` logs
``hook ConnectNetwork OK plugin=vlan ...`` with the text format and
``{"message": "hook ConnectNetwork OK", "plugin": "vlan", ...}`` with the JSON one.
Empty fields are left out of both.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal, TypeAlias

__all__ = ["LOG_FORMATS", "JsonFormatter", "LogFormat", "configure_logging", "log_event"]

LogFormat: TypeAlias = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

_FIELDS_ATTR = "networkplugin_fields"
# The attributes every LogRecord has: never copied as event fields.
_RESERVED = frozenset({"time", "level", "logger", "message", "exception"})


def log_event(
    logger: logging.Logger, level: int, what: str, /, **fields: str | int | float | None
) -> None:
    """Log ``what`` with ``fields`` (``None`` and ``""`` left out)."""
    if not logger.isEnabledFor(level):
        return  # nothing below is built for a line nobody will see
    present = {k: v for k, v in fields.items() if v is not None and v != ""}
    text = " ".join([what, *(f"{k}={_text(v)}" for k, v in present.items())])
    logger.log(level, "%s", text, extra={_FIELDS_ATTR: (what, present)})


def _text(value: str | int | float) -> str:
    # A value with a space or a quote is quoted, so a text line still splits into fields.
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text)
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, _FIELDS_ATTR, None)
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
        }
        if event is not None:
            what, fields = event
            out["message"] = what
            out.update(_fields(fields))
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, separators=(",", ":"), default=str)


def _fields(fields: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in fields.items() if k not in _RESERVED}


def configure_logging(prog: str, level: str, log_format: LogFormat) -> None:
    """The service's one stderr handler: text (``prog LEVEL logger: message``) or JSON."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(f"{prog} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
