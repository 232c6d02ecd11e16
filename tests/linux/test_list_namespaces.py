"""``list_namespaces``: mounted namespaces, process namespaces, each once, nothing held."""

from __future__ import annotations

import errno
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from plugins.kernel import KernelError, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux.netns import delete_namespace

from .conftest import HOST_NS, MakeNamespace
from .helpers import DEADLINE_S, fd_count

pytestmark = pytest.mark.netns

# A process that enters a network namespace (a new one, or the one mounted at argv[1]),
# says so, and stays in it until it is killed: what a pod's processes are to the node.
CHILD = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000
if len(sys.argv) > 1:
    rc = libc.setns(os.open(sys.argv[1], os.O_RDONLY | os.O_CLOEXEC), CLONE_NEWNET)
else:
    rc = libc.unshare(CLONE_NEWNET)
if rc != 0:
    sys.exit("child: " + os.strerror(ctypes.get_errno()))
print("ready", flush=True)
sys.stdin.read()
"""


class Child:
    def __init__(self, join: str | None) -> None:
        args = [sys.executable, "-c", CHILD, *([join] if join is not None else [])]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.pid = self.proc.pid
        self.netns = f"/proc/{self.pid}/ns/net"

    def wait_ready(self) -> None:
        """Wait (with a deadline) until the child says it is in its namespace."""
        assert self.proc.stdout is not None
        end = time.monotonic() + DEADLINE_S
        while not select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))[0]:
            if time.monotonic() >= end:
                raise AssertionError(f"child {self.pid} not ready after {DEADLINE_S}s")
        line = self.proc.stdout.readline()
        if line != b"ready\n":
            assert self.proc.stderr is not None
            raise AssertionError(f"child {self.pid} failed: {self.proc.stderr.read()!r}")

    def stop(self) -> None:
        """Kill and reap the child: its /proc entry is gone when this returns."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE_S)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@contextmanager
def child_in_namespace(join: str | None = None) -> Iterator[Child]:
    """A process in a new network namespace, or in the one mounted at ``join``."""
    child = Child(join)
    try:
        child.wait_ready()
        yield child
    finally:
        child.stop()


def identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def with_identity(refs: list[NsRef], key: tuple[int, int]) -> list[NsRef]:
    return [r for r in refs if (r.device, r.inode) == key]


def assert_well_formed(kernel: LinuxKernel, refs: list[NsRef]) -> None:
    assert refs[0] == kernel.host_namespace()
    keys = [(r.device, r.inode) for r in refs]
    assert len(set(keys)) == len(keys), "a namespace is listed twice"
    assert all(r.boot_id == kernel.boot_id() and r.path for r in refs)


def test_a_mounted_namespace_is_listed_once_and_usable(
    netns_dir: Path, make_ns: MakeNamespace, tmp_path: Path
) -> None:
    handle = make_ns()
    missing = tmp_path / "no-such-dir"
    # the same directory twice, and one that does not exist: neither is an error
    with LinuxKernel(HOST_NS, namespace_dirs=(missing, netns_dir, netns_dir)) as k:
        listed = k.list_namespaces()
        assert_well_formed(k, listed)
        (ref,) = with_identity(listed, (handle.device, handle.inode))
        assert ref.path == handle.path
        k.create_link(ref, LinkSpec(kind="veth", name="scan0", peer_name="scan1"))
        assert {lk.name for lk in k.list_links(ref)} == {"lo", "scan0", "scan1"}


def test_listing_holds_no_descriptor(netns_dir: Path, make_ns: MakeNamespace) -> None:
    handles = [make_ns(), make_ns()]
    with LinuxKernel(HOST_NS, namespace_dirs=(netns_dir,)) as k:
        before, cached = fd_count(), k.cached_namespaces()
        listed = k.list_namespaces()
        assert fd_count() == before
        assert k.cached_namespaces() == cached  # nothing opened for what was listed
        for handle in handles:
            assert len(with_identity(listed, (handle.device, handle.inode))) == 1


def test_a_deleted_namespace_is_no_longer_listed_nor_held(
    netns_dir: Path, make_ns: MakeNamespace
) -> None:
    handle = make_ns()
    key = (handle.device, handle.inode)
    with LinuxKernel(HOST_NS, namespace_dirs=(netns_dir,)) as k:
        (ref,) = with_identity(k.list_namespaces(), key)
        k.list_links(ref)  # now held: descriptor and socket
        assert any((c.device, c.inode) == key for c in k.cached_namespaces())
        delete_namespace(handle.path)
        assert with_identity(k.list_namespaces(), key) == []
        assert all((c.device, c.inode) != key for c in k.cached_namespaces())


def test_a_process_namespace_is_listed_once_and_dropped_when_it_exits(netns_dir: Path) -> None:
    with LinuxKernel(HOST_NS, namespace_dirs=()) as k:
        before = fd_count()
        with child_in_namespace() as child:
            key = identity(child.netns)
            assert key != identity(HOST_NS)
            listed = k.list_namespaces()
            assert_well_formed(k, listed)
            (ref,) = with_identity(listed, key)
            assert ref.path == child.netns
            k.create_link(ref, LinkSpec(kind="veth", name="pod0", peer_name="pod1"))
            assert {lk.name for lk in k.list_links(ref)} == {"lo", "pod0", "pod1"}
            assert fd_count() > before  # used, so held (descriptor and socket)
        # reaped: /proc/<pid> is gone, so the next call drops what it held
        assert with_identity(k.list_namespaces(), key) == []
        assert fd_count() == before
        with pytest.raises(KernelError) as exc:
            k.list_links(ref)
        assert exc.value.code == errno.ENOENT


def test_a_mounted_namespace_with_processes_is_listed_once_under_its_mount(
    netns_dir: Path, make_ns: MakeNamespace
) -> None:
    handle = make_ns()
    with (
        child_in_namespace(join=handle.path) as first,
        child_in_namespace(join=handle.path) as second,
        LinuxKernel(HOST_NS, namespace_dirs=(netns_dir,)) as k,
    ):
        assert identity(first.netns) == identity(second.netns) == (handle.device, handle.inode)
        listed = k.list_namespaces()
        assert_well_formed(k, listed)
        (ref,) = with_identity(listed, (handle.device, handle.inode))
        assert ref.path == handle.path


def test_what_vanished_or_is_no_network_namespace_is_skipped(
    make_ns: MakeNamespace, tmp_path: Path
) -> None:
    """A made-up proc and mount directory with every case a scan can meet.

    On a real node a process can exit between listing /proc and reading its
    ns/net; here those entries are gone from the start, so the case is certain.
    """
    mounted, pid9, pid10, not_a_pid, elsewhere = (make_ns() for _ in range(5))
    mounts, proc = tmp_path / "mounts", tmp_path / "proc"
    mounts.mkdir()
    (mounts / "a-plain").write_text("")  # a mount point before its mount
    (mounts / "b-dir").mkdir()
    (mounts / "c-dangling").symlink_to(tmp_path / "gone")
    (mounts / "d-uts").symlink_to("/proc/self/ns/uts")  # a namespace, not a network one
    (mounts / "e-host").symlink_to(HOST_NS)  # the host, under another path
    (mounts / "f-ns").symlink_to(mounted.path)
    (mounts / "g-ns-again").symlink_to(mounted.path)
    os.mkfifo(mounts / "h-fifo")  # opening it would block the scan
    for pid, target in (("9", pid9.path), ("10", pid10.path), ("x", not_a_pid.path)):
        (proc / pid / "ns").mkdir(parents=True)
        (proc / pid / "ns" / "net").symlink_to(target)
    (proc / "11").mkdir()  # exited before its ns/net was read
    (proc / "12" / "ns").mkdir(parents=True)
    (proc / "12" / "ns" / "net").symlink_to(tmp_path / "gone")
    with LinuxKernel(HOST_NS, namespace_dirs=(mounts,), proc_dir=proc) as k:
        opened = k.open_namespace(elsewhere)  # under neither: listed as opened here
        listed = k.list_namespaces()
    assert [r.path for r in listed] == [
        HOST_NS,
        str(mounts / "f-ns"),
        str(proc / "9" / "ns" / "net"),  # by pid, not by name
        str(proc / "10" / "ns" / "net"),
        opened.path,
    ]
    assert [(r.device, r.inode) for r in listed[1:]] == [
        (h.device, h.inode) for h in (mounted, pid9, pid10, elsewhere)
    ]


def test_list_namespaces_after_close_is_ebadf(netns_dir: Path) -> None:
    k = LinuxKernel(HOST_NS, namespace_dirs=())
    k.close()
    with pytest.raises(KernelError) as exc:
        k.list_namespaces()
    assert exc.value.code == errno.EBADF


def test_one_directory_given_as_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match="namespace_dirs"):
        LinuxKernel(HOST_NS, namespace_dirs="/run/netns")
