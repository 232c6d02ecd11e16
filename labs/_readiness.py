"""Waiting for a started program's own word that it is ready (systemd's ``sd_notify``).

The test kit starts a service with ``$NOTIFY_SOCKET`` pointing at a datagram socket of
its own, as systemd does for a ``Type=notify`` unit, and waits for ``READY=1`` or for
the process to exit, whichever comes first. Asking the program's socket instead meant
gRPC's reconnect backoff: the first attempt fails while the program still imports, and
the next one comes up to a backoff step later (100, 160, 256, 410 ms...) while the
program already serves. Five process-heavy test modules took 100 s of wall that way,
83 s this way (run one after the other, alternated).

What the program says is not taken for readiness itself: the start then asks its
socket (GetInfo ready=true) as before, which now connects at the first attempt.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from plugins.sdk.systemd import NOTIFY_SOCKET_ENV

__all__ = ["ReadyListener"]

_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes with its NUL; a margin for the name
_EXIT_POLL_S = 0.05  # without a pidfd (a kernel before 5.3): how often to look for an exit


class ReadyListener:
    """A datagram socket a program started with ``env()`` notifies (``READY=1``)."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="np-ready-"))
        if len(str(self._dir / "notify")) > _MAX_SOCKET_PATH:  # a deep $TMPDIR
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = Path(tempfile.mkdtemp(prefix="np-ready-", dir="/tmp"))
        self.address = str(self._dir / "notify")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            self._sock.bind(self.address)
        except BaseException:
            self.close()
            raise

    def env(self) -> dict[str, str]:
        """The variable a program notifies through."""
        return {NOTIFY_SOCKET_ENV: self.address}

    def wait(self, proc: subprocess.Popen[bytes], timeout: float) -> str:
        """``"ready"`` once ``proc`` sent ``READY=1``, ``"exited"`` once it is gone, or
        ``"timeout"`` after ``timeout`` seconds, whichever comes first."""
        deadline = time.monotonic() + timeout
        try:
            exited: int | None = os.pidfd_open(proc.pid)
        except OSError:  # no pidfds here (or it is gone already): look now and then
            exited = None
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self._sock, selectors.EVENT_READ)
                if exited is not None:
                    selector.register(exited, selectors.EVENT_READ)
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return "timeout"
                    wait = left if exited is not None else min(left, _EXIT_POLL_S)
                    for key, _ in selector.select(wait):
                        if key.fileobj is self._sock:
                            message = self._sock.recv(4096)
                            if b"READY=1" in message.split(b"\n"):
                                return "ready"
                        else:
                            return "exited"
                    if exited is None and proc.poll() is not None:
                        return "exited"
        finally:
            if exited is not None:
                os.close(exited)

    def close(self) -> None:
        self._sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> ReadyListener:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
