"""rtnetlink on the wire: request encoding and a synchronous, thread-safe socket.

Replies are decoded by ``_decode`` (links, VF tables, namespace ids).
Requests are encoded here, byte for byte as the kernel's structs are laid out,
because pyroute2 0.9 encodes ``struct ifla_vf_vlan_info`` two bytes short (the
kernel answers EINVAL) and cannot send the zero-length ``IFLA_IFALIAS`` that
clears an alias. The socket does its own I/O (no asyncio loop, no threads, no
fork), so one instance is safe to share between threads under its lock.

It is also faster: pyroute2 with both bugs patched (commit 6d80f6b) cost 15-33 %
more per macvlan attach+detach of the real service, as measured in
docs/benchmarks.md ("Netlink transport: pyroute2 vs the home-made one").

Errors are raised as ``_errors.NetlinkError`` with the kernel's errno and
extended-ack message; ``_errors.kernel_errors`` turns them into ``KernelError``.

A request that never returns
----------------------------
Every request has a deadline (``CALL_DEADLINE_S`` from its start unless given). The
answer is waited for until then (ETIMEDOUT), but the kernel handles a request inside
the sender's ``send()``, which no deadline can interrupt: a delete whose device never
drops its last reference blocks there for good, holding the socket's lock. So a socket
whose request is past its deadline is never used again (``overdue``: its owner makes a
new one), a request that waits for the lock up to its deadline discards the socket
(ETIMEDOUT), and ``close`` never waits for the lock: the request in flight closes the
socket when it returns, if it ever does. ``Sockets`` counts the requests past their
deadline whose thread has not returned (the metric ``networkplugin_kernel_stuck_calls``).
"""

from __future__ import annotations

import errno
import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable

from plugins.sdk.telemetry import log_event

from ._errors import netlink_error

log = logging.getLogger("plugins.kernel.linux")

# <linux/netlink.h>
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_CAPPED = 0x100  # in NLMSG_ERROR: the request is not echoed back
NLM_F_ACK_TLVS = 0x200  # in NLMSG_ERROR: extended-ack attributes follow
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
NLA_F_NESTED = 0x8000

# <linux/rtnetlink.h>
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
RTM_SETLINK = 19
RTM_NEWNSID = 88
RTM_GETNSID = 90
RTEXT_FILTER_VF = 1 << 0
RTEXT_FILTER_SKIP_STATS = 1 << 3
NETNSA_NSID = 1
NETNSA_FD = 3

# <linux/if_link.h>
IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_MTU = 4
IFLA_LINK = 5
IFLA_MASTER = 10
IFLA_LINKINFO = 18
IFLA_IFALIAS = 20
IFLA_VFINFO_LIST = 22
IFLA_NET_NS_FD = 28
IFLA_EXT_MASK = 29
IFLA_LINK_NETNSID = 37
IFLA_INFO_KIND = 1
IFLA_INFO_DATA = 2
VETH_INFO_PEER = 1
IFLA_MACVLAN_MODE = 1
IFLA_IPVLAN_MODE = 1
IFLA_IPVLAN_FLAGS = 2
IFLA_VLAN_ID = 1
IFLA_VLAN_PROTOCOL = 5
IFLA_BOND_MODE = 1
IFLA_BOND_ACTIVE_SLAVE = 2
IFLA_BOND_MIIMON = 3
IFLA_BOND_UPDELAY = 4
IFLA_BOND_DOWNDELAY = 5
IFLA_BOND_FAIL_OVER_MAC = 13
IFLA_VF_INFO = 1
IFLA_VF_MAC = 1
IFLA_VF_VLAN = 2
IFLA_VF_TX_RATE = 3
IFLA_VF_SPOOFCHK = 4
IFLA_VF_LINK_STATE = 5
IFLA_VF_RATE = 6
IFLA_VF_TRUST = 9
IFLA_VF_VLAN_LIST = 12
IFLA_VF_VLAN_INFO = 1
IFF_UP = 0x1

_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change
_RTGENMSG = struct.Struct("=Bxxx")
# How long a request (waiting for the socket, sending, and waiting for the answer) may
# take before it is given up: far beyond any answer (milliseconds), a delete's RCU wait
# included (docs/benchmarks.md, "The kernel's delete wait").
CALL_DEADLINE_S = 30.0
DUMP_ATTEMPTS = 5
_REQUEST_NAMES = {
    RTM_NEWLINK: "RTM_NEWLINK",
    RTM_DELLINK: "RTM_DELLINK",
    RTM_GETLINK: "RTM_GETLINK",
    RTM_SETLINK: "RTM_SETLINK",
    RTM_GETNSID: "RTM_GETNSID",
}


def _align(n: int) -> int:
    return (n + 3) & ~3


# -- request encoding ------------------------------------------------------------------


def nla(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (_align(length) - length)


def nla_u8(kind: int, value: int) -> bytes:
    return nla(kind, struct.pack("=B", value))


def nla_u16(kind: int, value: int) -> bytes:
    return nla(kind, struct.pack("=H", value))


def nla_u32(kind: int, value: int) -> bytes:
    return nla(kind, struct.pack("=I", value))


def nla_s32(kind: int, value: int) -> bytes:
    return nla(kind, struct.pack("=i", value))


def nla_be16(kind: int, value: int) -> bytes:
    return nla(kind, struct.pack(">H", value))


def nla_str(kind: int, value: str) -> bytes:
    """NLA_STRING with its terminating NUL (the kernel strips it before length checks)."""
    return nla(kind, value.encode() + b"\0")


def nla_raw_str(kind: int, value: str) -> bytes:
    """A string without NUL: ``IFLA_IFALIAS`` of length 0 clears the alias."""
    return nla(kind, value.encode())


def nla_mac(kind: int, mac: str) -> bytes:
    return nla(kind, parse_mac(mac))


def nest(kind: int, children: Iterable[bytes]) -> bytes:
    return nla(kind, b"".join(children))


def ifinfomsg(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    return _IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, flags, change)


def rtgenmsg() -> bytes:
    return _RTGENMSG.pack(socket.AF_UNSPEC)


def parse_mac(mac: str) -> bytes:
    """Six colon- or dash-separated hex bytes; anything else is EINVAL, as a wrong
    IFLA_ADDRESS length is for the kernel."""
    parts = mac.strip().replace("-", ":").split(":")
    try:
        raw = bytes(int(p, 16) for p in parts if len(p) == 2)
    except ValueError:
        raw = b""
    if len(parts) != 6 or len(raw) != 6:
        raise netlink_error(errno.EINVAL, f"{mac!r} is not a 6-byte MAC address")
    return raw


def vf_struct(*fields: int) -> bytes:
    """The ``struct ifla_vf_*`` of u32 fields (vf index first)."""
    return struct.pack(f"={len(fields)}I", *fields)


def vf_mac(vf: int, mac: str) -> bytes:
    return struct.pack("=I32s", vf, parse_mac(mac))  # struct ifla_vf_mac: u8 mac[32]


def vf_vlan_info(vf: int, vlan: int, qos: int, proto: int) -> bytes:
    """struct ifla_vf_vlan_info: u32 vf, vlan, qos; __be16 vlan_proto; padded to 16."""
    return struct.pack("=III", vf, vlan, qos) + struct.pack(">H", proto) + b"\0\0"


# -- the socket ------------------------------------------------------------------------


class Sockets:
    """The open sockets of one ``LinuxKernel``, discarded ones included until they are
    closed (a stuck request's, never): what ``stuck()`` looks at.

    ``stuck()`` counts the requests past their deadline (``RtnlSocket.overdue``): one
    whose thread has not returned by then is blocked in the kernel (its ``send()``), as
    the answer is not waited for any longer. Kept by socket, not by request, so that a
    request costs nothing here: sockets come and go with namespaces, far less often.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[RtnlSocket] = set()

    def add(self, sock: RtnlSocket) -> None:
        with self._lock:
            self._open.add(sock)

    def discard(self, sock: RtnlSocket) -> None:
        with self._lock:
            self._open.discard(sock)

    def stuck(self) -> int:
        with self._lock:
            socks = list(self._open)
        return sum(1 for sock in socks if sock.overdue())


class RtnlSocket:
    """One NETLINK_ROUTE socket (in whichever namespace it was created) and its lock.

    ``where`` names its namespace in errors and logs; ``deadline_s`` bounds each request
    (the module's docstring); ``sockets``, if given, counts it until it is closed.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        where: str = "",
        deadline_s: float = CALL_DEADLINE_S,
        sockets: Sockets | None = None,
    ) -> None:
        try:
            sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
            sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
            sock.bind((0, 0))
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._lock = threading.Lock()
        self._seq = 0
        self._buf = bytearray(1 << 16)
        self._where = where
        self._deadline_s = deadline_s
        self._busy_until: float | None = None  # the deadline of the request holding the lock
        self.closed = False
        self._sockets = sockets
        if sockets is not None:
            sockets.add(self)

    def close(self) -> None:
        """Close now if no request is in flight, else when it returns: never waits (a
        request may never return)."""
        self.closed = True
        self._close_if_free()

    def _close_if_free(self) -> None:
        # Whoever releases the lock calls this after it, so a close that found the lock
        # taken is done by the request holding it, on its way out.
        if self._lock.acquire(blocking=False):
            try:
                self._sock.close()
            finally:
                self._lock.release()
            if self._sockets is not None:
                self._sockets.discard(self)

    def overdue(self) -> bool:
        """Whether a request has held the socket past its deadline: it is stuck in the
        kernel, and the socket must not be used again (a request would queue behind it)."""
        until = self._busy_until
        return until is not None and time.monotonic() >= until

    def request(
        self, msg_type: int, flags: int, body: bytes, *, deadline: float | None = None
    ) -> list[bytes]:
        """Send one request; return the reply messages (whole, header included).

        Non-dump requests carry NLM_F_ACK and end at the kernel's ack or error;
        a dump ends at NLMSG_DONE and is retried if the kernel marks it interrupted.
        ``deadline`` (``time.monotonic()``; default ``deadline_s`` from now) bounds it all.
        """
        if deadline is None:
            deadline = time.monotonic() + self._deadline_s
        dump = flags & NLM_F_DUMP == NLM_F_DUMP
        if not dump:
            flags |= NLM_F_ACK
        for _ in range(DUMP_ATTEMPTS if dump else 1):
            replies, interrupted = self._exchange(msg_type, flags | NLM_F_REQUEST, body, deadline)
            if not interrupted:
                return replies
        raise netlink_error(errno.EAGAIN, "link dump kept changing under us (NLM_F_DUMP_INTR)")

    def _exchange(
        self, msg_type: int, flags: int, body: bytes, deadline: float
    ) -> tuple[list[bytes], bool]:
        lock = self._lock
        if not lock.acquire(blocking=False) and not lock.acquire(
            timeout=max(0.0, deadline - time.monotonic())
        ):
            self._give_up(msg_type)
        try:
            if self.closed:
                raise netlink_error(errno.EBADF, "the namespace's netlink socket is closed")
            self._seq = (self._seq % 0x7FFFFFFF) + 1
            seq = self._seq
            msg = _NLMSGHDR.pack(_NLMSGHDR.size + len(body), msg_type, flags, seq, 0) + body
            self._busy_until = deadline
            try:
                try:
                    self._sock.send(msg)  # the kernel handles the request in here
                finally:
                    if time.monotonic() >= deadline:
                        self._returned_late(msg_type, deadline)
                return self._collect(seq, deadline)
            except OSError:
                self.closed = True  # it may hold half a reply now: never reuse it
                raise
            finally:
                self._busy_until = None
        finally:
            self._lock.release()
            if self.closed:
                self._close_if_free()

    def _give_up(self, msg_type: int) -> None:
        """The lock was not free by the deadline: the request holding it is stuck."""
        self.closed = True  # discarded: that request closes it if it ever returns
        self._close_if_free()
        what = _REQUEST_NAMES.get(msg_type, str(msg_type))
        log_event(
            log,
            logging.WARNING,
            "kernel call gave up waiting for a stuck one: socket discarded",
            request=what,
            netns=self._where,
            deadline_s=self._deadline_s,
        )
        raise OSError(
            errno.ETIMEDOUT,
            f"{what} in {self._where or 'its namespace'}: the socket was held past the "
            "deadline by a request that never returned; it is discarded",
        )

    def _returned_late(self, msg_type: int, deadline: float) -> None:
        log_event(
            log,
            logging.WARNING,
            "kernel call returned from send after its deadline",
            request=_REQUEST_NAMES.get(msg_type, str(msg_type)),
            netns=self._where,
            late_s=round(time.monotonic() - deadline, 3),
        )

    def _collect(self, seq: int, deadline: float) -> tuple[list[bytes], bool]:
        replies: list[bytes] = []
        interrupted = False
        while True:
            data = self._recv(deadline)
            offset = 0
            while offset + _NLMSGHDR.size <= len(data):
                length, mtype, mflags, mseq, _ = _NLMSGHDR.unpack_from(data, offset)
                if length < _NLMSGHDR.size or offset + length > len(data):
                    raise OSError(errno.EPROTO, "truncated netlink message")
                chunk = bytes(data[offset : offset + length])
                offset += _align(length)
                if mseq != seq:
                    continue  # not ours (a stale answer): ignore
                if mflags & NLM_F_DUMP_INTR:
                    interrupted = True
                if mtype == NLMSG_ERROR:
                    _raise_if_error(chunk, mflags)
                    return replies, interrupted  # the ack
                if mtype == NLMSG_DONE:
                    _raise_if_error(chunk, mflags)
                    return replies, interrupted
                replies.append(chunk)

    def _recv(self, deadline: float) -> memoryview:
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        while True:
            remaining = deadline - time.monotonic()
            # Past the deadline, an answer already queued is still read (a send that
            # returned late has its answer there at once): only waiting is over.
            if not poller.poll(remaining * 1000 if remaining > 0 else 0):
                if remaining <= 0:
                    raise OSError(errno.ETIMEDOUT, "no netlink answer before the deadline")
                continue
            size = self._sock.recv_into(
                self._buf, len(self._buf), socket.MSG_PEEK | socket.MSG_TRUNC
            )
            if size > len(self._buf):
                self._buf = bytearray(_align(size))
            size = self._sock.recv_into(self._buf, len(self._buf))
            return memoryview(self._buf)[:size]


def _raise_if_error(chunk: bytes, flags: int) -> None:
    """NLMSG_ERROR (and a NLMSG_DONE carrying an error): raise it with its ext-ack text."""
    if len(chunk) < _NLMSGHDR.size + 4:
        return
    (code,) = struct.unpack_from("=i", chunk, _NLMSGHDR.size)
    if code == 0:
        return
    message = None
    if flags & NLM_F_ACK_TLVS and chunk[4:6] == struct.pack("=H", NLMSG_ERROR):
        # struct nlmsgerr: error, then the request's header (CAPPED) or whole request.
        offset = _NLMSGHDR.size + 4
        (orig_len,) = struct.unpack_from("=I", chunk, offset)
        offset += _NLMSGHDR.size if flags & NLM_F_CAPPED else _align(orig_len)
        message = _extack_message(chunk, offset)
    raise netlink_error(-code, message or "")


def _extack_message(chunk: bytes, offset: int) -> str | None:
    while offset + 4 <= len(chunk):
        length, kind = struct.unpack_from("=HH", chunk, offset)
        if length < 4:
            return None
        if kind & ~NLA_F_NESTED == NLMSGERR_ATTR_MSG:
            return chunk[offset + 4 : offset + length].rstrip(b"\0").decode(errors="replace")
        offset += _align(length)
    return None
