"""Namespace files (nsfs) and the only code that changes a thread's network namespace.

Namespace switching policy
--------------------------
Netlink sockets belong to the network namespace of the thread that created them,
and keep it for their whole life. So the backend never switches the namespace of a
thread that does other work. To get a socket inside namespace N it hands the making
to the *entry thread* (``make_in_netns``), a thread of ours that does nothing else:
it calls ``setns(N)``, makes the sockets, and ``setns`` back to the namespace it
started in before it takes the next job. Every job enters its own namespace first,
so none depends on where the last one left the thread; and a thread whose way back
failed is retired (it finishes the jobs already handed to it, each entering its own
namespace, and ends) and the next job gets a new one. The caller waits with a
deadline, never with a sleep; a job past it retires its thread too, as stuck.
The entry thread replaced a fresh OS thread per socket (``run_in_netns``): in a
burst of hooks in 64 pods, starting those threads was ~5 % of the service's Python
time (docs/benchmarks.md, P2).

``run_in_netns`` and ``run_on_throwaway_thread`` still run anything else on a thread
of its own that ends with it: ``unshare(CLONE_NEWNET)`` for the lab helper that
creates named namespaces (``netns.py``), and the labs' and benchmarks' own calls.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
import queue
import stat
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from .._types import KernelError, kernel_error

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
NS_GET_NSTYPE = 0xB703  # _IO(NSIO, 0x3), <linux/nsfs.h>
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
THREAD_NETNS = "/proc/thread-self/ns/net"
THREAD_DEADLINE_S = 10.0

_libc: ctypes.CDLL | None = None
_libc_lock = threading.Lock()


def libc() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 - one process-wide handle, loaded on first use
    with _libc_lock:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return _libc


def check_call(result: int, what: str) -> None:
    """Raise the errno of a failed libc call as OSError (translated by kernel_errors)."""
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def read_boot_id() -> str:
    with open(BOOT_ID_PATH, encoding="ascii") as f:
        return f.read().strip()


Identity = tuple[int, int]  # (st_dev, st_ino) of an nsfs inode


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino)


def stat_identity(path: str) -> Identity:
    return identity_of(os.stat(path))


def current_thread_identity() -> Identity:
    return stat_identity(THREAD_NETNS)


def open_netns(path: str, expect: Identity | None = None) -> tuple[int, Identity]:
    """Open ``path`` and check that it is a network namespace (and the expected one).

    ENOENT if the path is gone; EINVAL if it is not a network namespace file;
    ESTALE if it names a different namespace than ``expect``. The check is made on
    the opened descriptor, so the answer cannot change between check and use.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or _nstype(fd) != CLONE_NEWNET:
            raise kernel_error(errno.EINVAL, f"{path} is not a network namespace")
        ident = identity_of(st)
        if expect is not None and ident != expect:
            raise kernel_error(
                errno.ESTALE,
                f"{path} now names namespace {ident}, not the expected {expect}",
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, ident


def mounted_netns_identity(path: str, known: Collection[Identity] = ()) -> Identity | None:
    """The namespace a mount path names now, or None if it names no network namespace.

    None if the path is gone (or a dangling link), is not a regular file (a
    directory, a FIFO or a device is never opened), or is a plain file (the empty
    mount point of ``ip netns add`` before the mount) or another kind of namespace.
    An identity in ``known`` is already verified to be a network namespace: it is
    returned from ``stat`` alone. A new one is checked on an opened descriptor, which
    is closed before returning: nothing stays open.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    if identity_of(st) in known:
        return identity_of(st)
    try:
        fd, ident = open_netns(path)
    except FileNotFoundError:
        return None  # unmounted and removed since the stat
    except KernelError as exc:
        if exc.code == errno.EINVAL:
            return None
        raise
    os.close(fd)
    return ident


def process_netns_identity(path: str) -> Identity | None:
    """The namespace of ``/proc/<pid>/ns/net``, or None if that process is out of reach.

    A process can exit at any moment of a scan, and each way it shows is skipped:
    its ``/proc/<pid>`` is gone (ENOENT); it is a zombie whose namespaces were
    already released (ENOENT from ``ns_get_path``); or it was reaped between the
    lookup of the entry and the read of the link (EACCES: ``proc_ns_get_link`` finds
    no task). EACCES/EPERM also come from the ptrace access check (an LSM, Yama): a
    process we may not inspect does not give us its namespace either. ESRCH is
    skipped for the same reason as ENOENT, should a kernel answer it.
    """
    try:
        return stat_identity(path)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def _nstype(fd: int) -> int:
    try:
        return fcntl.ioctl(fd, NS_GET_NSTYPE)
    except OSError as exc:
        if exc.errno in (errno.ENOTTY, errno.EINVAL):
            return 0  # not an nsfs file
        raise


@dataclass
class _Outcome(Generic[T]):
    value: T | None = None
    error: BaseException | None = None
    done: bool = False
    abandoned: bool = False


def run_on_throwaway_thread(
    fn: Callable[[], T],
    *,
    name: str,
    cleanup: Callable[[T], None] | None = None,
    deadline_s: float = THREAD_DEADLINE_S,
) -> T:
    """Run ``fn`` on a new OS thread that ends when ``fn`` returns; wait with a deadline.

    ``fn`` may change the thread's namespaces: the thread is never reused. If the
    deadline passes, the caller gets ETIMEDOUT and a late result is handed to
    ``cleanup`` (e.g. closed) instead of leaking.
    """
    outcome: _Outcome[T] = _Outcome()
    lock = threading.Lock()

    def body() -> None:
        try:
            value = fn()
        except BaseException as exc:
            with lock:
                outcome.error, outcome.done = exc, True
            return
        with lock:
            outcome.value, outcome.done = value, True
            late = outcome.abandoned
        if late and cleanup is not None:
            cleanup(value)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    thread.join(deadline_s)
    with lock:
        if not outcome.done:
            outcome.abandoned = True
            raise kernel_error(errno.ETIMEDOUT, f"{name} did not finish in {deadline_s}s")
    if outcome.error is not None:
        raise outcome.error
    return cast(T, outcome.value)  # done without error: the value fn returned


def run_in_netns(ns_fd: int, fn: Callable[[], T], *, cleanup: Callable[[T], None] | None) -> T:
    """Run ``fn`` inside the network namespace ``ns_fd`` on a throwaway thread."""

    def body() -> T:
        check_call(libc().setns(ns_fd, CLONE_NEWNET), "setns")
        return fn()

    return run_on_throwaway_thread(body, name="netns-enter", cleanup=cleanup)


class _Job(Generic[T]):
    """One ``make_in_netns`` call: run on the entry thread, awaited by its caller."""

    def __init__(self, ns_fd: int, fn: Callable[[], T], cleanup: Callable[[T], None] | None):
        self.ns_fd, self.fn, self.cleanup = ns_fd, fn, cleanup
        self.outcome: _Outcome[T] = _Outcome()
        self.lock = threading.Lock()
        self.finished = threading.Lock()
        self.finished.acquire()  # released when the job is done: the caller's wait

    def run(self) -> None:
        try:
            check_call(libc().setns(self.ns_fd, CLONE_NEWNET), "setns")
            value = self.fn()
        except BaseException as exc:
            with self.lock:
                self.outcome.error, self.outcome.done = exc, True
        else:
            with self.lock:
                self.outcome.value, self.outcome.done = value, True
                late = self.outcome.abandoned
            if late and self.cleanup is not None:
                with contextlib.suppress(OSError):  # nobody is left to tell; the thread goes on
                    self.cleanup(value)
        finally:
            self.finished.release()


class _EntryThread:
    """The thread that makes sockets inside namespaces, one job after another."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()
        self.retired = False
        self.thread = threading.Thread(target=self._serve, name="netns-enter", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        home = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
        try:
            while True:
                if self.retired:
                    try:
                        job = self.jobs.get_nowait()  # those handed over before retiring
                    except queue.Empty:
                        return
                else:
                    job = self.jobs.get()
                job.run()
                if libc().setns(home, CLONE_NEWNET) != 0:
                    _retire(self)  # in a namespace not ours: no new jobs here
        finally:
            os.close(home)


_entry: _EntryThread | None = None
_entry_lock = threading.Lock()


def _retire(thread: _EntryThread) -> None:
    global _entry  # noqa: PLW0603 - one process-wide entry thread, replaced when retired
    with _entry_lock:
        thread.retired = True
        if _entry is thread:
            _entry = None


def make_in_netns(
    ns_fd: int,
    fn: Callable[[], T],
    *,
    cleanup: Callable[[T], None] | None = None,
    deadline_s: float = THREAD_DEADLINE_S,
) -> T:
    """Run ``fn`` inside the network namespace ``ns_fd`` on the entry thread (the module's
    docstring); wait with a deadline. ``fn`` must be brief and never block (it makes
    sockets): the jobs of every caller run one after another. If the deadline passes,
    the caller gets ETIMEDOUT, a late result is handed to ``cleanup`` (e.g. closed)
    instead of leaking, and later jobs go to a new entry thread."""
    global _entry  # noqa: PLW0603 - one process-wide entry thread, replaced when retired
    job = _Job(ns_fd, fn, cleanup)
    with _entry_lock:
        if _entry is None:
            _entry = _EntryThread()
        thread = _entry
        thread.jobs.put(job)
    if not job.finished.acquire(timeout=deadline_s):
        with job.lock:
            if not job.outcome.done:
                job.outcome.abandoned = True
                _retire(thread)
                raise kernel_error(errno.ETIMEDOUT, f"netns-enter did not finish in {deadline_s}s")
    if job.outcome.error is not None:
        raise job.outcome.error
    return cast(T, job.outcome.value)  # done without error: the value fn returned
