"""Tell the service manager when a program is ready and when it stops (``sd_notify``).

A unit with ``Type=notify`` (and ``NotifyAccess=main``) gets ``READY=1`` once the
program serves its sockets and its recovery has run, so ``systemctl start`` returns
when the node can take calls, and units ordered after it start then, not at exec
time. ``STOPPING=1`` is sent when a graceful stop begins. The test kit listens the
same way: a start waits for the program's own word instead of polling its socket
through gRPC's reconnect backoff.

The protocol is systemd's: datagrams of newline-separated ``KEY=value`` lines to the
``AF_UNIX`` address in ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract
namespace). Without the variable nothing is sent. A notification is best effort: a
program that cannot reach its manager logs it once and keeps serving, as
``sd_notify(3)`` callers do; what it serves never depends on it.
"""

from __future__ import annotations

import logging
import os
import socket

__all__ = ["NOTIFY_SOCKET_ENV", "notify", "notify_address"]

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"

log = logging.getLogger(__name__)
_warned: set[str] = set()  # the addresses a failure was logged for already


def notify_address(value: str) -> str | bytes | None:
    """The ``AF_UNIX`` address ``$NOTIFY_SOCKET`` names, or None for one not supported
    here (systemd's ``vsock:`` addresses, a relative path)."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None


def notify(*assignments: str) -> bool:
    """Send ``KEY=value`` assignments (``READY=1``, ``STATUS=...``) in one datagram.

    True when sent; False when no manager listens (``$NOTIFY_SOCKET`` unset) or it
    could not be reached. Never raises for the manager's sake: the program goes on.
    """
    target = os.environ.get(NOTIFY_SOCKET_ENV)
    if not target:
        return False
    address = notify_address(target)
    if address is None:
        _warn_once(target, f"${NOTIFY_SOCKET_ENV}={target!r} is not a Unix socket address")
        return False
    message = "\n".join(assignments).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message, address)
    except OSError as exc:
        _warn_once(target, f"cannot notify the service manager at {target}: {exc}")
        return False
    return True


def _warn_once(target: str, message: str) -> None:
    if target not in _warned:
        _warned.add(target)
        log.warning("%s; serving without notifying it", message)
