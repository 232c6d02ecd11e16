"""Waiting for a server on a Unix socket to report ready: the one poll loop both the
plugin client and the coordinator client use."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["poll_until_ready"]

_POLL_INITIAL_S: Final = 0.05
_POLL_MAX_S: Final = 1.0
_RETRYABLE: Final = ("UNAVAILABLE", "DEADLINE_EXCEEDED")

_Answer = TypeVar("_Answer")
_Error = TypeVar("_Error", bound=Exception)


def poll_until_ready(
    ask: Callable[[float], _Answer | str],
    *,
    path: object,
    deadline_s: float,
    closed: threading.Event,
    error: type[_Error],
) -> _Answer:
    """Call ``ask(remaining_s)`` until it returns an answer, for at most ``deadline_s``.

    ``ask`` returns the answer once the server is ready, or a string saying why it is
    not yet; an ``error`` whose ``code`` is UNAVAILABLE or DEADLINE_EXCEEDED (nothing
    answers yet) is asked again after a short backoff, any other exception is raised at
    once. ``error(code, message)`` is raised with DEADLINE_EXCEEDED when the deadline
    passes, and with CANCELLED when ``closed`` is set (the client was closed) meanwhile.
    """
    deadline = time.monotonic() + deadline_s
    delay = _POLL_INITIAL_S
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise error(
                "DEADLINE_EXCEEDED", f"{path} not ready within {deadline_s}s (last: {last})"
            )
        try:
            answer = ask(remaining)
        except error as exc:
            if getattr(exc, "code", None) not in _RETRYABLE:
                raise
            last = str(exc)
        else:
            if not isinstance(answer, str):
                return answer
            last = answer
        # Bounded wait between polls; closing the client ends it early.
        if closed.wait(min(delay, max(deadline - time.monotonic(), 0.0))):
            raise error("CANCELLED", f"client for {path} was closed")
        delay = min(delay * 2, _POLL_MAX_S)
