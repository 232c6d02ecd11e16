"""delete_link on the real kernel: it answers once the kernel announces the link
unregistered (``plugins/kernel/linux/_unregister``), and that answer is only ever given
for a link that is gone: a link moved away, or a bridge-style announcement, is not a
deletion; an error is the kernel's errno."""

from __future__ import annotations

import errno
import select
import threading
import time

import pytest

from plugins.kernel import KernelError, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux._unregister import (
    announces_unregistration,
    deletes_in_flight,
    wait_for_deletes,
)
from plugins.kernel.linux._wire import RTM_DELLINK

from .conftest import HOST_NS, MakeNamespace
from .helpers import DEADLINE_S, link_listener

pytestmark = pytest.mark.netns


class RawEvents:
    """The raw RTNLGRP_LINK messages of one namespace, as the kernel sent them."""

    def __init__(self, ns_path: str) -> None:
        self._sock = link_listener(ns_path)

    def close(self) -> None:
        self._sock.close()

    def until(self, ifindex: int, kind: int = RTM_DELLINK) -> list[bytes]:
        """Every datagram up to the first holding a message of ``kind`` for ``ifindex``."""
        got: list[bytes] = []
        end = time.monotonic() + DEADLINE_S
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        while True:
            remaining = end - time.monotonic()
            assert remaining > 0, f"no message {kind} for ifindex {ifindex} in {DEADLINE_S}s"
            if not poller.poll(remaining * 1000):
                continue
            data = self._sock.recv(1 << 16)
            got.append(data)
            if _has(data, kind, ifindex):
                return got


def _has(data: bytes, kind: int, ifindex: int) -> bool:
    offset = 0
    while offset + 32 <= len(data):
        length, mtype = (
            int.from_bytes(data[offset : offset + 4], "little"),
            int.from_bytes(data[offset + 4 : offset + 6], "little"),
        )
        index = int.from_bytes(data[offset + 20 : offset + 24], "little", signed=True)
        if mtype == kind and index == ifindex:
            return True
        offset += (length + 3) & ~3
    return False


def test_a_deleted_link_is_gone_when_delete_link_returns(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef
) -> None:
    parent = kernel.create_link(ns_a, LinkSpec(kind="veth", name="p0", peer_name="p1"))
    child = kernel.create_link(
        ns_b,
        LinkSpec(kind="macvlan", name="mv0", parent=parent.ifindex, parent_ns=ns_a, mode="bridge"),
    )
    kernel.delete_link(ns_b, child.ifindex)
    assert kernel.get_link(ns_b, ifindex=child.ifindex) is None
    assert kernel.get_link(ns_b, name="mv0") is None
    assert [lk.name for lk in kernel.list_links(ns_b)] == ["lo"]
    # Its name and its parent's port are free at once: the same child can be made again.
    again = kernel.create_link(
        ns_b,
        LinkSpec(kind="macvlan", name="mv0", parent=parent.ifindex, parent_ns=ns_a, mode="bridge"),
    )
    assert again.ifindex != child.ifindex


def test_the_announcement_is_a_deletion_and_a_move_is_not(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef
) -> None:
    """The kernel announces a move out of a namespace as RTM_DELLINK too (with
    IFLA_NEW_NETNSID): read as a deletion, delete_link would call a link gone that
    lives on elsewhere. The messages here are the kernel's own."""
    events = RawEvents(ns_a.path)
    try:
        moved = kernel.create_link(ns_a, LinkSpec(kind="veth", name="m0", peer_name="m1"))
        peer = kernel.get_link(ns_a, name="m1")
        assert peer is not None
        kernel.move_link(ns_a, moved.ifindex, ns_b)
        move_messages = events.until(moved.ifindex)
        kernel.delete_link(ns_a, peer.ifindex)
        delete_messages = events.until(peer.ifindex)
    finally:
        events.close()
    assert any(_has(d, RTM_DELLINK, moved.ifindex) for d in move_messages)
    assert not any(announces_unregistration(d, moved.ifindex) for d in move_messages)
    announcing = [d for d in delete_messages if announces_unregistration(d, peer.ifindex)]
    assert announcing
    # Another link's deletion is not this one's; a truncated datagram is nobody's.
    assert not any(announces_unregistration(d, peer.ifindex + 1000) for d in delete_messages)
    assert not announces_unregistration(announcing[0][: len(announcing[0]) // 2], peer.ifindex)
    # The moved end went with its peer's deletion.
    assert kernel.get_link(ns_b, ifindex=moved.ifindex) is None


def test_an_error_is_the_kernels_errno(kernel: LinuxKernel, ns_a: NsRef) -> None:
    lo = kernel.get_link(ns_a, name="lo")
    assert lo is not None
    with pytest.raises(KernelError) as absent:
        kernel.delete_link(ns_a, 999_999)
    assert absent.value.code == errno.ENODEV
    with pytest.raises(KernelError) as loopback:
        kernel.delete_link(ns_a, lo.ifindex)  # no rtnl_link_ops: the kernel refuses
    assert loopback.value.code == errno.EOPNOTSUPP
    assert kernel.get_link(ns_a, name="lo") is not None


def test_concurrent_deletes_in_one_namespace_all_finish(kernel: LinuxKernel, ns_a: NsRef) -> None:
    made = [
        kernel.create_link(ns_a, LinkSpec(kind="veth", name=f"c{i}", peer_name=f"d{i}"))
        for i in range(6)
    ]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(made))

    def delete(ifindex: int) -> None:
        barrier.wait(DEADLINE_S)
        try:
            kernel.delete_link(ns_a, ifindex)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=delete, args=(lk.ifindex,)) for lk in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert [lk.name for lk in kernel.list_links(ns_a)] == ["lo"]


def test_the_namespace_is_held_until_the_kernel_has_acked(
    make_ns: MakeNamespace, netns_dir: object
) -> None:
    """The sender thread outlives delete_link by the kernel's wait: its sockets, and the
    namespace, stay held until it is done, then are let go (linger 0)."""
    with LinuxKernel(HOST_NS, linger_s=0) as k:
        ns = k.open_namespace(make_ns())
        link = k.create_link(ns, LinkSpec(kind="veth", name="h0", peer_name="h1"))
        k.delete_link(ns, link.ifindex)
        assert k.get_link(ns, ifindex=link.ifindex) is None
        assert wait_for_deletes(DEADLINE_S)
        # The last sender to be done let the namespace go (its call count reached zero).
        assert ns.key not in {n.key for n in k.held_namespaces()}


def test_delete_link_does_not_wait_for_the_kernels_ack(kernel: LinuxKernel, ns_a: NsRef) -> None:
    """The point of it: the kernel acks a delete after an RCU grace period (milliseconds),
    the announcement comes before. Of five deletes, at least one returns while its sender
    still waits for the ack (each did here; a delete that waited for the ack never does)."""
    early = 0
    for i in range(5):
        link = kernel.create_link(ns_a, LinkSpec(kind="veth", name=f"e{i}", peer_name=f"f{i}"))
        kernel.delete_link(ns_a, link.ifindex)
        early += bool(deletes_in_flight())
        assert wait_for_deletes(DEADLINE_S)
        assert kernel.get_link(ns_a, ifindex=link.ifindex) is None
    assert early >= 1


def test_an_announcement_whose_attributes_do_not_parse_is_not_believed(
    kernel: LinuxKernel, ns_a: NsRef
) -> None:
    """A move's IFLA_NEW_NETNSID could sit behind a malformed attribute: such a message
    leaves the answer to the ack."""
    events = RawEvents(ns_a.path)
    try:
        link = kernel.create_link(ns_a, LinkSpec(kind="veth", name="g0", peer_name="g1"))
        kernel.delete_link(ns_a, link.ifindex)
        (whole,) = [
            d for d in events.until(link.ifindex) if announces_unregistration(d, link.ifindex)
        ]
    finally:
        events.close()
    first_attribute = 16 + 16  # nlmsghdr, ifinfomsg
    broken = bytearray(whole)
    broken[first_attribute : first_attribute + 2] = (2).to_bytes(2, "little")  # nla_len < 4
    assert not announces_unregistration(bytes(broken), link.ifindex)
    overlong = bytearray(whole)
    overlong[first_attribute : first_attribute + 2] = (0xFFF0).to_bytes(2, "little")
    assert not announces_unregistration(bytes(overlong), link.ifindex)


def test_sender_threads_are_reused_run_side_by_side_and_end_when_idle() -> None:
    """Deletes are sent from reused threads (a start per delete cost ~2 % of a burst's
    Python time): a job goes to an idle thread, a job while all are busy to a new one,
    and a thread idle for ``idle_s`` ends; ``wait_for_all`` (the interpreter's exit
    waits with it) returns once no job runs."""
    from plugins.kernel.linux._unregister import _Senders

    pool = _Senders(idle_s=0.5)
    ran: list[int] = []
    pool.run(lambda: ran.append(threading.get_native_id()))
    assert pool.wait_for_all(DEADLINE_S)
    pool.run(lambda: ran.append(threading.get_native_id()))
    assert pool.wait_for_all(DEADLINE_S)
    assert len(ran) == 2
    assert ran[0] == ran[1]  # the idle thread took the second job
    gate = threading.Event()

    def blocked() -> None:
        gate.wait(DEADLINE_S)
        ran.append(threading.get_native_id())

    pool.run(blocked)
    pool.run(lambda: ran.append(threading.get_native_id()))  # the first still blocks
    assert not pool.wait_for_all(0.05)
    gate.set()
    assert pool.wait_for_all(DEADLINE_S)
    assert len(set(ran[2:])) == 2  # side by side: two threads
    threads = [t for t in threading.enumerate() if t.native_id in set(ran)]
    for thread in threads:
        thread.join(DEADLINE_S)  # idle for 0.5 s: each ends
        assert not thread.is_alive()
