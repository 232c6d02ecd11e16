"""What the benchmarks that drive a real service share: the service process on a lab, the
threads that stand in the node namespace, and the envelope of one hook."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labs import Lab, Node, ServiceProcess, service_of
from plugins.coordinator import operation_id
from plugins.kernel.linux.netns import (
    CLONE_NEWNET,
    THREAD_NETNS,
    check_call,
    libc,
    run_in_netns,
)
from plugins.sdk import Hook, OperationEnvelope

THREADS_READY_TIMEOUT_S = 120.0


def envelope(hook: Hook, scope: str, step: str) -> OperationEnvelope:
    """The envelope the coordinator would send for ``hook`` on ``scope`` (attempt 1)."""
    return OperationEnvelope(operation_id(scope, step, hook), hook, scope, step, 1, 1)


def start_service(
    stack: contextlib.ExitStack, lab: Lab, base: Path, plugin: str, *, pod: str | None = None
) -> ServiceProcess:
    """The real service serving ``plugin`` on ``lab``, as a process (a ``labs.Node``);
    ``stack`` stops it cleanly first, so a failing exit shows its log's end."""
    node = Node(
        lab,
        base / "node",
        services=[service_of(plugin)],
        processes=True,
        coordinator=False,
        pod=pod,
    )
    stack.callback(node.close)
    service = node.processes.of(plugin)

    def stop() -> None:
        if service.proc is None:
            return
        try:
            code = service.stop(timeout=10)
        except subprocess.TimeoutExpired:
            service.kill()
            code = -signal.SIGKILL
        if code != 0:  # its log is deleted with the temp dir: show its end now
            tail = service.log.read_text(errors="replace").splitlines()[-5:]
            print(f"note: the service exited with {code}; its log ends:", file=sys.stderr)
            for line in tail:
                print(f"  {line}", file=sys.stderr)

    stack.callback(stop)  # unwound before node.close, which would SIGKILL it
    return service


def namespace_threads(path: str, count: int = 1) -> ThreadPoolExecutor:
    """``count`` worker threads that enter ``path``'s namespace once and never leave it,
    all started now (a barrier of ``count`` holds them), so no call pays a thread's start.

    A child forked by one of them starts in that namespace (the namespace is per thread),
    so a CNI plugin runs in the node namespace without nsenter's extra exec, and no other
    thread of this process ever changes namespace.
    """

    def enter() -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            check_call(libc().setns(fd, CLONE_NEWNET), f"setns {path}")
        finally:
            os.close(fd)

    pool = ThreadPoolExecutor(count, thread_name_prefix="bench-node", initializer=enter)
    want = os.stat(path)
    gate = threading.Barrier(count, timeout=THREADS_READY_TIMEOUT_S)

    def where() -> tuple[int, int]:
        gate.wait()
        got = os.stat(THREAD_NETNS)
        return got.st_dev, got.st_ino

    seen = [f.result() for f in [pool.submit(where) for _ in range(count)]]
    if any(s != (want.st_dev, want.st_ino) for s in seen):
        pool.shutdown()
        raise RuntimeError(f"a worker thread did not enter {path}")
    return pool


def netlink_socket_in(path: str) -> socket.socket:
    """A NETLINK_ROUTE socket created inside ``path``'s namespace, on a throwaway thread.

    Not pyroute2's ``netns=``: that forks a Python child, which a signal can make
    unwind this process's cleanup (and delete the namespaces) in the child.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return run_in_netns(
            fd,
            lambda: socket.socket(
                socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE
            ),
            cleanup=lambda s: s.close(),
        )
    finally:
        os.close(fd)


def floor_names(label: str) -> tuple[str, str]:
    """A temporary name and an alias of the plugin's lengths, derived from ``label``."""
    digest = hashlib.sha256(label.encode()).hexdigest()
    return "np" + digest[:13], "dranp:" + digest[13:29]


def floor_attach(
    host_ipr: Any, pod_ipr: Any, parent_index: int, pod_fd: int, label: str, ifname: str, mtu: int
) -> int:
    """The floor's attach, as bare pyroute2 requests: what the macvlan plugin asks of the
    kernel (a child born in the pod under a temporary name, marker and final name in one
    SETLINK, up), with names derived from ``label`` as the plugin derives them; its index."""
    temp, alias = floor_names(label)
    host_ipr.link(
        "add",
        ifname=temp,
        kind="macvlan",
        link=parent_index,
        macvlan_mode="bridge",
        mtu=mtu,
        net_ns_fd=pod_fd,
    )
    (msg,) = pod_ipr.link("get", ifname=temp)
    index = int(msg["index"])
    pod_ipr.link("set", index=index, ifalias=alias, ifname=ifname)
    pod_ipr.link("set", index=index, state="up")
    return index
