"""Structured log lines: stdlib logging, a JSON formatter, and one way to write an event.

An event is a message that reads well as text and the same facts as fields:
``log_event(log, logging.INFO, "hook ConnectNetwork OK", plugin="vlan", ...)`` logs
``hook ConnectNetwork OK plugin=vlan ...`` with the text format and
``{"message": "hook ConnectNetwork OK", "plugin": "vlan", ...}`` with the JSON one.
Empty fields are left out of both.

What a line costs the thread that logs it
-----------------------------------------
A service logs one line per hook and per effect transition at INFO, on the hook's
thread. That thread only builds the record (the fields it was given, filtered) and
hands it to a queue: the text of an event is built when a handler formats it (once,
``_Event``), and the service's handler (``configure_logging``) formats and writes on
one writer thread of its own (``BackgroundHandler``). So a hook never waits on stderr,
a pipe whose reader (journald, the container runtime) may be slow to drain it, and
never gives up the interpreter lock for a ``write`` in the middle of its work (which
on a busy machine costs far more than the write: docs/observability.md, "Cost").

The price: a line reaches stderr a little after the call that logged it. A flush (the
service's exit paths flush every handler, and ``logging.shutdown`` does at interpreter
exit) waits until every line queued before it is written; a process killed outright
(SIGKILL) can lose the lines of its last moments that were still queued. The journal,
not the log, is what recovery trusts.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import sys
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal, TypeAlias

__all__ = [
    "LOG_FORMATS",
    "BackgroundHandler",
    "JsonFormatter",
    "LogFormat",
    "configure_logging",
    "log_event",
]

LogFormat: TypeAlias = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

_FIELDS_ATTR = "networkplugin_fields"
# The attributes every LogRecord has: never copied as event fields.
_RESERVED = frozenset({"time", "level", "logger", "message", "exception"})
# A text value with any of these is quoted (a text line must still split into fields).
_NEEDS_QUOTES = re.compile(r'[\s"=]')

Field: TypeAlias = str | int | float


def log_event(logger: logging.Logger, level: int, what: str, /, **fields: Field | None) -> None:
    """Log ``what`` with ``fields`` (``None`` and ``""`` left out)."""
    if not logger.isEnabledFor(level):
        return  # nothing below is built for a line nobody will see
    present = {k: v for k, v in fields.items() if v is not None and v != ""}
    # Made here, not by logger.log(): that walks the stack for the caller's file and line,
    # which no format of ours shows (a record's pathname is "", its lineno 0).
    record = logger.makeRecord(
        logger.name,
        level,
        "",
        0,
        _Event(what, present),
        (),
        None,
        extra={_FIELDS_ATTR: (what, present)},
    )
    logger.handle(record)


class _Event:
    """An event's message: ``what k=v ...``, built the first time a handler asks for it
    (``LogRecord.getMessage`` calls ``str``); a JSON line never builds it."""

    __slots__ = ("_text", "fields", "what")

    def __init__(self, what: str, fields: Mapping[str, Field]) -> None:
        self.what = what
        self.fields = fields
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            parts = [self.what]
            parts.extend(f"{k}={_text(v)}" for k, v in self.fields.items())
            self._text = " ".join(parts)
        return self._text


def _text(value: Field) -> str:
    text = str(value)
    if not text or _NEEDS_QUOTES.search(text):
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


# -- the writer thread ----------------------------------------------------------------------

QUEUE_CAPACITY = 10_000  # records waiting for the writer; a logging call waits beyond it
FLUSH_DEADLINE_S = 5.0  # a flush (or close) waits this long for the writer, then gives up


class _Flush:
    """Queued by ``flush``: set once every record queued before it was handled."""

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


class BackgroundHandler(logging.Handler):
    """Hands each record to one writer thread, which passes it to ``target`` (formats and
    writes it there), in the order logged.

    A logging call costs the caller a queue put: no formatting, no I/O, no lock shared
    with the stream. Only when ``capacity`` records wait (the stream has not been drained
    for a long while) does the caller wait for room: lines are never dropped. ``flush``
    returns once the lines logged before it are written (or after ``FLUSH_DEADLINE_S``);
    ``close`` flushes, ends the thread and closes ``target``. Records logged after
    ``close`` go to ``target`` directly.
    """

    def __init__(self, target: logging.Handler, capacity: int = QUEUE_CAPACITY) -> None:
        super().__init__()
        self.target = target
        self._capacity = capacity
        self._queue: queue.SimpleQueue[logging.LogRecord | _Flush | object] = queue.SimpleQueue()
        self._room = threading.Condition(threading.Lock())
        self._full = 0  # callers waiting for room (read without the lock by the writer)
        self._closed = False
        self._thread = threading.Thread(target=self._write, name="log-writer", daemon=True)
        self._thread.start()

    # The caller's side: stdlib Handler.handle() takes the handler's lock around emit; a
    # put needs none, so it is skipped (the writer's target keeps its own).
    def handle(self, record: logging.LogRecord) -> bool:
        rv = self.filter(record)
        if rv:
            self.emit(record if isinstance(rv, bool) else rv)
        return bool(rv)

    def emit(self, record: logging.LogRecord) -> None:
        if self._closed or threading.current_thread() is self._thread:
            self.target.handle(record)  # the writer itself never waits for its own room
            return
        if record.args:
            # Arguments may change before the writer formats them: format the message now.
            record.msg, record.args = record.getMessage(), None
        if self._queue.qsize() >= self._capacity:
            self._wait_for_room()
        self._queue.put(record)

    def _wait_for_room(self) -> None:
        with self._room:
            self._full += 1
            try:
                while self._queue.qsize() >= self._capacity and self._thread.is_alive():
                    self._room.wait(FLUSH_DEADLINE_S)
            finally:
                self._full -= 1

    def flush(self) -> None:
        if self._closed or threading.current_thread() is self._thread:
            self.target.flush()
            return
        marker = _Flush()
        self._queue.put(marker)
        marker.done.wait(FLUSH_DEADLINE_S)

    def close(self) -> None:
        if not self._closed and self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(FLUSH_DEADLINE_S)
        self._closed = True
        self.target.close()
        super().close()

    # The writer's side.
    def _write(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                self.target.flush()
                return
            if isinstance(item, _Flush):
                self.target.flush()
                item.done.set()
            elif isinstance(item, logging.LogRecord):
                self.target.handle(item)  # a failing write is reported by handleError
            if self._full:
                with self._room:
                    self._room.notify_all()


def configure_logging(prog: str, level: str, log_format: LogFormat) -> None:
    """The service's one stderr handler: text (``prog LEVEL logger: message``) or JSON,
    written by a thread of its own (``BackgroundHandler``)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    stream = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        stream.setFormatter(JsonFormatter())
    else:
        stream.setFormatter(logging.Formatter(f"{prog} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        if isinstance(old, BackgroundHandler):
            old.close()  # its lines are written first, then its thread ends
    root.addHandler(BackgroundHandler(stream))
    root.setLevel(level)
