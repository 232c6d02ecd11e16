"""Namespace handles, the namespace-switching policy, teardown and resource release."""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
from pathlib import Path

import pytest

from plugins.kernel import KernelError, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux.netns import create_namespace, delete_namespace, namespace_handle

from .conftest import HOST_NS, MakeNamespace
from .helpers import Clock, LinkEvents, fd_count

pytestmark = pytest.mark.netns


def test_host_namespace_and_boot_id_come_from_configuration(kernel: LinuxKernel) -> None:
    host = kernel.host_namespace()
    st = os.stat(HOST_NS)
    assert (host.device, host.inode, host.path) == (st.st_dev, st.st_ino, HOST_NS)
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
        assert kernel.boot_id() == f.read().strip() == host.boot_id


def test_host_namespace_given_as_a_handle_is_verified(netns_dir: Path) -> None:
    good = namespace_handle(HOST_NS)
    with LinuxKernel(good) as k:
        assert k.host_namespace().key == (good.device, good.inode, good.boot_id)
    stale = dataclasses.replace(good, inode=good.inode + 1)
    with pytest.raises(KernelError) as exc:
        LinuxKernel(stale)
    assert exc.value.code == errno.ESTALE


def test_open_namespace_verifies_the_handle(kernel: LinuxKernel, make_ns: MakeNamespace) -> None:
    handle = make_ns()
    ref = kernel.open_namespace(handle)
    assert (ref.device, ref.inode, ref.boot_id, ref.path) == (
        handle.device,
        handle.inode,
        handle.boot_id,
        handle.path,
    )
    wrong_inode = dataclasses.replace(handle, inode=handle.inode + 1)
    other_boot = dataclasses.replace(handle, boot_id="00000000-0000-0000-0000-000000000000")
    codes = []
    for bad in (wrong_inode, other_boot):
        with pytest.raises(KernelError) as exc:
            kernel.open_namespace(bad)
        codes.append(exc.value.code)
    assert codes == [errno.ESTALE, errno.ESTALE]


def test_open_namespace_enoent_when_the_path_is_gone(
    kernel: LinuxKernel, make_ns: MakeNamespace
) -> None:
    handle = make_ns()
    delete_namespace(handle.path)
    with pytest.raises(KernelError) as exc:
        kernel.open_namespace(handle)
    assert exc.value.code == errno.ENOENT


def test_a_remounted_path_is_estale_for_the_old_handle(
    kernel: LinuxKernel, netns_dir: Path, make_ns: MakeNamespace
) -> None:
    handle = make_ns()
    ref = kernel.open_namespace(handle)
    delete_namespace(handle.path)
    name = os.path.basename(handle.path)
    newer = create_namespace(netns_dir, name)  # same path, another namespace
    try:
        assert newer.inode != handle.inode
        with pytest.raises(KernelError) as reopen:
            kernel.open_namespace(handle)
        with pytest.raises(KernelError) as use:
            kernel.list_links(ref)
        assert [reopen.value.code, use.value.code] == [errno.ESTALE, errno.ESTALE]
        assert kernel.open_namespace(newer).inode == newer.inode
    finally:
        delete_namespace(newer.path)


def test_a_path_that_is_not_a_namespace_is_refused(kernel: LinuxKernel, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(KernelError) as exc:
        kernel.open_namespace(namespace_handle(plain))
    assert exc.value.code == errno.EINVAL


def test_deleting_a_namespace_destroys_its_virtual_links(
    kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef
) -> None:
    va = kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="vb", peer_ns=ns_b))
    mv = kernel.create_link(
        ns_b, LinkSpec(kind="macvlan", name="mv", parent=va.ifindex, parent_ns=ns_a)
    )
    kernel.create_link(ns_b, LinkSpec(kind="bridge", name="br0"))
    events = LinkEvents(ns_a.path)
    try:
        delete_namespace(ns_b.path)
        # The next call drops our socket in ns_b (its mount is gone); then the kernel
        # tears the namespace down: vb dies, and its peer va in ns_a with it.
        events.wait_until(lambda: kernel.get_link(ns_a, name="va") is None)
    finally:
        events.close()
    assert all(ref.key != ns_b.key for ref in kernel.cached_namespaces())
    assert [lk.name for lk in kernel.list_links(ns_a)] == ["lo"]
    with pytest.raises(KernelError) as exc:
        kernel.get_link(ns_b, ifindex=mv.ifindex)
    assert exc.value.code == errno.ENOENT


def test_close_releases_every_descriptor(netns_dir: Path, make_ns: MakeNamespace) -> None:
    handles = [make_ns(), make_ns()]
    before = fd_count()
    k = LinuxKernel(HOST_NS)
    a, b = (k.open_namespace(h) for h in handles)
    va = k.create_link(a, LinkSpec(kind="veth", name="va", peer_name="vb", peer_ns=b))
    k.create_link(b, LinkSpec(kind="macvlan", name="mv", parent=va.ifindex, parent_ns=a))
    k.list_links(k.host_namespace())
    assert fd_count() > before
    k.close()
    assert fd_count() == before
    with pytest.raises(KernelError) as exc:
        k.list_links(a)
    assert exc.value.code == errno.EBADF


def test_release_namespace_and_reopen_on_use(kernel: LinuxKernel, ns_a: NsRef) -> None:
    host = kernel.host_namespace()
    kernel.list_links(host)
    before = fd_count()
    kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    assert fd_count() == before + 2  # ns_a's descriptor and socket, for the next calls
    kernel.release_namespace(ns_a)
    assert fd_count() == before  # let go at once
    assert [ref.key for ref in kernel.held_namespaces()] == [host.key]
    assert all(ref.key != ns_a.key for ref in kernel.cached_namespaces())
    assert kernel.get_link(ns_a, name="va") is not None  # reopened from its verified path


def test_without_linger_a_namespace_is_held_only_during_a_call(
    netns_dir: Path, make_ns: MakeNamespace
) -> None:
    with LinuxKernel(HOST_NS, linger_s=0) as kernel:
        host = kernel.host_namespace()
        ns_a = kernel.open_namespace(make_ns())
        kernel.list_links(host)
        before = fd_count()
        kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
        assert kernel.get_link(ns_a, name="va") is not None
        assert fd_count() == before  # the descriptor and socket of ns_a are closed again
        assert [ref.key for ref in kernel.held_namespaces()] == [host.key]
        assert ns_a.key in [ref.key for ref in kernel.cached_namespaces()]  # still known
        assert not [t for t in threading.enumerate() if t.name == "netns-idle"]


def test_calls_in_a_row_share_the_namespace_s_socket(
    netns_dir: Path, make_ns: MakeNamespace
) -> None:
    with LinuxKernel(HOST_NS, linger_s=60) as kernel:
        ns_a = kernel.open_namespace(make_ns())
        kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
        held, threads = fd_count(), threading.active_count()
        for _ in range(5):
            assert kernel.get_link(ns_a, name="va") is not None
        assert (fd_count(), threading.active_count()) == (held, threads)  # no new socket
        assert ns_a.key in [ref.key for ref in kernel.held_namespaces()]


def test_at_most_max_held_namespaces_stay_held(netns_dir: Path, make_ns: MakeNamespace) -> None:
    with LinuxKernel(HOST_NS, linger_s=60, max_held=2) as kernel:
        host = kernel.host_namespace()
        refs = [kernel.open_namespace(make_ns()) for _ in range(4)]
        for ref in refs:
            kernel.list_links(ref)
        held = {ref.key for ref in kernel.held_namespaces()}
        assert held == {host.key, refs[2].key, refs[3].key}  # the most recently used


def test_a_namespace_met_under_a_new_path_after_its_paths_died_is_checked_anew(
    netns_dir: Path, make_ns: MakeNamespace
) -> None:
    """Calls no longer re-check every known namespace's paths: one whose paths all died
    can still be known (not held) when a namespace with its inode number is opened under
    another path. That one is not the dead one's: it is opened afresh, not refused as
    an impostor of it."""
    with LinuxKernel(HOST_NS, linger_s=0) as kernel:
        handle = make_ns()
        ref = kernel.open_namespace(handle)
        kernel.list_links(ref)  # let go after: known, not held
        known = kernel._spaces[(ref.device, ref.inode)]
        # As if its path had died, and a new namespace with its inode number (another
        # cookie) were mounted at another path:
        known.paths[:] = [str(netns_dir / "gone-long-ago")]
        known.cookie = 1
        again = kernel.open_namespace(handle)
        assert [lk.name for lk in kernel.list_links(again)] == ["lo"]
        assert kernel._spaces[(ref.device, ref.inode)] is not known


def test_the_linger_counts_from_the_last_use_not_from_the_socket(
    netns_dir: Path, make_ns: MakeNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls 0.2 s apart on one namespace, with a 0.25 s linger, go on using its first
    socket however long they go on: every request is a use, not only the one that made
    the socket (a namespace let go between them would pay a thread and a socket each)."""
    import plugins.kernel.linux.kernel as module

    clock = Clock()
    monkeypatch.setattr(module, "time", clock)
    with LinuxKernel(HOST_NS, linger_s=0.25) as k:
        ref = k.open_namespace(make_ns())
        k.list_links(ref)
        first = k._spaces[(ref.device, ref.inode)].sock
        assert first is not None
        for _ in range(5):
            clock.now += 0.2
            k.list_links(ref)
            assert k._spaces[(ref.device, ref.inode)].sock is first
        clock.now += 0.3  # idle for longer than the linger: let go at the next return
        k.list_links(k.host_namespace())
        assert k._spaces[(ref.device, ref.inode)].sock is None


def test_a_namespace_left_idle_after_others_is_let_go_at_its_own_time(
    netns_dir: Path, make_ns: MakeNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call's end skips the scan of held namespaces when none can be due before the idle
    thread's deadline. A namespace last used before that deadline was set (a long call
    in it, ending after a later call elsewhere) is due earlier: its end must scan, or it
    stays held until the other one's time."""
    import plugins.kernel.linux.kernel as module

    clock = Clock()
    monkeypatch.setattr(module, "time", clock)
    with LinuxKernel(HOST_NS, linger_s=1.0) as k:
        a, b = k.open_namespace(make_ns()), k.open_namespace(make_ns())
        k.list_links(a)  # used at t
        release = k._hold(k._spaces[(a.device, a.inode)])  # a call in a goes on
        clock.now += 0.5
        k.list_links(b)  # idle from t + 0.5
        clock.now += 0.55
        k.list_links(k.host_namespace())  # a scan: a in use is kept; next due, b at t + 1.5
        clock.now += 0.05
        release()  # t + 1.1: a, last used at t, was due at t + 1
        assert k._spaces[(a.device, a.inode)].sock is None
        assert k._spaces[(b.device, b.inode)].sock is not None


def test_a_reused_inode_number_is_estale(netns_dir: Path, make_ns: MakeNamespace) -> None:
    """Let go, a namespace can die and another get its inode number under its path: the
    namespace cookie of the next socket tells them apart."""
    with LinuxKernel(HOST_NS, linger_s=0) as kernel:
        ref = kernel.open_namespace(make_ns())
        kernel.list_links(ref)  # the first socket: its cookie is recorded; then let go
        before = fd_count()
        # As if the namespace first seen had died and this one had got its inode number:
        kernel._spaces[(ref.device, ref.inode)].cookie = 1
        with pytest.raises(KernelError) as exc:
            kernel.list_links(ref)
        assert exc.value.code == errno.ESTALE
        assert fd_count() == before  # nothing of the impostor is kept


def test_a_deleted_namespace_dies_without_another_call(
    kernel: LinuxKernel, ns_a: NsRef, make_ns: MakeNamespace
) -> None:
    """A service that used a pod's namespace must not keep it (and a VF in it) alive once
    the runtime deletes it, even if that service never calls the kernel again."""
    watch = kernel.open_namespace(make_ns())
    kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="w0", peer_ns=watch))
    kernel.list_links(ns_a)
    events = LinkEvents(watch.path)
    try:
        delete_namespace(ns_a.path)
        # w0 dies with ns_a; only another LinuxKernel looks (ours is left alone, open).
        with LinuxKernel(HOST_NS) as other:
            seen = other.open_namespace(namespace_handle(watch.path))
            events.wait_until(lambda: other.get_link(seen, name="w0") is None)
    finally:
        events.close()


def test_no_thread_of_ours_changes_namespace(kernel: LinuxKernel, ns_a: NsRef, ns_b: NsRef) -> None:
    mine = os.stat("/proc/thread-self/ns/net")
    threads = set(threading.enumerate())
    kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="vb", peer_ns=ns_b))
    kernel.list_links(ns_b)
    after = os.stat("/proc/thread-self/ns/net")
    assert (after.st_dev, after.st_ino) == (mine.st_dev, mine.st_ino)
    # Between calls every thread of ours is in our namespace: the entry thread, which made
    # the sockets in ns_a and ns_b, came back; the idle one never leaves.
    new = {t.name for t in set(threading.enumerate()) - threads}
    assert new <= {"netns-idle", "netns-enter"}, new
    ours = [t for t in threading.enumerate() if t.name.startswith("netns-")]
    assert {t.name for t in ours} == {"netns-idle", "netns-enter"}
    for thread in ours:
        theirs = os.stat(f"/proc/self/task/{thread.native_id}/ns/net")
        assert (theirs.st_dev, theirs.st_ino) == (mine.st_dev, mine.st_ino), thread.name


def test_concurrent_calls_share_one_socket_safely(kernel: LinuxKernel, ns_a: NsRef) -> None:
    kernel.create_link(ns_a, LinkSpec(kind="veth", name="va", peer_name="va1"))
    errors: list[BaseException] = []
    results: list[int] = []

    def work() -> None:
        try:
            for _ in range(50):
                results.append(len(kernel.list_links(ns_a)))
                assert kernel.get_link(ns_a, name="va") is not None
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    assert not any(t.is_alive() for t in workers)
    assert errors == []
    assert results == [3] * 200


def test_a_stuck_entry_job_times_out_and_later_jobs_get_a_new_thread(ns_a: NsRef) -> None:
    """A job past its deadline is ETIMEDOUT for its caller; what it makes late is cleaned
    up, not leaked; and the stuck thread is retired, so the next job does not wait
    behind it."""
    from plugins.kernel.linux import _nsfs

    release, cleaned = threading.Event(), threading.Event()
    fd = os.open(ns_a.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with pytest.raises(KernelError) as stuck:
            _nsfs.make_in_netns(
                fd, lambda: release.wait(30) and "late", cleanup=lambda v: cleaned.set(),
                deadline_s=0.2,
            )  # fmt: skip
        assert stuck.value.code == errno.ETIMEDOUT
        inside = _nsfs.make_in_netns(fd, _nsfs.current_thread_identity, deadline_s=5)
        assert inside == (ns_a.device, ns_a.inode)  # served while the first is still stuck
        release.set()
        assert cleaned.wait(10), "the late result was not handed to cleanup"
    finally:
        release.set()
        os.close(fd)


def test_an_entry_thread_that_cannot_come_back_is_retired(
    ns_a: NsRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry thread returns to its own namespace after each job; if it cannot, it
    takes no new job (the next one goes to a new thread) and no thread of ours stays
    outside our namespace for longer than the jobs it had already been given."""
    from plugins.kernel.linux import _nsfs

    real = _nsfs.libc()
    refused: list[int] = []

    class FailingWayBack:
        def setns(self, fd: int, nstype: int) -> int:
            if fd != target and not refused:
                refused.append(fd)
                return -1  # the way back, once
            return int(real.setns(fd, nstype))

    target = os.open(ns_a.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _nsfs.make_in_netns(target, lambda: None)  # an entry thread exists
        before = _nsfs._entry
        monkeypatch.setattr(_nsfs, "libc", FailingWayBack)
        first = _nsfs.make_in_netns(target, threading.get_native_id)
        assert before is not None
        assert before.thread.native_id == first
        before.thread.join(10)  # retired, with no job left: it ends
        monkeypatch.setattr(_nsfs, "libc", lambda: real)
        assert refused
        assert not before.thread.is_alive()
        second = _nsfs.make_in_netns(target, threading.get_native_id)
        assert second != first
        assert _nsfs._entry is not before
    finally:
        os.close(target)
