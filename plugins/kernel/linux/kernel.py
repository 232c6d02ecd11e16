"""``LinuxKernel``: the ``Kernel`` protocol on real Linux, over rtnetlink.

Namespaces
----------
A namespace is known by the (st_dev, st_ino) of its nsfs file. For each namespace
opened through ``open_namespace`` (and the configured host namespace) the backend
keeps a verified descriptor of the namespace and, once needed, one NETLINK_ROUTE
socket created *inside* that namespace (see ``_nsfs`` for how: on the entry thread,
which does nothing else, so no thread that does other work ever changes namespace).
Requests about links of a namespace go to that namespace's socket; a link is created
in, or moved to, another namespace with ``IFLA_NET_NS_FD`` in the same message. A delete
is answered at the kernel's announcement that the link is unregistered, not at its ack,
which comes after an RCU grace period (``_unregister``).

Both the descriptor and the socket keep the namespace alive, so a namespace other than
the host is *held* only while calls use it, and for ``linger_s`` (``NAMESPACE_LINGER_S``)
after: once no call using it is in progress (calls are counted per namespace: one that
never returns pins its own namespace and no other), a namespace that no call has used
for that long has its descriptor and socket closed, by the call that returns next or,
when no call comes, by the kernel's one idle thread (``netns-idle``, which waits for
that deadline and never enters a namespace). The next call reopens them from a path
verified to still name the namespace. A pod deleted by the runtime therefore dies within ``linger_s`` of our last
call in it, even in a service that never calls again, while the calls of one hook (and
of hooks that follow each other closely) share one socket instead of paying a thread,
a descriptor and a socket each (measured in docs/benchmarks.md). At most
``max_held`` namespaces besides the host's stay held between calls (the least recently
used are let go first).

The namespaces seen stay *known* (their identity, paths and netnsids,
``cached_namespaces``). Every call checks the path of the namespace it names, and fails
with ENOENT (path gone) or ESTALE (path names another namespace), as ``open_namespace``
would. The mount paths of all the known ones are checked again at most every
``SWEEP_INTERVAL_S`` by a call (and at every ``list_namespaces``, ``find_device`` and
``cached_namespaces``): a namespace none of whose paths still names it is forgotten
(and let go at once). Not at every call: a node of N pods paid N stats per call, a
quarter of a burst's CPU (docs/benchmarks.md); a deleted pod's namespace is let go by
the linger anyway, and a known namespace met under a new path is checked then. A held
namespace cannot die, so its inode number cannot be given to another namespace while
we hold it: the check of the path's (st_dev, st_ino) is exact then. Once let go, a namespace could die and a new one get its inode number
under the same path; so each socket's namespace cookie (``SO_NETNS_COOKIE``, 64 bits,
never reused in a boot) is compared with the one the namespace's first socket had, and
a mismatch is ESTALE. ``release_namespace`` forgets one explicitly, ``close`` all.

Calls that never return
-----------------------
Each request has a deadline (``deadline_s``, ``CALL_DEADLINE_S``). A request still in
the kernel past it (blocked in ``send()``, which nothing interrupts: a delete whose
device is never freed) keeps its thread, but not its namespace's sockets: one whose
request is overdue is discarded and the next call gets a new one (``_wire``; a delete
fails with ETIMEDOUT at its deadline, ``_unregister``). Closing never waits for such a
request, so neither ``release_namespace``, a sweep nor ``close`` can hang on one.
``stuck_calls()`` counts them until their threads return (the metric
``networkplugin_kernel_stuck_calls``); each is logged when given up and when it returns.

``list_namespaces`` finds namespaces without holding them: it stats (and, for a
mount path seen for the first time, opens, checks and closes) every candidate
path, and returns refs by path. A listed namespace is held only once it is used,
and is then dropped like any other when its path stops naming it (a
``/proc/<pid>/ns/net`` path stops when the process exits).

Errors
------
Every public method runs under ``_errors.translated``: it raises ``KernelError``
with the kernel's errno and nothing else.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from plugins.sdk import NamespaceHandle, kernel_name_problem
from plugins.sdk.telemetry import log_event

from .._protocol import Kernel
from .._types import (
    FAIL_OVER_MAC,
    IPVLAN_FLAGS,
    KernelError,
    Link,
    LinkChanges,
    LinkOptions,
    LinkSpec,
    NsRef,
    VFChanges,
    VFConfig,
)
from . import _wire as w
from ._decode import (
    BOND_MODES,
    IPVLAN_F_PRIVATE,
    IPVLAN_F_VEPA,
    IPVLAN_MODES,
    MACVLAN_MODES,
    STACKED,
    VF_LINK_STATES,
    VLAN_PROTOCOLS,
    decode_link,
    decode_nsid,
    pci_address_of,
    to_link,
    to_vfs,
)
from ._errors import NetlinkError, kernel_errors, netlink_error, translated
from ._nsfs import (
    Identity,
    current_thread_identity,
    make_in_netns,
    mounted_netns_identity,
    open_netns,
    process_netns_identity,
    read_boot_id,
    stat_identity,
)
from ._unregister import DeleteChannel

__all__ = [
    "CALL_DEADLINE_S",
    "DEFAULT_NAMESPACE_DIRS",
    "MAX_HELD_NAMESPACES",
    "NAMESPACE_LINGER_S",
    "PROC_DIR",
    "UNKNOWN_NAMESPACE_INODE",
    "LinuxKernel",
]

log = logging.getLogger("plugins.kernel.linux")

U32_MAX = 0xFFFFFFFF
# parent_ns of a link whose lower device lives in a namespace this kernel has not
# opened: device/inode 0 and the path "netnsid:<id>" (the id as seen from the link).
UNKNOWN_NAMESPACE_INODE = 0
_NSID_UNASSIGNED = (-1, U32_MAX)
# Where ``ip netns add`` (iproute2's NETNS_RUN_DIR) and CNI runtimes mount named
# namespaces; /var/run is usually a link to /run, and duplicates are dropped by identity.
DEFAULT_NAMESPACE_DIRS = ("/run/netns", "/var/run/netns")
PROC_DIR = "/proc"
# How long a namespace other than the host's stays held after the last call that used
# it: long enough for the calls of a hook (milliseconds apart) and of the hooks that
# follow it at once to share a socket; short enough that a deleted pod dies promptly.
NAMESPACE_LINGER_S = 0.25
MAX_HELD_NAMESPACES = 64  # besides the host's, between calls
# How often a call re-checks the paths of every known namespace (below the linger: a
# deleted pod's namespace is let go by whichever comes first).
SWEEP_INTERVAL_S = 0.1
SO_NETNS_COOKIE = 71  # <asm-generic/socket.h>, Linux 5.14
CALL_DEADLINE_S = w.CALL_DEADLINE_S


@dataclass(eq=False)
class _Namespace:
    """A known network namespace: the paths naming it, and while a call holds it, its
    verified descriptor and its socket (``fd``/``sock``, None when not held)."""

    key: Identity
    fd: int | None
    paths: list[str]
    sock: w.RtnlSocket | None = None
    deletes: DeleteChannel | None = None  # its sockets for RTM_DELLINK (``_unregister``)
    nsids: dict[int, Identity] = field(default_factory=dict)  # nsid seen from here -> ns
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    used: float = 0.0  # time.monotonic() of the last use of the descriptor or socket
    calls: int = 0  # calls in progress that use it (a delete's sender thread included)
    cookie: int | None = None  # SO_NETNS_COOKIE of its first socket (None: not known)

    @property
    def held(self) -> bool:
        return self.fd is not None or self.sock is not None or self.deletes is not None

    def held_fd(self) -> int:
        """The descriptor, reopened from a path still naming this namespace if needed
        (ENOENT if none does any more). Call with ``lock`` held."""
        if self.closed:
            raise netlink_error(errno.ENOENT, f"namespace {self.key} was released")
        self.used = time.monotonic()
        if self.fd is None:
            for path in self.paths:
                try:
                    self.fd, _ = open_netns(path, self.key)
                    break
                except (OSError, KernelError):
                    continue  # gone, or names another namespace now
            else:
                raise netlink_error(errno.ENOENT, f"namespace {self.key} is gone")
        return self.fd

    def let_go(self) -> None:
        """Close the descriptor and socket; the namespace stays known (reopened on use)."""
        with self.lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            if self.deletes is not None:
                self.deletes.close()
                self.deletes = None
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None

    def close(self) -> None:
        self.let_go()
        with self.lock:
            self.closed = True


_FdOf = Callable[[_Namespace], int]


def _paths_naming(space: _Namespace) -> list[str]:
    """The known mount paths of ``space`` that still name it."""
    live = []
    for path in space.paths:
        try:
            if stat_identity(path) == space.key:
                live.append(path)
        except OSError:
            pass
    return live


@contextlib.contextmanager
def _borrow_fd(space: _Namespace) -> Iterator[int]:
    """A private duplicate of a namespace's descriptor, for IFLA_NET_NS_FD/NETNSA_FD.

    A concurrent release may close ``space.fd`` and the number be reused by another
    open: the duplicate keeps naming the verified namespace until the request is done.
    """
    with space.lock:
        fd = os.dup(space.held_fd())
    try:
        yield fd
    finally:
        os.close(fd)


P = ParamSpec("P")
R = TypeVar("R")


def _call(fn: Callable[Concatenate[LinuxKernel, P], R]) -> Callable[Concatenate[LinuxKernel, P], R]:
    """A public call: errors translated (``translated``); the namespaces whose sockets it
    used (``_pin``) are counted as in use until it returns, then let go of once idle (see
    the module's docstring)."""
    inner = translated(fn)

    @functools.wraps(fn)
    def wrapper(self: LinuxKernel, /, *args: P.args, **kwargs: P.kwargs) -> R:
        local = self._local
        if getattr(local, "pins", None) is not None:
            return inner(self, *args, **kwargs)  # inside another call (the constructor's)
        pins: list[_Namespace] = []
        local.pins = pins
        try:
            return inner(self, *args, **kwargs)
        finally:
            local.pins = None
            self._unpin(pins)

    return wrapper


def new_rtnl_socket() -> socket.socket:
    """A NETLINK_ROUTE socket in the calling thread's namespace (``LinuxKernel``'s
    ``open_socket`` by default)."""
    return socket.socket(
        socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE
    )


def _new_rtnl_sockets(make: Callable[[], socket.socket], count: int) -> list[socket.socket]:
    made: list[socket.socket] = []
    try:
        for _ in range(count):
            made.append(make())
    except BaseException:
        _close_all(made)
        raise
    return made


def _close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def _netns_cookie(sock: socket.socket) -> int | None:
    """The cookie of the namespace ``sock`` lives in; None on a kernel without one."""
    try:
        return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")
    except OSError as exc:
        if exc.errno in (errno.ENOPROTOOPT, errno.EINVAL):
            return None
        raise


class LinuxKernel:
    """The ``Kernel`` protocol on the running Linux kernel (root or CAP_NET_ADMIN).

    ``host_namespace`` is the approved host namespace mount, given by configuration
    (a path such as ``/run/netns/host``, or a ``NamespaceHandle`` to verify); it is
    never guessed. ``namespace_dirs`` and ``proc_dir`` say where ``list_namespaces``
    looks: the directories where namespaces are mounted, and the proc filesystem
    whose processes' namespaces it lists (e.g. ``/host/proc`` in a container that
    mounts the node's; ``None``: no process scan). ``linger_s`` and ``max_held``: how
    long, and how many, namespaces other than the host's stay held after the calls that
    used them (the module's docstring; ``linger_s=0``: let go when the last call returns).
    ``deadline_s``: how long a request may go unanswered before it is given up (the
    module's docstring, "Calls that never return"). ``open_socket`` makes each netlink
    socket, called inside the namespace it is for (a test's seam: a socket whose
    ``send`` never returns is a kernel call that never answers).
    """

    def __init__(
        self,
        host_namespace: str | os.PathLike[str] | NamespaceHandle,
        *,
        namespace_dirs: Iterable[str | os.PathLike[str]] = DEFAULT_NAMESPACE_DIRS,
        proc_dir: str | os.PathLike[str] | None = PROC_DIR,
        linger_s: float = NAMESPACE_LINGER_S,
        max_held: int = MAX_HELD_NAMESPACES,
        deadline_s: float = CALL_DEADLINE_S,
        open_socket: Callable[[], socket.socket] = new_rtnl_socket,
    ) -> None:
        if isinstance(namespace_dirs, str | os.PathLike):
            # a str is an Iterable[str] too: its characters would be scanned as directories
            raise TypeError("namespace_dirs is a collection of directories, not one path")
        self._namespace_dirs = tuple(os.fspath(d) for d in namespace_dirs)
        self._proc_dir = None if proc_dir is None else os.fspath(proc_dir)
        self._lock = threading.RLock()
        self._spaces: dict[Identity, _Namespace] = {}
        self._local = threading.local()  # .pins: the namespaces the thread's call uses
        self._host_key: Identity | None = None
        self._closed = False
        self._linger_s = max(0.0, linger_s)
        self._max_held = max(0, max_held)
        self._deadline_s = deadline_s
        self._open_socket = open_socket
        self._sockets = w.Sockets()  # our open netlink sockets, for stuck_calls()
        self._idle = threading.Condition(self._lock)  # wakes the idle thread
        self._idle_deadline: float | None = None  # when the next held namespace expires
        self._idle_thread: threading.Thread | None = None
        # When the idle thread wakes next by itself (None: it is not waiting): a deadline
        # no earlier needs no notify, whose wake-up and GIL handoff cost every kernel call
        # ~10 % of the service's Python time when each call's end notified it.
        self._idle_wakes: float | None = None
        self._swept = -SWEEP_INTERVAL_S  # time.monotonic() of the last sweep's start
        with kernel_errors("LinuxKernel"):
            self._boot_id = read_boot_id()
            if isinstance(host_namespace, NamespaceHandle):
                self._host = self.open_namespace(host_namespace)
            else:
                path = os.fspath(host_namespace)
                space = self._register(path, None)
                self._host = self._ref_of(space, path)
            self._host_key = (self._host.device, self._host.inode)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close every namespace descriptor and netlink socket this kernel holds."""
        with self._lock:
            self._closed = True
            spaces = list(self._spaces.values())
            self._spaces.clear()
            self._idle.notify_all()  # the idle thread ends
        for space in spaces:
            space.close()

    def __enter__(self) -> LinuxKernel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @translated
    def release_namespace(self, ns: NsRef) -> None:
        """Stop holding ``ns`` open (its socket and descriptor); reopened on next use."""
        with self._lock:
            space = self._spaces.pop((ns.device, ns.inode), None)
            self._forget_nsids({(ns.device, ns.inode)})
        if space is not None:
            space.close()

    def cached_namespaces(self) -> list[NsRef]:
        """The namespaces known here (used and still named by a path), held or not."""
        self._sweep()
        with self._lock:
            return [self._ref_of(s, s.paths[0]) for s in self._spaces.values()]

    def held_namespaces(self) -> list[NsRef]:
        """The namespaces whose descriptor or socket is open now: between calls, the
        host's and those used in the last ``linger_s``."""
        with self._lock:
            return [self._ref_of(s, s.paths[0]) for s in self._spaces.values() if s.held]

    def stuck_calls(self) -> int:
        """Requests on this kernel's sockets past their deadline whose threads have not
        returned yet (stuck in the kernel; the module's docstring)."""
        return self._sockets.stuck()

    def _pin(self, space: _Namespace) -> None:
        """Count ``space`` as used by the thread's call until it returns: it is not let go
        meanwhile. Before its socket is taken (the kernel's lock comes before its own)."""
        pins: list[_Namespace] | None = getattr(self._local, "pins", None)
        if pins is None or space in pins:
            return
        with self._lock:
            space.calls += 1
        pins.append(space)

    def _hold(self, space: _Namespace) -> Callable[[], None]:
        """Count work that outlives its public call (a delete's sender thread) as a call in
        ``space`` until the function returned is called (once): nothing it uses is let go."""
        with self._lock:
            space.calls += 1
        return functools.partial(self._unpin, [space])

    def _unpin(self, pins: list[_Namespace]) -> None:
        """A call using ``pins`` returned: let go of the namespaces (but the host's) idle for
        ``linger_s`` that no call uses. Done under the kernel's lock, which a call takes to
        count itself in a namespace: none does meanwhile, so none is using what is closed."""
        with self._lock:
            for space in pins:
                space.calls -= 1
            if not self._nothing_to_let_go(pins):
                self._let_go_idle()

    def _nothing_to_let_go(self, pins: list[_Namespace]) -> bool:
        """With the lock held: no namespace can be due before the idle thread's next
        deadline, so the scan would close nothing and change no deadline. It sorts every
        held namespace, and in a burst of hooks in many pods it ran at the end of every
        call (~5 % of the service's Python time with 64 pods)."""
        deadline = self._idle_deadline
        if deadline is None or self._idle_thread is None:
            return False  # nobody waits for the namespaces these calls leave idle
        if len(self._spaces) > self._max_held + 1:  # the host's is never counted
            return False
        if time.monotonic() >= deadline:
            return False
        # A namespace this call leaves idle expires linger_s after its last use: not
        # before the deadline the idle thread already waits for.
        return all(s.key == self._host_key or s.used + self._linger_s >= deadline for s in pins)

    def _let_go_idle(self) -> None:
        """With the lock held: close what no call uses and expired (and the least recently
        used beyond ``max_held``); tell the idle thread when the rest expires. A namespace
        in use stays held; the call using it decides when it returns."""
        now = time.monotonic()
        held = sorted(
            (s for s in self._spaces.values() if s.key != self._host_key and s.held),
            key=lambda s: s.used,
            reverse=True,
        )
        kept = 0
        earliest: float | None = None  # the oldest use of those kept that no call uses
        for space in held:
            if space.calls:
                kept += 1
            elif now - space.used >= self._linger_s or kept >= self._max_held:
                space.let_go()
            else:
                kept += 1
                earliest = space.used  # held is sorted by use, latest first
        if earliest is None:
            self._idle_deadline = None
            return
        deadline = earliest + self._linger_s
        self._idle_deadline = deadline
        if self._idle_thread is None:
            self._idle_thread = threading.Thread(
                target=self._wait_idle, name="netns-idle", daemon=True
            )
            self._idle_thread.start()
        elif self._idle_wakes is None or deadline < self._idle_wakes:
            self._idle.notify()

    def _wait_idle(self) -> None:
        """The idle thread: at each deadline, let go of what expired that no call uses
        (a namespace in use is decided by its call, when it returns). It never enters a
        namespace, and it ends once no idle namespace but the host's is held (the next
        hold starts another)."""
        with self._lock:
            try:
                while not self._closed and self._idle_deadline is not None:
                    left = self._idle_deadline - time.monotonic()
                    if left > 0:
                        # Woken early only for an earlier deadline: one set later (a
                        # namespace used since) is read again when this wait ends.
                        self._idle_wakes = self._idle_deadline
                        self._idle.wait(left)
                        self._idle_wakes = None
                    else:
                        self._let_go_idle()
            finally:
                self._idle_thread = None
                self._idle_wakes = None

    # -- Kernel: namespaces ----------------------------------------------------------------

    def boot_id(self) -> str:
        return self._boot_id

    def host_namespace(self) -> NsRef:
        return self._host

    @_call
    def open_namespace(self, handle: NamespaceHandle) -> NsRef:
        if handle.boot_id != self._boot_id:
            raise netlink_error(errno.ESTALE, f"{handle.path} is a handle of boot {handle.boot_id}")
        expect = (handle.device, handle.inode)
        found = stat_identity(handle.path)  # ENOENT when the mount is gone
        if found != expect:
            raise netlink_error(
                errno.ESTALE, f"{handle.path} now names namespace {found}, not {expect}"
            )
        self._sweep_if_due()
        space = self._register(handle.path, expect)
        return self._ref_of(space, handle.path)

    @_call
    def list_namespaces(self) -> list[NsRef]:
        """The host namespace, then each other namespace once, by the first path found.

        Paths are tried in this order: the entries of each of ``namespace_dirs`` (in
        the configured order, entries by name; a missing directory is skipped), then
        ``<proc_dir>/<pid>/ns/net`` by ascending pid, then the paths of namespaces
        opened here that neither names (by path). A mounted namespace is therefore
        listed under its mount path even when processes live in it. What vanishes
        during the scan (a process that exits, a mount removed) is left out.
        """
        self._sweep()  # drop what died: its stale path must not be listed
        host = (self._host.device, self._host.inode)
        found: dict[Identity, str] = {host: self._host.path}
        for directory in self._namespace_dirs:
            for path in _directory_entries(directory):
                key = mounted_netns_identity(path, found)
                if key is not None:
                    found.setdefault(key, path)
        if self._proc_dir is not None:
            for path in _process_netns_paths(self._proc_dir):
                key = process_netns_identity(path)
                if key is not None:
                    found.setdefault(key, path)
        with self._lock:
            opened = sorted((s.paths[0], s.key) for s in self._spaces.values())
        for path, key in opened:
            found.setdefault(key, path)
        return [self._host] + [
            NsRef(device=key[0], inode=key[1], boot_id=self._boot_id, path=path)
            for key, path in found.items()
            if key != host
        ]

    # -- Kernel: links ---------------------------------------------------------------------

    @_call
    def list_links(self, ns: NsRef) -> list[Link]:
        space = self._resolve(ns)
        body = w.ifinfomsg() + w.nla_u32(w.IFLA_EXT_MASK, w.RTEXT_FILTER_SKIP_STATS)
        replies = self._request(space, w.RTM_GETLINK, w.NLM_F_DUMP, body)
        links = [self._link(space, ns, decode_link(r)) for r in replies]
        return sorted(links, key=lambda lk: lk.ifindex)

    @_call
    def get_link(
        self, ns: NsRef, *, name: str | None = None, ifindex: int | None = None
    ) -> Link | None:
        if (name is None) == (ifindex is None):
            raise netlink_error(errno.EINVAL, "get_link needs exactly one of name and ifindex")
        space = self._resolve(ns)
        msg = self._get_msg(space, name=name, ifindex=ifindex)
        return None if msg is None else self._link(space, ns, msg)

    @_call
    def find_device(self, pci_address: str) -> Link | None:
        """Scan the host namespace and every namespace opened here for the PCI function."""
        pci = pci_address.strip().lower()
        self._sweep()
        with self._lock:
            host = self._spaces.get((self._host.device, self._host.inode))
            spaces = [host] if host is not None else []
            spaces += [s for s in self._spaces.values() if s is not host]
        body = w.ifinfomsg() + w.nla_u32(w.IFLA_EXT_MASK, w.RTEXT_FILTER_SKIP_STATS)
        for space in spaces:
            try:
                replies = self._request(space, w.RTM_GETLINK, w.NLM_F_DUMP, body)
            except NetlinkError as exc:
                if exc.code == errno.ENOENT and space.closed:
                    continue  # dropped meanwhile: its mount is gone
                raise
            for reply in replies:
                msg = decode_link(reply)
                if pci_address_of(msg) == pci:
                    ref = self._host if space is host else self._ref_of(space, space.paths[0])
                    return self._link(space, ref, msg)
        return None

    @_call
    def create_link(self, ns: NsRef, spec: LinkSpec) -> Link:
        """A name template (``dum%d``) or no name (``""``: the kernel's ``<kind>%d``) is
        the kernel's to resolve; the link is then the new one whose name it fits."""
        target = self._resolve(ns)
        template = _template(spec.name, spec.kind)
        before = self._ifindexes(target) if template is not None else set()
        with contextlib.ExitStack() as fds:
            self._newlink(target, spec, lambda space: fds.enter_context(_borrow_fd(space)))
        if template is not None:
            created = self._new_link_named(target, before, template)
        else:
            created = self._get_msg(target, name=spec.name)
        if created is None:
            raise netlink_error(errno.ENODEV, f"{spec.name} vanished right after creation")
        if spec.alias is not None:
            # RTM_NEWLINK ignores IFLA_IFALIAS: the marker is a second message.
            index = int(created["index"])
            try:
                self._setlink(target, index, [w.nla_raw_str(w.IFLA_IFALIAS, spec.alias)])
            except BaseException:
                self._delete_quietly(target, index)
                raise
            created = self._get_msg(target, ifindex=index)
            if created is None:
                raise netlink_error(errno.ENODEV, f"{spec.name} vanished right after creation")
        return self._link(target, ns, created)

    def _newlink(self, target: _Namespace, spec: LinkSpec, fd_of: _FdOf) -> None:
        """The one RTM_NEWLINK message that creates ``spec`` in ``target``."""
        via, extra = target, b""
        if spec.kind in STACKED and spec.parent_ns is not None:
            parent_space = self._resolve(spec.parent_ns)
            if parent_space is not target:
                # Sent in the parent's namespace, where IFLA_LINK is looked up; the child
                # is registered directly in the target namespace.
                via, extra = parent_space, w.nla_u32(w.IFLA_NET_NS_FD, fd_of(target))
        # no IFLA_IFNAME: the kernel names it "<kind>%d" (rtnl_newlink_create)
        attrs = [w.nla_str(w.IFLA_IFNAME, spec.name)] if spec.name else []
        if spec.mac is not None:
            attrs.append(w.nla_mac(w.IFLA_ADDRESS, spec.mac))
        if spec.mtu is not None:
            attrs.append(w.nla_u32(w.IFLA_MTU, _u32(spec.mtu, "mtu")))
        if spec.kind in STACKED and spec.parent is not None:
            attrs.append(w.nla_u32(w.IFLA_LINK, _u32(spec.parent, "parent")))
        attrs.append(w.nest(w.IFLA_LINKINFO, self._linkinfo(target, spec, fd_of)))
        # ifi_index > 0: register at that ifindex (EEXIST if the namespace the request
        # is sent in has it, EBUSY if only the target namespace does)
        index = 0 if spec.ifindex is None else _new_ifindex(spec.ifindex)
        body = w.ifinfomsg(index) + b"".join(attrs) + extra
        self._request(via, w.RTM_NEWLINK, w.NLM_F_CREATE | w.NLM_F_EXCL, body)

    @_call
    def set_link(self, ns: NsRef, ifindex: int, changes: LinkChanges) -> Link:
        space = self._resolve(ns)
        attrs: list[bytes] = []
        if changes.mac is not None:
            attrs.append(w.nla_mac(w.IFLA_ADDRESS, changes.mac))
        if changes.mtu is not None:
            attrs.append(w.nla_u32(w.IFLA_MTU, _u32(changes.mtu, "mtu")))
        if changes.name is not None:
            attrs.append(w.nla_str(w.IFLA_IFNAME, changes.name))
        if changes.alias is not None:
            attrs.append(w.nla_raw_str(w.IFLA_IFALIAS, changes.alias))
        if changes.master is not None:
            attrs.append(w.nla_u32(w.IFLA_MASTER, _u32(changes.master, "master")))
        flags = change = 0
        if changes.up is not None:
            change = w.IFF_UP
            flags = w.IFF_UP if changes.up else 0
        self._setlink(space, ifindex, attrs, flags=flags, change=change)
        msg = self._get_msg(space, ifindex=ifindex)
        if msg is None:
            raise netlink_error(errno.ENODEV, f"link {ifindex} vanished after the change")
        return self._link(space, ns, msg)

    @_call
    def set_link_options(self, ns: NsRef, ifindex: int, options: LinkOptions) -> Link:
        space = self._resolve(ns)
        info = [w.nla_str(w.IFLA_INFO_KIND, options.kind)]
        data = _option_data(options)
        if data:
            info.append(w.nest(w.IFLA_INFO_DATA, data))
        # RTM_NEWLINK without NLM_F_CREATE on an existing ifindex: rtnl_changelink, which
        # hands IFLA_INFO_DATA to the kind's changelink (EOPNOTSUPP for another kind).
        body = w.ifinfomsg(_s32(ifindex)) + w.nest(w.IFLA_LINKINFO, info)
        self._request(space, w.RTM_NEWLINK, 0, body)
        msg = self._get_msg(space, ifindex=ifindex)
        if msg is None:
            raise netlink_error(errno.ENODEV, f"link {ifindex} vanished after the change")
        return self._link(space, ns, msg)

    @_call
    def move_link(
        self,
        ns: NsRef,
        ifindex: int,
        target: NsRef,
        *,
        new_name: str | None = None,
        alias: str | None = None,
    ) -> Link:
        src = self._resolve(ns)
        dst = self._resolve(target)
        name = new_name or None  # an empty IFLA_IFNAME renames nothing (do_setlink)
        template = _template(name, "") if name is not None and "%" in name else None
        before = self._ifindexes(dst) if template is not None else set()
        if name is None:
            current = self._get_msg(src, ifindex=ifindex)
            if current is None:
                raise netlink_error(errno.ENODEV, f"no link with ifindex {ifindex}")
            name = str(current.get_attr("IFLA_IFNAME"))
        with _borrow_fd(dst) as dst_fd:
            attrs = [w.nla_u32(w.IFLA_NET_NS_FD, dst_fd)]
            if new_name is not None:
                attrs.append(w.nla_str(w.IFLA_IFNAME, new_name))
            if alias is not None:
                attrs.append(w.nla_raw_str(w.IFLA_IFALIAS, alias))
            self._setlink(src, ifindex, attrs)
        if template is not None:
            return self._link(dst, target, self._new_link_named(dst, before, template))
        moved = self._get_msg(dst, name=name)
        if moved is None:
            raise netlink_error(errno.ENODEV, f"{name} is not in the target namespace")
        return self._link(dst, target, moved)

    @_call
    def delete_link(self, ns: NsRef, ifindex: int) -> None:
        """Returns once the kernel announces the link unregistered, not after it freed it
        (``_unregister``: the kernel's RCU wait, most of a delete, is left to a thread)."""
        space = self._resolve(ns)
        index = _s32(ifindex)
        hold = functools.partial(self._hold, space)
        # False: the channel was discarded (a delete on it got stuck) before our turn
        # came, and nothing was sent: the next one is new.
        while not self._delete_channel(space).delete(index, hold):
            pass

    # -- Kernel: VFs -----------------------------------------------------------------------

    @_call
    def get_vfs(self, ns: NsRef, pf_ifindex: int) -> list[VFConfig]:
        space = self._resolve(ns)
        return self._vfs(space, pf_ifindex)

    @_call
    def set_vf(self, ns: NsRef, pf_ifindex: int, vf_index: int, changes: VFChanges) -> None:
        space = self._resolve(ns)
        vf = _u32(vf_index, "vf index")
        parts: list[bytes] = []
        current: VFConfig | None = None

        def now() -> VFConfig:
            nonlocal current
            if current is None:
                found = [c for c in self._vfs(space, pf_ifindex) if c.vf_index == vf_index]
                current = found[0] if found else VFConfig(vf_index=vf_index)
            return current

        if changes.mac is not None:
            parts.append(w.nla(w.IFLA_VF_MAC, w.vf_mac(vf, changes.mac)))
        if changes.vlan is not None or changes.qos is not None or changes.vlan_proto is not None:
            proto_name = changes.vlan_proto or now().vlan_proto
            proto = VLAN_PROTOCOLS.get(proto_name)
            if proto is None:
                raise netlink_error(errno.EPROTONOSUPPORT, f"VF vlan protocol {proto_name!r}")
            vlan = now().vlan if changes.vlan is None else changes.vlan
            qos = now().qos if changes.qos is None else changes.qos
            info = w.vf_vlan_info(vf, _u32(vlan, "vlan"), _u32(qos, "qos"), proto)
            parts.append(w.nest(w.IFLA_VF_VLAN_LIST, [w.nla(w.IFLA_VF_VLAN_INFO, info)]))
        if changes.min_tx_rate is not None or changes.max_tx_rate is not None:
            lo = changes.min_tx_rate if changes.min_tx_rate is not None else now().min_tx_rate
            hi = changes.max_tx_rate if changes.max_tx_rate is not None else now().max_tx_rate
            rates = w.vf_struct(vf, _u32(lo or 0, "min_tx_rate"), _u32(hi or 0, "max_tx_rate"))
            parts.append(w.nla(w.IFLA_VF_RATE, rates))
        if changes.spoofchk is not None:
            parts.append(w.nla(w.IFLA_VF_SPOOFCHK, w.vf_struct(vf, int(changes.spoofchk))))
        if changes.link_state is not None:
            state = VF_LINK_STATES.get(changes.link_state)
            if state is None:
                raise netlink_error(errno.EINVAL, f"VF link state {changes.link_state!r}")
            parts.append(w.nla(w.IFLA_VF_LINK_STATE, w.vf_struct(vf, state)))
        if changes.trust is not None:
            parts.append(w.nla(w.IFLA_VF_TRUST, w.vf_struct(vf, int(changes.trust))))
        vfinfo = w.nest(w.IFLA_VFINFO_LIST, [w.nest(w.IFLA_VF_INFO, parts)])
        self._setlink(space, pf_ifindex, [vfinfo])

    # -- namespaces: registry, verification, sockets --------------------------------------

    def _register(self, path: str, expect: Identity | None) -> _Namespace:
        with self._lock:
            if self._closed:
                raise netlink_error(errno.EBADF, "this LinuxKernel is closed")
            if expect is not None and expect in self._spaces:
                space = self._spaces[expect]
                if path in space.paths:
                    return space
                if space.held or _paths_naming(space):
                    space.paths.append(path)  # another path of a namespace alive now
                    return space
                # None of its paths names it and we do not hold it: it may have died and a
                # new namespace got its inode number. Forget it; this path is checked anew.
                del self._spaces[expect]
                self._forget_nsids({expect})
                space.close()
            fd, key = open_netns(path, expect)
            if key in self._spaces:  # expect was None: the same namespace under a new path
                os.close(fd)
                space = self._spaces[key]
                if path not in space.paths:
                    space.paths.append(path)
                return space
            space = _Namespace(key=key, fd=fd, paths=[path])
            self._spaces[key] = space
            return space

    def _resolve(self, ref: NsRef) -> _Namespace:
        """The namespace ``ref`` names, after checking its path still names it."""
        if ref.boot_id != self._boot_id:
            raise netlink_error(errno.ESTALE, f"namespace {ref.path} is of boot {ref.boot_id}")
        key = (ref.device, ref.inode)
        self._sweep_if_due()
        if ref.path:
            try:
                found = stat_identity(ref.path)
            except FileNotFoundError as exc:
                raise netlink_error(errno.ENOENT, f"namespace {ref.path} is gone") from exc
            if found != key:
                raise netlink_error(
                    errno.ESTALE, f"{ref.path} now names namespace {found}, not {key}"
                )
            return self._register(ref.path, key)
        with self._lock:
            space = self._spaces.get(key)
        if space is None:
            raise netlink_error(errno.ENOENT, f"namespace {key} is not open")
        return space

    def _sweep_if_due(self) -> None:
        if time.monotonic() - self._swept >= SWEEP_INTERVAL_S:
            self._sweep()

    def _sweep(self) -> None:
        """Drop namespaces none of whose known mount paths names them any more."""
        self._swept = time.monotonic()
        with self._lock:
            if self._closed:
                raise netlink_error(errno.EBADF, "this LinuxKernel is closed")
            spaces = list(self._spaces.values())
        dead: list[_Namespace] = []
        for space in spaces:
            live = _paths_naming(space)
            if not live:
                dead.append(space)
            elif live != space.paths:
                with self._lock:
                    space.paths[:] = live
        if not dead:
            return
        with self._lock:
            for space in dead:
                if self._spaces.get(space.key) is space:
                    del self._spaces[space.key]
            self._forget_nsids({s.key for s in dead})
        for space in dead:
            space.close()

    def _forget_nsids(self, keys: set[Identity]) -> None:
        for space in self._spaces.values():
            for nsid in [i for i, k in space.nsids.items() if k in keys]:
                del space.nsids[nsid]

    def _socket(self, space: _Namespace) -> w.RtnlSocket:
        self._pin(space)
        with space.lock:
            space.held_fd()  # a use: the linger counts from here (and a released one fails)
            sock = space.sock
            if sock is None or sock.closed or sock.overdue():
                if sock is not None:
                    self._discard(space, sock)
                (raw,) = self._sockets_in(space, 1)
                space.sock = sock = w.RtnlSocket(
                    raw,
                    where=space.paths[0],
                    deadline_s=self._deadline_s,
                    sockets=self._sockets,
                )
            return sock

    def _delete_channel(self, space: _Namespace) -> DeleteChannel:
        self._pin(space)
        with space.lock:
            space.held_fd()  # a use, as in _socket
            if space.deletes is None or not space.deletes.usable:
                if space.deletes is not None:
                    self._discard(space, space.deletes)
                    space.deletes = None
                sender, listener = self._sockets_in(space, 2)
                space.deletes = DeleteChannel(
                    sender,
                    listener,
                    where=space.paths[0],
                    deadline_s=self._deadline_s,
                    sockets=self._sockets,
                )
            return space.deletes

    def _discard(self, space: _Namespace, sockets: w.RtnlSocket | DeleteChannel) -> None:
        """Close sockets that will not be used again; say so if a stuck request made us
        (unless it was said when they were given up)."""
        if not sockets.closed and sockets.overdue():
            log_event(
                log,
                logging.WARNING,
                "kernel call stuck: socket discarded",
                netns=space.paths[0],
                deadline_s=self._deadline_s,
            )
        sockets.close()  # never waits: a stuck request closes it if it ever returns

    def _sockets_in(self, space: _Namespace, count: int) -> list[socket.socket]:
        """``count`` new NETLINK_ROUTE sockets inside ``space`` (call with ``space.lock``
        held), made on the entry thread (``make_in_netns``), and checked to be in the
        namespace we know."""
        fd = space.held_fd()
        make = self._open_socket
        if current_thread_identity() == space.key:
            raws = _new_rtnl_sockets(make, count)
        else:
            raws = make_in_netns(fd, lambda: _new_rtnl_sockets(make, count), cleanup=_close_all)
        try:
            cookie = _netns_cookie(raws[0])
            if space.cookie is None:
                space.cookie = cookie
            elif cookie is not None and cookie != space.cookie:
                # The namespace we knew died and another got its inode number:
                # nothing of that other namespace is kept.
                os.close(fd)
                space.fd = None
                raise netlink_error(
                    errno.ESTALE,
                    f"{space.paths[0]} names a new namespace with the inode of {space.key}",
                )
        except BaseException:
            _close_all(raws)
            raise
        return raws

    def _request(self, space: _Namespace, msg_type: int, flags: int, body: bytes) -> list[bytes]:
        return self._socket(space).request(msg_type, flags, body)

    def _ref_of(self, space: _Namespace, path: str) -> NsRef:
        return NsRef(device=space.key[0], inode=space.key[1], boot_id=self._boot_id, path=path)

    def _resolve_nsid(self, space: _Namespace, nsid: int) -> NsRef:
        """The namespace an IFLA_LINK_NETNSID seen from ``space`` names, if we hold it."""
        with self._lock:
            key = space.nsids.get(nsid)
            others = [s for s in self._spaces.values() if s is not space]
        if key is None:
            for other in others:
                with contextlib.ExitStack() as borrowed:
                    try:
                        other_fd = borrowed.enter_context(_borrow_fd(other))
                    except NetlinkError as exc:
                        if exc.code == errno.ENOENT:
                            continue  # gone (no path names it any more) or dropped meanwhile
                        raise
                    body = w.rtgenmsg() + w.nla_u32(w.NETNSA_FD, other_fd)
                    replies = self._request(space, w.RTM_GETNSID, 0, body)
                found = decode_nsid(replies[0]) if replies else None
                if found is None or found in _NSID_UNASSIGNED:
                    continue
                with self._lock:
                    space.nsids[found] = other.key
                if found == nsid:
                    key = other.key
                    break
        with self._lock:
            other_space = self._spaces.get(key) if key is not None else None
        if other_space is None:
            return NsRef(
                device=0,
                inode=UNKNOWN_NAMESPACE_INODE,
                boot_id=self._boot_id,
                path=f"netnsid:{nsid}",
            )
        if key == (self._host.device, self._host.inode):
            return self._host
        return self._ref_of(other_space, other_space.paths[0])

    # -- links: helpers --------------------------------------------------------------------

    def _link(self, space: _Namespace, ref: NsRef, msg: Any) -> Link:
        return to_link(msg, ref, lambda nsid: self._resolve_nsid(space, nsid))

    def _ifindexes(self, space: _Namespace) -> set[int]:
        body = w.ifinfomsg() + w.nla_u32(w.IFLA_EXT_MASK, w.RTEXT_FILTER_SKIP_STATS)
        replies = self._request(space, w.RTM_GETLINK, w.NLM_F_DUMP, body)
        return {int(decode_link(r)["index"]) for r in replies}

    def _new_link_named(
        self, space: _Namespace, before: set[int], template: re.Pattern[str]
    ) -> Any:
        """The link that arrived in ``space`` since ``before`` (its ifindexes) under a name
        ``template`` fits: the kernel chose it (__dev_alloc_name). Of a veth pair named
        by one template, the first end: veth_newlink registers the peer first, so the
        first end has the higher ifindex."""
        body = w.ifinfomsg() + w.nla_u32(w.IFLA_EXT_MASK, w.RTEXT_FILTER_SKIP_STATS)
        replies = self._request(space, w.RTM_GETLINK, w.NLM_F_DUMP, body)
        fits = [
            msg
            for msg in map(decode_link, replies)
            if int(msg["index"]) not in before
            and template.fullmatch(str(msg.get_attr("IFLA_IFNAME")))
        ]
        if not fits:
            raise netlink_error(errno.ENODEV, f"no new link named like {template.pattern!r}")
        return max(fits, key=lambda msg: int(msg["index"]))

    def _get_msg(
        self,
        space: _Namespace,
        *,
        name: str | None = None,
        ifindex: int | None = None,
        ext_mask: int = w.RTEXT_FILTER_SKIP_STATS,
    ) -> Any | None:
        """RTM_GETLINK of one link; None when it does not exist."""
        attrs = w.nla_u32(w.IFLA_EXT_MASK, ext_mask)
        if name is not None:
            if kernel_name_problem(name) is not None:
                return None  # no link can have this name
            attrs += w.nla_str(w.IFLA_IFNAME, name)
        index = ifindex if ifindex is not None else 0
        if not 0 < index <= 0x7FFFFFFF and name is None:
            return None  # ifindexes are positive s32
        try:
            replies = self._request(space, w.RTM_GETLINK, 0, w.ifinfomsg(index) + attrs)
        except NetlinkError as exc:
            if exc.code == errno.ENODEV:
                return None
            raise
        return decode_link(replies[0]) if replies else None

    def _setlink(
        self,
        space: _Namespace,
        ifindex: int,
        attrs: list[bytes],
        *,
        flags: int = 0,
        change: int = 0,
    ) -> None:
        body = w.ifinfomsg(_s32(ifindex), flags, change) + b"".join(attrs)
        self._request(space, w.RTM_SETLINK, 0, body)

    def _delete_quietly(self, space: _Namespace, ifindex: int) -> None:
        # The caller raises the error that made us clean up, not this one.
        with contextlib.suppress(NetlinkError, OSError):
            self._request(space, w.RTM_DELLINK, 0, w.ifinfomsg(ifindex))

    def _linkinfo(self, target: _Namespace, spec: LinkSpec, fd_of: _FdOf) -> list[bytes]:
        info = [w.nla_str(w.IFLA_INFO_KIND, spec.kind)]
        data: list[bytes] = []
        if spec.kind == "veth":
            peer = [w.ifinfomsg()]
            if spec.peer_name is not None:
                peer.append(w.nla_str(w.IFLA_IFNAME, spec.peer_name))
            if spec.peer_ns is not None:
                peer_space = self._resolve(spec.peer_ns)
                if peer_space is not target:
                    peer.append(w.nla_u32(w.IFLA_NET_NS_FD, fd_of(peer_space)))
            data.append(w.nla(w.VETH_INFO_PEER, b"".join(peer)))
        elif spec.kind == "macvlan" and spec.mode is not None:
            data.append(w.nla_u32(w.IFLA_MACVLAN_MODE, _mode(MACVLAN_MODES, spec)))
        elif spec.kind == "ipvlan":
            if spec.mode is not None:
                data.append(w.nla_u16(w.IFLA_IPVLAN_MODE, _mode(IPVLAN_MODES, spec)))
            if spec.ipvlan_flag is not None:
                data.append(w.nla_u16(w.IFLA_IPVLAN_FLAGS, _ipvlan_flags(spec.ipvlan_flag)))
        elif spec.kind == "vlan":
            data.extend(_vlan_data(spec))
        elif spec.kind == "bond" and spec.bond is not None:
            data.extend(_bond_data(spec))
        if data:
            info.append(w.nest(w.IFLA_INFO_DATA, data))
        return info

    def _vfs(self, space: _Namespace, pf_ifindex: int) -> list[VFConfig]:
        mask = w.RTEXT_FILTER_VF | w.RTEXT_FILTER_SKIP_STATS
        # the PF's VF table (IFLA_VFINFO_LIST): asked for only where the VFs are read
        msg = self._get_msg(space, ifindex=pf_ifindex, ext_mask=mask)
        if msg is None:
            raise netlink_error(errno.ENODEV, f"no link with ifindex {pf_ifindex}")
        return to_vfs(msg)


# -- list_namespaces: candidate paths ----------------------------------------------------


def _directory_entries(directory: str) -> list[str]:
    """The paths in ``directory``, by name; none if it does not exist (yet)."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [os.path.join(directory, name) for name in sorted(names)]


def _process_netns_paths(proc_dir: str) -> list[str]:
    """``<proc_dir>/<pid>/ns/net`` of every process listed now, by ascending pid."""
    pids = sorted((n for n in os.listdir(proc_dir) if n.isascii() and n.isdigit()), key=int)
    return [os.path.join(proc_dir, pid, "ns", "net") for pid in pids]


# -- encoding checks the kernel would make, for values that cannot even be encoded -------


def _template(name: str | None, kind: str) -> re.Pattern[str] | None:
    """The names the kernel may choose for ``name`` (a "%d" template; "" is
    "<kind>%d"), or None for a plain name. A malformed template is left to the kernel
    (EINVAL)."""
    if name is None or (name and "%d" not in name):
        return None
    head, _, tail = (name or f"{kind}%d").partition("%d")
    return re.compile(re.escape(head) + r"\d+" + re.escape(tail))


def _u32(value: int, what: str) -> int:
    if not 0 <= value <= U32_MAX:
        raise netlink_error(errno.EINVAL, f"{what} {value} is out of range")
    return value


def _s32(value: int) -> int:
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise netlink_error(errno.EINVAL, f"ifindex {value} is out of range")
    return value


def _mode(table: dict[str, int], spec: LinkSpec) -> int:
    mode = table.get(spec.mode or "")
    if mode is None:
        raise netlink_error(errno.EINVAL, f"{spec.kind} mode {spec.mode!r}")  # ops->validate
    return mode


def _vlan_data(spec: LinkSpec) -> list[bytes]:
    proto = VLAN_PROTOCOLS.get(spec.vlan_protocol)
    if proto is None:  # vlan_validate
        raise netlink_error(errno.EPROTONOSUPPORT, f"vlan protocol {spec.vlan_protocol!r}")
    data = [w.nla_be16(w.IFLA_VLAN_PROTOCOL, proto)]
    if spec.vlan_id is not None:
        if not 0 <= spec.vlan_id <= 0xFFFF:
            raise netlink_error(errno.ERANGE, f"invalid vlan id {spec.vlan_id}")
        data.insert(0, w.nla_u16(w.IFLA_VLAN_ID, spec.vlan_id))
    return data


def _bond_data(spec: LinkSpec) -> list[bytes]:
    bond = spec.bond
    assert bond is not None
    if bond.mode not in BOND_MODES:
        raise netlink_error(errno.EINVAL, f"bond mode {bond.mode!r}")
    data = [
        w.nla_u8(w.IFLA_BOND_MODE, BOND_MODES.index(bond.mode)),
        w.nla_u32(w.IFLA_BOND_MIIMON, _u32(bond.miimon_ms, "miimon")),
    ]
    if bond.updelay_ms:
        data.append(w.nla_u32(w.IFLA_BOND_UPDELAY, _u32(bond.updelay_ms, "updelay")))
    if bond.downdelay_ms:
        data.append(w.nla_u32(w.IFLA_BOND_DOWNDELAY, _u32(bond.downdelay_ms, "downdelay")))
    if bond.fail_over_mac != "none":
        data.append(w.nla_u8(w.IFLA_BOND_FAIL_OVER_MAC, _fail_over_mac(bond.fail_over_mac)))
    return data


def _fail_over_mac(policy: str) -> int:
    if policy not in FAIL_OVER_MAC:  # the bond option table
        raise netlink_error(errno.EINVAL, f"bond fail_over_mac {policy!r}")
    return FAIL_OVER_MAC.index(policy)


def _ipvlan_flags(flag: str) -> int:
    if flag not in IPVLAN_FLAGS:  # ipvlan_nl_validate
        raise netlink_error(errno.EINVAL, f"ipvlan flag {flag!r}")
    return {"bridge": 0, "private": IPVLAN_F_PRIVATE, "vepa": IPVLAN_F_VEPA}[flag]


def _new_ifindex(value: int) -> int:
    if not 0 < value <= 0x7FFFFFFF:
        raise netlink_error(errno.EINVAL, f"ifindex {value} is not a positive s32")
    return value


def _option_data(options: LinkOptions) -> list[bytes]:
    """IFLA_INFO_DATA for ``options``; an option the kind does not have is EINVAL here,
    before it could be read as another attribute of the same number."""
    given = options.fields()
    allowed = {
        "bond": {"bond_mode", "miimon_ms", "active_slave", "fail_over_mac"},
        "macvlan": {"mode"},
        "ipvlan": {"mode", "ipvlan_flag"},
    }.get(options.kind, set())
    foreign = sorted(set(given) - allowed)
    if foreign:
        raise netlink_error(errno.EINVAL, f"a {options.kind} has no option {', '.join(foreign)}")
    data: list[bytes] = []
    if options.bond_mode is not None:
        if options.bond_mode not in BOND_MODES:
            raise netlink_error(errno.EINVAL, f"bond mode {options.bond_mode!r}")
        data.append(w.nla_u8(w.IFLA_BOND_MODE, BOND_MODES.index(options.bond_mode)))
    if options.active_slave is not None:
        slave = _u32(options.active_slave, "active slave")
        data.append(w.nla_u32(w.IFLA_BOND_ACTIVE_SLAVE, slave))
    if options.miimon_ms is not None:
        data.append(w.nla_u32(w.IFLA_BOND_MIIMON, _u32(options.miimon_ms, "miimon")))
    if options.fail_over_mac is not None:
        policy = _fail_over_mac(options.fail_over_mac)
        data.append(w.nla_u8(w.IFLA_BOND_FAIL_OVER_MAC, policy))
    if options.ipvlan_flag is not None:
        data.append(w.nla_u16(w.IFLA_IPVLAN_FLAGS, _ipvlan_flags(options.ipvlan_flag)))
    if options.mode is not None:
        table = MACVLAN_MODES if options.kind == "macvlan" else IPVLAN_MODES
        mode = table.get(options.mode)
        if mode is None:
            raise netlink_error(errno.EINVAL, f"{options.kind} mode {options.mode!r}")
        if options.kind == "macvlan":
            data.append(w.nla_u32(w.IFLA_MACVLAN_MODE, mode))
        else:
            data.append(w.nla_u16(w.IFLA_IPVLAN_MODE, mode))
    return data


def _is_a_kernel(kernel: LinuxKernel) -> Kernel:
    return kernel  # mypy proves LinuxKernel satisfies the Kernel protocol
