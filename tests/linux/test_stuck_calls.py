"""A kernel call that never answers (issue 26): it pins its own namespace and no other,
it is given up at its deadline with ETIMEDOUT and a log line, its sockets are never used
again, nothing waits for it (release, sweep, close), and it is counted as stuck until its
thread returns.

The kernel cannot be made to hang a request on purpose (the real case is a device whose
last reference is never dropped, so the kernel's delete waits in ``sendmsg`` for good):
``Hang`` makes the sockets, through ``LinuxKernel``'s ``open_socket``, and holds the
``send`` of a chosen request type until the test lets it go. Everything else is the host
kernel's, in real namespaces.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from plugins.effects.linux import linux_effects
from plugins.kernel import KernelError, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux import kernel as kernel_module
from plugins.kernel.linux._wire import NLM_F_DUMP, RTM_DELLINK, RTM_GETLINK, RtnlSocket, ifinfomsg
from plugins.kernel.linux.kernel import new_rtnl_socket
from plugins.kernel.linux.netns import delete_namespace
from plugins.sdk.runner import NO_CRASH, CrashPoints, Runner
from plugins.sdk.telemetry import PrometheusMetrics
from plugins.services import make_effects

from .conftest import HOST_NS, MakeNamespace
from .helpers import DEADLINE_S, Clock, senders_end

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

pytestmark = pytest.mark.netns

STUCK_S = 0.3  # the kernel's deadline in these tests: a call past it is given up
_HEADER_TYPE = slice(4, 6)  # nlmsghdr.nlmsg_type


class Hang:
    """Netlink sockets whose ``send`` of the next ``count`` requests of type ``kind``
    waits until ``release`` is set: kernel calls that never answer, until the test ends."""

    def __init__(self, kind: int, count: int = 1) -> None:
        self.kind = kind
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)  # one per send held
        self._left = count
        self._lock = threading.Lock()

    def socket(self) -> socket.socket:
        return _HangingSocket(self)

    def holds(self, data: ReadableBuffer) -> bool:
        kind = int.from_bytes(memoryview(data).cast("B")[_HEADER_TYPE], "little")
        with self._lock:
            if kind != self.kind or not self._left:
                return False
            self._left -= 1
            return True

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=DEADLINE_S), "no request reached the kernel"


class _HangingSocket(socket.socket):
    def __init__(self, hang: Hang) -> None:
        raw = new_rtnl_socket()  # made in the namespace this is called in
        super().__init__(raw.family, raw.type, raw.proto, fileno=raw.detach())
        self._hang = hang

    def send(self, data: ReadableBuffer, flags: int = 0, /) -> int:
        if self._hang.holds(data):
            self._hang.entered.release()
            # Bounded only so that a broken test cannot hang the session.
            self._hang.release.wait(DEADLINE_S * 6)
        return super().send(data, flags)


@pytest.fixture
def hang() -> Iterator[Callable[[int, int], Hang]]:
    made: list[Hang] = []

    def make(kind: int, count: int = 1) -> Hang:
        made.append(Hang(kind, count))
        return made[-1]

    yield make
    for h in made:  # the senders it held end (the conftest waits for them)
        h.release.set()


def _veth(k: LinuxKernel, ns: NsRef, name: str) -> int:
    return k.create_link(ns, LinkSpec(kind="veth", name=name, peer_name=f"{name}p")).ifindex


def _held(k: LinuxKernel) -> set[tuple[int, int, str]]:
    return {ref.key for ref in k.held_namespaces()}


def _finishes(step: Callable[[], object]) -> bool:
    """Whether ``step`` returns within the deadline (run on a thread of its own)."""
    done = threading.Event()

    def run() -> None:
        step()
        done.set()

    threading.Thread(target=run, name="test-step", daemon=True).start()
    return done.wait(DEADLINE_S)


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[Callable[[LinuxKernel], PrometheusMetrics]]:
    """The metrics a service's runner reports to, over the executors bound to a kernel."""
    runners: list[Runner] = []

    def wire(kernel: LinuxKernel) -> PrometheusMetrics:
        metrics = PrometheusMetrics()
        runners.append(
            Runner.open(
                tmp_path / f"state-{len(runners)}",
                [],
                linux_effects(kernel, stuck_calls=kernel.stuck_calls),
                artifact_digest="sha256:stuck",
                boot_id=kernel.boot_id(),
                metrics=metrics,
            )
        )
        return metrics

    yield wire
    for runner in runners:
        runner.close()


def test_a_delete_that_never_returns_fails_at_its_deadline_and_the_next_gets_new_sockets(
    make_ns: MakeNamespace,
    hang: Callable[[int, int], Hang],
    scraped: Callable[[LinuxKernel], PrometheusMetrics],
    caplog: pytest.LogCaptureFixture,
) -> None:
    held = hang(RTM_DELLINK, 1)
    with LinuxKernel(HOST_NS, deadline_s=STUCK_S, open_socket=held.socket) as k:
        metrics = scraped(k)
        assert b"networkplugin_kernel_stuck_calls 0.0" in metrics.render()
        ns = k.open_namespace(make_ns())
        first, second = _veth(k, ns, "s0"), _veth(k, ns, "t0")
        started = time.monotonic()
        with pytest.raises(KernelError) as stuck:
            k.delete_link(ns, first)
        took = time.monotonic() - started
        held.wait_entered()
        assert stuck.value.code == errno.ETIMEDOUT
        message = str(stuck.value)
        assert f"RTM_DELLINK of link {first} in {ns.path}" in message
        assert "delete sockets are discarded" in message
        assert STUCK_S <= took < DEADLINE_S
        assert any(
            r.levelno == logging.WARNING and "kernel call stuck" in r.getMessage()
            for r in caplog.records
        )
        assert k.stuck_calls() == 1
        assert b"networkplugin_kernel_stuck_calls 1.0" in metrics.render()
        stuck_channel = k._spaces[(ns.device, ns.inode)].deletes
        assert stuck_channel is not None
        assert not stuck_channel.usable

        # The next delete in that namespace does not queue behind the stuck one (it timed
        # out there too, and parked another thread): new sockets, answered.
        k.delete_link(ns, second)
        assert k.get_link(ns, ifindex=second) is None
        assert k._spaces[(ns.device, ns.inode)].deletes is not stuck_channel
        assert k.stuck_calls() == 1

        held.release.set()  # the kernel answers at last: the held request goes out
        senders_end()
        assert k.stuck_calls() == 0
        assert b"networkplugin_kernel_stuck_calls 0.0" in metrics.render()
        assert k.get_link(ns, ifindex=first) is None
        assert any(
            "returned from send after its deadline" in r.getMessage() for r in caplog.records
        )


def test_a_stuck_delete_pins_its_own_namespace_and_no_other(
    make_ns: MakeNamespace,
    hang: Callable[[int, int], Hang],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The namespaces in-progress calls use were counted together: one sender that never
    returned kept every namespace held for good (pods' namespaces, and the VFs in them,
    never went home). Counted per namespace, the others are let go after their linger."""
    clock = Clock()
    monkeypatch.setattr(kernel_module, "time", clock)
    held = hang(RTM_DELLINK, 1)
    with LinuxKernel(HOST_NS, linger_s=0.25, deadline_s=STUCK_S, open_socket=held.socket) as k:
        stuck_ns, other = k.open_namespace(make_ns()), k.open_namespace(make_ns())
        link = _veth(k, stuck_ns, "p0")
        with pytest.raises(KernelError):
            k.delete_link(stuck_ns, link)
        k.list_links(other)
        assert {stuck_ns.key, other.key} <= _held(k)
        clock.now += 1.0  # both idle for longer than the linger
        k.list_links(k.host_namespace())  # a call returns: what expired is let go
        assert other.key not in _held(k)
        assert stuck_ns.key in _held(k)  # its sender still uses it

        held.release.set()
        senders_end()  # the sender's end lets its namespace go (idle for long enough)
        assert stuck_ns.key not in _held(k)


@pytest.mark.parametrize("how", ["release", "sweep", "close"])
def test_letting_go_never_waits_for_a_stuck_request(
    make_ns: MakeNamespace, hang: Callable[[int, int], Hang], how: str
) -> None:
    """Closing a namespace's sockets took the lock the stuck sender held: a release, the
    sweep of a namespace whose mount was deleted, or the kernel's close waited for good."""
    held = hang(RTM_DELLINK, 1)
    k = LinuxKernel(HOST_NS, deadline_s=STUCK_S, open_socket=held.socket)
    try:
        ns = k.open_namespace(make_ns())
        link = _veth(k, ns, "r0")
        with pytest.raises(KernelError):
            k.delete_link(ns, link)
        if how == "release":
            assert _finishes(lambda: k.release_namespace(ns))
        elif how == "sweep":
            delete_namespace(ns.path)
            assert _finishes(k.cached_namespaces)  # sweeps: its mount is gone
            assert ns.key not in {ref.key for ref in k.cached_namespaces()}
        else:
            assert _finishes(k.close)
        assert k.stuck_calls() == 1
    finally:
        held.release.set()
        k.close()
    senders_end()
    assert k.stuck_calls() == 0


def test_any_request_that_never_answers_pins_only_its_namespace(
    make_ns: MakeNamespace, hang: Callable[[int, int], Hang], caplog: pytest.LogCaptureFixture
) -> None:
    """Not only deletes: a call whose request never returns keeps its own namespace, and
    once past its deadline the namespace's next call gets a new socket."""
    held = hang(RTM_GETLINK, 1)
    with LinuxKernel(HOST_NS, linger_s=0, deadline_s=STUCK_S, open_socket=held.socket) as k:
        stuck_ns, other = k.open_namespace(make_ns()), k.open_namespace(make_ns())
        outcome: list[BaseException | int] = []

        def never_answered() -> None:
            try:
                outcome.append(len(k.list_links(stuck_ns)))
            except BaseException as exc:
                outcome.append(exc)

        caller = threading.Thread(target=never_answered, name="test-stuck-call")
        caller.start()
        try:
            held.wait_entered()
            assert [lk.name for lk in k.list_links(other)] == ["lo"]
            assert other.key not in _held(k)  # linger 0: let go as its call returned
            assert stuck_ns.key in _held(k)
            _wait_for(lambda: k.stuck_calls() == 1)
            started = time.monotonic()
            assert [lk.name for lk in k.list_links(stuck_ns)] == ["lo"]  # a new socket
            assert time.monotonic() - started < STUCK_S  # it did not queue behind
            assert any("socket discarded" in r.getMessage() for r in caplog.records)
        finally:
            held.release.set()
            caller.join(DEADLINE_S)
        assert not caller.is_alive()
        assert outcome == [1]  # answered once released: its socket was only discarded
        assert k.stuck_calls() == 0
        assert stuck_ns.key not in _held(k)


def test_a_request_queued_behind_a_stuck_one_gives_up_at_its_deadline(
    hang: Callable[[int, int], Hang], netns_dir: object
) -> None:
    """On one socket, a request waiting for the lock a stuck one holds gives up at its
    deadline (ETIMEDOUT) and discards the socket, which the stuck request closes when it
    returns: nobody closes it under a request, nobody uses it again."""
    held = hang(RTM_GETLINK, 1)
    sock = RtnlSocket(held.socket(), where="host", deadline_s=STUCK_S)
    first: list[BaseException | int] = []

    def request() -> None:
        try:
            first.append(len(sock.request(RTM_GETLINK, NLM_F_DUMP, ifinfomsg())))
        except BaseException as exc:
            first.append(exc)

    holder = threading.Thread(target=request, name="test-holder")
    holder.start()
    try:
        held.wait_entered()
        with pytest.raises(OSError, match="held past the deadline") as queued:
            sock.request(RTM_GETLINK, NLM_F_DUMP, ifinfomsg())
        assert queued.value.errno == errno.ETIMEDOUT
        assert sock.closed
        assert sock._sock.fileno() != -1  # not closed under the request holding it
    finally:
        held.release.set()
        holder.join(DEADLINE_S)
    assert not holder.is_alive()
    assert len(first) == 1
    assert not isinstance(first[0], BaseException)
    assert sock._sock.fileno() == -1  # closed by the stuck request on its way out


def _wait_for(condition: Callable[[], bool]) -> None:
    """Re-check ``condition`` until it holds (it becomes true as time passes: a deadline
    in the code under test), up to the tests' deadline."""
    end = time.monotonic() + DEADLINE_S
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < end, f"still false after {DEADLINE_S}s"
        pause.wait(0.01)


@pytest.mark.parametrize("crash", ["none", "armed"])
def test_a_services_effects_count_the_kernels_stuck_calls(crash: str) -> None:
    """The services' executors report LinuxKernel's count, whether or not crash points
    wrap the kernel (the rig's crash runs export it too)."""
    points = NO_CRASH if crash == "none" else CrashPoints()
    effects, _ = make_effects(f"linux://{HOST_NS}", points)
    assert effects.stuck_calls is not None
    assert effects.stuck_calls() == 0
