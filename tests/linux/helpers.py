"""Helpers of the netns tier: link event listening and condition waits with deadlines."""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from collections.abc import Callable

from plugins.kernel.linux._decode import decode_link
from plugins.kernel.linux._nsfs import open_netns, run_in_netns
from plugins.kernel.linux._unregister import wait_for_deletes
from plugins.kernel.linux._wire import RTM_DELLINK, RTM_NEWLINK

RTMGRP_LINK = 0x1
_HDR = struct.Struct("=IHHII")
DEADLINE_S = 10.0


class LinkEvents:
    """RTNLGRP_LINK notifications of one namespace (RTM_NEWLINK/RTM_DELLINK by name)."""

    def __init__(self, ns_path: str) -> None:
        self._sock = link_listener(ns_path)
        self._sock.setblocking(False)
        self.seen: list[tuple[str, str]] = []  # ("new"|"del", name)
        # the same events with what each showed: ("new"|"del", ifindex, name, alias)
        self.shown: list[tuple[str, int, str, str | None]] = []

    def close(self) -> None:
        self._sock.close()

    def drain(self) -> list[tuple[str, str]]:
        """Everything queued so far (the kernel queues events before it acks a request)."""
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except BlockingIOError:
                return self.seen
            offset = 0
            while offset + _HDR.size <= len(data):
                length, mtype = _HDR.unpack_from(data, offset)[:2]
                if mtype in (RTM_NEWLINK, RTM_DELLINK):
                    msg = decode_link(bytes(data[offset : offset + length]))
                    event = "new" if mtype == RTM_NEWLINK else "del"
                    name = str(msg.get_attr("IFLA_IFNAME"))
                    self.seen.append((event, name))
                    alias = msg.get_attr("IFLA_IFALIAS")
                    self.shown.append((event, int(msg["index"]), name, alias or None))
                offset += (length + 3) & ~3

    def wait_until(self, condition: Callable[[], bool], deadline_s: float = DEADLINE_S) -> None:
        """Re-check ``condition`` at every link event of this namespace, up to a deadline."""
        end = time.monotonic() + deadline_s
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        while not condition():
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"condition still false after {deadline_s}s")
            if poller.poll(remaining * 1000):
                self.drain()


def link_listener(ns_path: str) -> socket.socket:
    """A netlink socket in the namespace at ``ns_path``, joined to RTNLGRP_LINK."""
    fd, _ = open_netns(ns_path)
    try:
        return run_in_netns(fd, _listener, cleanup=socket.socket.close)
    finally:
        os.close(fd)


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
    sock.bind((0, RTMGRP_LINK))
    return sock


def senders_end() -> None:
    """Wait for every delete's sender to be done (each outlives its call by the kernel's
    ack), up to the deadline; fail if one is still sending then."""
    assert wait_for_deletes(DEADLINE_S), f"a delete's sender still runs after {DEADLINE_S}s"


class Clock:
    """The kernel module's clock, moved by hand: the linger is a matter of time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))
