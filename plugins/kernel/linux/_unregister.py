"""Deleting a link: answered once the kernel has unregistered it, not once it has freed it.

The kernel handles RTM_DELLINK inside the sender's ``sendmsg()``. Under RTNL it unlists
the device from its namespace, releases its name, detaches its upper and lower devices,
runs its uninit (a macvlan's or ipvlan's port, a bond's slaves) and announces
RTM_DELLINK to the namespace's RTNLGRP_LINK listeners. Then it drops RTNL and, still in
the sender's call (``netdev_run_todo``), waits in ``rcu_barrier()`` for an RCU grace
period and for the device's last references, frees it, and only then acks. That wait is
most of a delete (an ack after 18.7 ms, the announcement after 0.6 ms, median, host
kernel 6.18; 21.8 / 3.3 ms on Debian's 6.1 under TCG, 25.6 / 5.5 ms on 6.12:
docs/benchmarks.md, "The kernel's delete wait"), and nothing a caller is told depends on
it: once announced, the device is in no namespace, and no netlink request, nor anything
else that takes RTNL, can see or reach it.

So a delete is sent on a socket of its own, from a sender thread (``sendmsg`` blocks
for the whole delete; ``_Senders``), and the caller returns at whichever comes first:

* the announcement of *this* device's unregistration on a socket listening in the same
  namespace: an ``AF_UNSPEC`` RTM_DELLINK for the ifindex *without* ``IFLA_NEW_NETNSID``
  or ``IFLA_NEW_IFINDEX``. A device moved to another namespace is announced as
  RTM_DELLINK too, with those attributes, and a port leaving a bridge as an
  ``AF_BRIDGE`` one: neither is a deletion, and the caller then waits for the ack,
  which says what the kernel did with our request;
* the ack, or the error the kernel answered (raised as it gave it).

A deletion of the same device by someone else, announced while we wait, answers too:
the device is gone either way (our request would have been answered ENODEV).

A listener whose queue overflowed (ENOBUFS) may have lost the announcement: the caller
waits for the ack then. The sender thread outlives the call by the rest of the kernel's
wait; ``LinuxKernel`` counts it as a call in progress in that namespace (and in no
other) until it ends, so nothing it uses is let go under it.

A delete that never returns. The kernel's wait can last for good (a device whose last
reference is never dropped: "unregister_netdevice: waiting for ... to become free"), and
nothing can interrupt a ``send()``. So each delete has a deadline (``deadline_s`` from
its start). A caller still without an answer then discards the channel (its listener
now, its sender socket when the stuck request returns, if it ever does: ``close`` never
waits), logs it, and raises ETIMEDOUT naming the link and the namespace; the kernel may
still carry the delete out later. A channel whose sender is past its deadline, even
after its caller was answered by the announcement, is not used again either
(``usable``): the next delete in that namespace gets new sockets instead of queueing
behind the stuck one. Until its thread returns, the stuck request counts in
``Sockets.stuck`` (the metric ``networkplugin_kernel_stuck_calls``).
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable

from plugins.sdk.telemetry import log_event

from . import _wire as w
from ._errors import netlink_error

log = logging.getLogger("plugins.kernel.linux")

RTNLGRP_LINK = 1
NETLINK_ADD_MEMBERSHIP = 1
NETLINK_DROP_MEMBERSHIP = 2
IFLA_NEW_NETNSID = 45
IFLA_NEW_IFINDEX = 49
_MOVED = frozenset((IFLA_NEW_NETNSID, IFLA_NEW_IFINDEX))
_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")
_NLA = struct.Struct("=HH")


def announces_unregistration(data: bytes | memoryview, ifindex: int) -> bool:
    """Whether the netlink messages in ``data`` include the kernel's announcement that
    the device ``ifindex`` of this namespace was unregistered (deleted, not moved)."""
    offset = 0
    while offset + _NLMSGHDR.size + _IFINFOMSG.size <= len(data):
        length, mtype, _, _, _ = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            return False  # truncated: nothing after it can be trusted
        if mtype == w.RTM_DELLINK:
            family, _, index, _, _ = _IFINFOMSG.unpack_from(data, offset + _NLMSGHDR.size)
            if family == socket.AF_UNSPEC and index == ifindex:
                attrs = offset + _NLMSGHDR.size + _IFINFOMSG.size
                kinds = _attribute_kinds(data, attrs, offset + length)
                if kinds is not None and not kinds & _MOVED:
                    return True
        offset += (length + 3) & ~3
    return False


def _attribute_kinds(data: bytes | memoryview, offset: int, end: int) -> set[int] | None:
    """The attribute types of one message; None if they do not parse to its end (a move's
    IFLA_NEW_NETNSID could hide behind a bad one: then only the ack is believed)."""
    kinds = set()
    while offset + _NLA.size <= end:
        length, kind = _NLA.unpack_from(data, offset)
        if length < _NLA.size or offset + length > end:
            return None
        kinds.add(kind & ~w.NLA_F_NESTED)
        offset += (length + 3) & ~3
    return kinds


class _Sent:
    """The sender thread's outcome, and an eventfd the caller polls beside its listener.

    The eventfd is closed by whichever of the two lets go of it last, so the sender never
    writes to a descriptor number the caller has closed (and another open has reused).
    """

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.error: BaseException | None = None
        self.done = False
        self._users = 2
        self._lock = threading.Lock()

    def finish(self, error: BaseException | None) -> None:
        self.error, self.done = error, True
        try:
            os.eventfd_write(self.fd, 1)
        finally:
            self.release()

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = not self._users
        if last:
            os.close(self.fd)


class DeleteChannel:
    """A namespace's two sockets for deletes: ``sender`` sends RTM_DELLINK (on the
    sender thread), ``listener`` joins RTNLGRP_LINK only while a caller waits on it.

    Both must have been created inside the namespace. Callers wait one at a time on the
    listener (each only until its device is announced); their senders share ``sender``,
    whose lock serializes them (a second delete in one namespace at once waits for the
    first's ack before its own request goes out, as it did on one socket). ``where``
    names the namespace in errors and logs; ``deadline_s`` and ``sockets``: the
    module's docstring.
    """

    def __init__(
        self,
        sender: socket.socket,
        listener: socket.socket,
        *,
        where: str = "",
        deadline_s: float = w.CALL_DEADLINE_S,
        sockets: w.Sockets | None = None,
    ) -> None:
        try:
            listener.setblocking(False)
            listener.bind((0, 0))
            self._sender = w.RtnlSocket(sender, where=where, deadline_s=deadline_s, sockets=sockets)
        except BaseException:
            sender.close()
            listener.close()
            raise
        self._listener = listener
        self._where = where
        self._deadline_s = deadline_s
        self._lock = threading.Lock()  # the caller using the listener
        self.closed = False

    def close(self) -> None:
        """Close both sockets, never waiting: a caller waiting on the listener closes it
        as it leaves, and a delete in flight closes the sender socket when it returns
        (once acked; never, if it is stuck in the kernel)."""
        self.closed = True
        self._close_listener_if_free()
        self._sender.close()

    def _close_listener_if_free(self) -> None:
        # Whoever releases the lock calls this after it (RtnlSocket's way, too).
        if self._lock.acquire(blocking=False):
            try:
                self._listener.close()
            finally:
                self._lock.release()

    @property
    def usable(self) -> bool:
        """False once closed, once the sender socket was (an I/O error closes it), or
        once a delete on it is past its deadline (``overdue``)."""
        return not self.closed and not self._sender.closed and not self.overdue()

    def overdue(self) -> bool:
        """Whether a delete on it is past its deadline (stuck in the kernel: the module)."""
        return self._sender.overdue()

    def delete(self, ifindex: int, hold: Callable[[], Callable[[], None]]) -> bool:
        """Delete the device ``ifindex``; return once it is unregistered (see the module).

        False if the channel was closed before this delete's turn came: nothing was sent,
        and the caller asks again on new sockets. ``hold()`` is called just before the
        sender thread starts and returns what the thread calls, once, when it ends: the
        owner keeps these sockets open meanwhile.
        """
        body = w.ifinfomsg(ifindex)
        try:
            with self._lock:
                if self.closed:
                    return False
                deadline = time.monotonic() + self._deadline_s
                self._drain()
                self._membership(NETLINK_ADD_MEMBERSHIP)
                try:
                    sent = _Sent()
                    try:
                        self._start_sender(body, sent, hold, deadline)
                        announced = self._wait(ifindex, sent, deadline)
                    finally:
                        sent.release()
                finally:
                    self._membership(NETLINK_DROP_MEMBERSHIP)
                if announced is None:
                    self._discard_stuck(ifindex)
        finally:
            if self.closed:
                self._close_listener_if_free()
        if not announced and sent.error is not None:
            raise sent.error
        return True

    def _discard_stuck(self, ifindex: int) -> None:
        """No answer by the deadline (with the lock held): never use these sockets again."""
        self.closed = True  # the listener is closed as the caller leaves
        self._sender.close()  # by the stuck request, if it ever returns
        log_event(
            log,
            logging.WARNING,
            "kernel call stuck: delete sockets discarded",
            request="RTM_DELLINK",
            netns=self._where,
            ifindex=ifindex,
            deadline_s=self._deadline_s,
        )
        raise netlink_error(
            errno.ETIMEDOUT,
            f"RTM_DELLINK of link {ifindex} in {self._where or 'its namespace'}: no answer "
            f"within {self._deadline_s:g}s; the namespace's delete sockets are discarded "
            "(the kernel may still carry the delete out)",
        )

    def _start_sender(
        self,
        body: bytes,
        sent: _Sent,
        hold: Callable[[], Callable[[], None]],
        deadline: float,
    ) -> None:
        released = hold()

        def send() -> None:
            error: BaseException | None = None
            try:
                self._sender.request(w.RTM_DELLINK, 0, body, deadline=deadline)
            except BaseException as exc:  # handed to the caller, if it still waits
                error = exc
            finally:
                try:
                    sent.finish(error)
                finally:
                    released()

        try:
            _SENDERS.run(send)
        except BaseException:
            sent.release()  # the sender's share: it never ran
            released()
            raise

    def _wait(self, ifindex: int, sent: _Sent, deadline: float) -> bool | None:
        """True once the device is announced unregistered; False once the sender ended
        first (its ack or error is then the answer); None if neither came by ``deadline``."""
        poller = select.poll()
        poller.register(sent.fd, select.POLLIN)
        poller.register(self._listener.fileno(), select.POLLIN)
        while not sent.done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False if sent.done else None
            for fd, _ in poller.poll(remaining * 1000):
                if fd != self._listener.fileno():
                    continue
                try:
                    data = self._listener.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    if exc.errno != errno.ENOBUFS:
                        raise
                    # Announcements were dropped, ours perhaps: only the ack can tell.
                    poller.unregister(self._listener.fileno())
                    continue
                if announces_unregistration(data, ifindex):
                    return True
        return False

    def _drain(self) -> None:
        """Drop what the listener queued after the last caller stopped waiting."""
        while True:
            try:
                self._listener.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise

    def _membership(self, option: int) -> None:
        self._listener.setsockopt(w.SOL_NETLINK, option, RTNLGRP_LINK)


class _Senders:
    """The threads that send deletes, kept for reuse: one is started only when none is
    idle, and one idle for ``idle_s`` ends. A thread per delete cost a start (an OS
    thread, and a wait for it to run) on every delete: ~2 % of a service's Python time
    in a burst of 64 detaches (docs/benchmarks.md, P2).

    The threads are daemons, but an exiting interpreter still lets the deletes in
    progress finish (ms: the kernel's wait) before it ends, as it did for the non-daemon
    thread per delete: ``atexit`` waits for them (a service's shutdown watchdog bounds
    that wait if a request is stuck)."""

    def __init__(self, idle_s: float = 5.0) -> None:
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._idle: list[_Sender] = []
        self.busy = 0
        atexit.register(self.wait_for_all)

    def run(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on an idle sender thread, or on a new one."""
        with self._lock:
            sender = self._idle.pop() if self._idle else None
            self.busy += 1
        try:
            if sender is None:
                sender = _Sender(self)
            sender.give(fn)
        except BaseException:
            self.finished(None)
            raise

    def finished(self, sender: _Sender | None) -> None:
        """``sender`` ran its job: idle now (None: the job never ran)."""
        with self._lock:
            self.busy -= 1
            if sender is not None:
                self._idle.append(sender)
            if not self.busy:
                self._done.notify_all()

    def leave_if_idle(self, sender: _Sender) -> bool:
        """``sender`` waited ``idle_s`` with nothing to do: it ends, unless a job was
        just handed to it (it is no longer on the idle list)."""
        with self._lock:
            if sender in self._idle:
                self._idle.remove(sender)
                return True
            return False

    def wait_for_all(self, timeout: float | None = None) -> bool:
        """Wait until no delete is being sent (False if ``timeout`` passed first)."""
        with self._lock:
            return self._done.wait_for(lambda: not self.busy, timeout)


class _Sender:
    """One sender thread: a job at a time, handed over through ``give``."""

    def __init__(self, pool: _Senders) -> None:
        self._pool = pool
        self._job: Callable[[], None] | None = None
        self._given = threading.Semaphore(0)
        self._thread = threading.Thread(target=self._serve, name="netlink-delete", daemon=True)
        self._started = False

    def give(self, fn: Callable[[], None]) -> None:
        self._job = fn
        self._given.release()
        if not self._started:
            self._started = True
            self._thread.start()

    def _serve(self) -> None:
        while True:
            if not self._given.acquire(timeout=self._pool.idle_s):
                if self._pool.leave_if_idle(self):
                    return
                continue  # a job is being handed over
            job, self._job = self._job, None
            try:
                if job is not None:
                    job()
            finally:
                self._pool.finished(self)


_SENDERS = _Senders()


def deletes_in_flight() -> int:
    """Deletes whose sender still waits for the kernel's ack (their callers may have been
    answered by the announcement already)."""
    return _SENDERS.busy


def wait_for_deletes(timeout: float) -> bool:
    """Wait until every delete sent has its ack or error; False if ``timeout`` passed."""
    return _SENDERS.wait_for_all(timeout)
