"""One NETLINK_ROUTE socket per namespace, spoken through pyroute2, safe to share.

pyroute2's ``AsyncIPRSocket`` (the socket ``IPRoute`` is built on) does the
protocol: sequence numbers, encoding, reassembling multi-part answers, decoding
them and raising the kernel's errors as ``NetlinkError`` with the extended-ack
text. ``Rtnl`` adds what the backend needs around it:

* **Any thread.** The service calls the kernel from several gRPC worker threads.
  pyroute2 keeps its event loop, transport and reply queues per thread and refuses
  a given socket from any thread but its creator's; its synchronous ``IPRoute``
  would open a socket and an event loop per thread. Here one event loop and one
  state serve every thread, and a lock lets one request at a time use them.
* **A socket we created**, inside its namespace (``_nsfs.run_in_netns``): pyroute2's
  own ``netns=`` forks a child to get one.
* **A deadline** on every answer (ETIMEDOUT), and a socket that failed mid-answer
  (timeout, I/O error) is closed for good: it may still hold half a reply.
* **Consistent dumps**: a dump the kernel marks interrupted (NLM_F_DUMP_INTR) is
  asked again.
* **No surprises**: no multicast groups (nothing arrives that was not asked for),
  and no in-process emulation (pyroute2 creates tun/tuntap links by ioctl itself).
"""

from __future__ import annotations

import asyncio
import errno
import selectors
import socket
import struct
import threading
import types
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.iprsocket import AsyncIPRSocket

from ._errors import netlink_error
from ._messages import (
    NETLINK_EXT_ACK,
    NLM_F_DUMP,
    NLM_F_DUMP_INTR,
    NLM_F_REQUEST,
    NLMSG_DONE,
    SOL_NETLINK,
)

NLMSG_ERROR = 2
RECV_DEADLINE_S = 30.0
DUMP_ATTEMPTS = 5
# Descriptors one Rtnl holds: the netlink socket and its event loop's self-pipe (a
# socket pair). The loop polls with poll(2), which needs no descriptor of its own
# (epoll would add one per namespace for a loop that watches one socket).
FDS_PER_SOCKET = 3


class _SharedSocket(AsyncIPRSocket):  # type: ignore[misc]  # pyroute2 is untyped
    """``AsyncIPRSocket`` on a given socket and event loop, one state for all threads."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(use_socket=sock, use_event_loop=loop, groups=0)
        # pyroute2 keeps the loop, transport and queues in a threading.local and checks
        # the thread; requests are serialized by Rtnl's lock, so one state serves all
        # threads (pyroute2's own IPRSocket replaces ``local`` the same way).
        self.local = types.SimpleNamespace()
        self.request_proxy = None  # every request goes to the kernel


class Rtnl:
    """A bound NETLINK_ROUTE socket (in whichever namespace it was created), its lock."""

    def __init__(self, sock: socket.socket) -> None:
        loop: asyncio.AbstractEventLoop | None = None
        try:
            # Extended acks carry the kernel's reason. Not NETLINK_CAP_ACK: pyroute2
            # decodes the request echoed in an error and fails on a capped one.
            sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
            sock.bind((0, 0))
            loop = asyncio.SelectorEventLoop(selectors.PollSelector())
            self._ipr = _SharedSocket(sock, loop)
            loop.run_until_complete(self._ipr.setup_endpoint())
        except BaseException:
            if loop is not None:
                loop.close()
            sock.close()
            raise
        self._sock = sock
        self._loop = loop
        self._lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        with self._lock:
            self._close()

    def request(self, msg: Any, msg_type: int, flags: int) -> list[Any]:
        """Send one request; return the decoded answers (no acks).

        ``flags`` says what ends it: NLM_F_DUMP ends at NLMSG_DONE (and is asked again
        if the kernel marks it interrupted), NLM_F_ACK at the ack, a GET without
        either at its one answer. An error answer ends it too and is raised.
        ``msg`` is encoded again for each attempt.
        """
        dump = flags & NLM_F_DUMP == NLM_F_DUMP
        for _ in range(DUMP_ATTEMPTS if dump else 1):
            replies, interrupted = self._exchange(msg, msg_type, flags | NLM_F_REQUEST)
            if not interrupted:
                return replies
        raise netlink_error(errno.EAGAIN, "link dump kept changing under us (NLM_F_DUMP_INTR)")

    def _exchange(self, msg: Any, msg_type: int, flags: int) -> tuple[list[Any], bool]:
        interrupted = False
        done_error = 0

        def inspect(reply: Any) -> bool:
            # Sees every message answering this request, NLMSG_DONE included, which
            # pyroute2 neither returns nor checks for an error without extended ack.
            nonlocal interrupted, done_error
            header = reply["header"]
            interrupted |= bool(header["flags"] & NLM_F_DUMP_INTR)
            if header["type"] == NLMSG_DONE and len(reply.data) >= reply.offset + 20:
                (done_error,) = struct.unpack_from("=i", reply.data, reply.offset + 16)
            return False  # keep the message

        async def exchange() -> list[Any]:
            async with asyncio.timeout(RECV_DEADLINE_S):
                answers = await self._ipr.nlm_request(msg, msg_type, flags, callback=inspect)
                return [m async for m in answers if m["header"]["type"] != NLMSG_ERROR]

        with self._lock:
            if self.closed:
                raise netlink_error(errno.EBADF, "the namespace's netlink socket is closed")
            try:
                replies = self._loop.run_until_complete(exchange())
            except NetlinkError:
                raise  # the kernel's answer: the exchange is complete
            except TimeoutError as exc:
                self._close()
                raise OSError(errno.ETIMEDOUT, "no netlink answer before the deadline") from exc
            except BaseException:
                self._close()  # it may hold half a reply now: never reuse it
                raise
        if done_error < 0:
            raise netlink_error(-done_error, "")
        return replies, interrupted

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._ipr.close()  # aborts the transport; its callbacks run at the next tick
            self._loop.run_until_complete(asyncio.sleep(0))
        except OSError:
            pass  # a socket that failed: nothing left to say to it
        finally:
            self._loop.close()
            self._sock.close()
