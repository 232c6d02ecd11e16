"""Bounded shutdown: a real service process whose kernel call hangs still exits after grace.

The fake kernel holds back its answer to one ``create_link`` (the call takes effect,
the answer never comes in time); SIGTERM must end the process within the grace period
plus one second, leave the interrupted effect ``Applying`` in the journal, and the next
start must recover it by probe so that a retry finishes it and cleanup restores the host.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from fakekernel.client import FakeKernelClient, FakeKernelProcess
from labs import ServiceProcess
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    CleanupStatus,
    ConnectRequest,
    EffectState,
    Hook,
    NamespaceHandle,
    OperationEnvelope,
    OperationState,
    PreparedState,
    PrepareRequest,
    SandboxHandle,
    Sharing,
)
from plugins.sdk.host import PluginCallError
from plugins.sdk.service import EXIT_UNFINISHED

GRACE_S = 2.0
STALL_S = 30.0
MACVLAN = {"mode": "bridge", "mtu": 1500}
ALLOCATION = AllocationBinding(
    "mv0",
    "dra.networking",
    "node",
    "enp3s0f2-macvlan",
    "pf",
    Sharing.SHARED,
    {"ifName": "enp3s0f2"},
    {"dra.networking/macvlans": "1"},
)


def envelope(hook: Hook, op: str, scope: str) -> OperationEnvelope:
    return OperationEnvelope(op, hook, scope, "mv0", 1, 1)


def prepare() -> PrepareRequest:
    return PrepareRequest(
        envelope(Hook.NODE_PREPARE, "prep-mv0", "claim-mv0"), ALLOCATION, json.dumps(MACVLAN)
    )


def connect(sandbox: SandboxHandle, prepared: PreparedState) -> ConnectRequest:
    return ConnectRequest(
        envelope(Hook.CONNECT_NETWORK, "conn-mv0", "att-1"),
        sandbox,
        json.dumps(MACVLAN),
        interface_names={"interface": "net1"},
        prepared=prepared,
        allocation=ALLOCATION,
    )


def remove() -> CleanupRequest:
    return CleanupRequest(envelope(Hook.REMOVE_NETWORK, "remove-mv0", "att-1"))


def unprepare() -> CleanupRequest:
    return CleanupRequest(envelope(Hook.NODE_UNPREPARE, "unprep-mv0", "claim-mv0"))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))  # Unix socket paths are short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def links_service(root: Path, sockets: Path, kernel_socket: Path) -> ServiceProcess:
    service = ServiceProcess(
        "networkplugin-links",
        ["plugins.services", "networkplugin-links"],
        root,
        sockets,
        f"kernel+unix://{kernel_socket}",
        ["macvlan.sock"],
    )
    config = yaml.safe_load(service.config.read_text())
    config["shutdownGraceSeconds"] = GRACE_S
    service.config.write_text(yaml.safe_dump(config))
    return service


def sandbox_links(kernel: FakeKernelClient) -> list[str]:
    ns = kernel.namespace("pod-a")
    return sorted(f"{link.kind}:{link.name}" for link in kernel.list_links(ns))


def test_sigterm_during_a_hung_kernel_call_exits_after_grace_and_recovers(
    tmp_path: Path, short_dir: Path
) -> None:
    kernel_socket = short_dir / "kernel.sock"
    with FakeKernelProcess(kernel_socket) as fake, fake.client() as kernel:
        ns = kernel.add_namespace("pod-a")
        sandbox = SandboxHandle("pod-a", NamespaceHandle(ns.path, ns.device, ns.inode, ns.boot_id))
        baseline = kernel.snapshot()
        service = links_service(tmp_path / "links", short_dir / "sock", kernel_socket)
        service.start()
        try:
            with service.client("macvlan.sock") as client:
                prepared = client.node_prepare(prepare()).prepared_state
            kernel.stall("create_link", STALL_S)
            with (
                service.client("macvlan.sock", timeout=STALL_S + 30) as client,
                ThreadPoolExecutor(1) as pool,
            ):
                pending = pool.submit(client.connect_network, connect(sandbox, prepared))
                assert kernel.wait_stalled("create_link", 30), "the connect never reached it"
                assert service.proc is not None
                service.proc.send_signal(signal.SIGTERM)
                sent = time.monotonic()
                try:
                    status = service.proc.wait(GRACE_S + 1)
                except subprocess.TimeoutExpired:
                    pytest.fail(f"still running {GRACE_S + 1}s after SIGTERM (grace {GRACE_S}s)")
                took = time.monotonic() - sent
                with pytest.raises(PluginCallError) as info:
                    pending.result(30)
            assert info.value.code in ("CANCELLED", "UNAVAILABLE"), info.value
            assert status == EXIT_UNFINISHED, (status, took)
            lines = [
                line for line in service.log.read_text().splitlines() if "still running" in line
            ]
            assert len(lines) == 1, service.log.read_text()
            assert "macvlan.sock ConnectNetwork conn-mv0" in lines[0]
            assert "Traceback" not in service.log.read_text()

            # The kernel did create the link; the journal still says Applying.
            assert len(sandbox_links(kernel)) == 1
            service.start()
            with service.client("macvlan.sock") as client:
                seen = client.inspect("conn-mv0", "att-1")
                assert seen.state is OperationState.FAILED, seen
                applying = [e for e in seen.effects if e.state is EffectState.APPLYING]
                assert len(applying) == 1, seen.effects
                assert "probe at recovery" in applying[0].detail
                # The retry resumes it (apply reconciles what the kernel already did)...
                response = client.connect_network(connect(sandbox, prepared))
                assert [h.attachment_id for h in response.outputs["interface"]] == ["att-1"]
                assert sandbox_links(kernel) == ["macvlan:net1"]
                assert client.inspect("conn-mv0", "att-1").state is OperationState.SUCCEEDED
                # ... and cleanup restores the host exactly.
                assert client.remove_network(remove()).status is CleanupStatus.CLEANED
                assert client.node_unprepare(unprepare()).status is CleanupStatus.CLEANED
            assert kernel.snapshot() == baseline
            assert service.stop() == 0
        finally:
            service.kill()


def test_a_stalled_answer_takes_effect_and_holds_no_lock(short_dir: Path) -> None:
    """The knob the test above relies on: the call takes effect, only its answer waits."""
    with (
        FakeKernelProcess(short_dir / "kernel.sock") as fake,
        fake.client() as admin,
        fake.client() as caller,
        ThreadPoolExecutor(1) as pool,
    ):
        assert not admin.wait_stalled("add_namespace", 0)
        admin.stall("add_namespace", 2)
        pending = pool.submit(caller.add_namespace, "pod-a")
        assert admin.wait_stalled("add_namespace", 30)
        assert not pending.done()
        assert "pod-a" in admin.namespace("pod-a").path  # in effect; rtnl is free
        pending.result(30)
        admin.add_namespace("pod-b")  # one shot: answered at once
        assert not admin.wait_stalled("add_namespace", 0)
