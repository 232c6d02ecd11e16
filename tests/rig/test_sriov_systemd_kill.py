"""The SR-IOV lab's services as a host runs them: killed by systemd, restarted by systemd.

On every host of the ``--lab sriov://`` inventory, the provisioned link service
(``dra-networkplugin@links``) is driven over its real socket (forwarded by SSH) with the
coordinator's token: a macvlan on the host's first PF into a pod namespace of the host.
The service is SIGKILLed (``systemctl kill``) once between two hooks and once in the
middle of a ConnectNetwork, at a delay the seed draws within the connect's measured
duration; systemd restarts it (``Restart=on-failure``), it recovers from its journal,
the retried call (the same operation) answers, removal and unpreparation clean up, and
the host ends with no ownership evidence and its root namespace as it began.
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.pytest_plugin import RigStats
from harness.scenarios import SEED_ENV, start_state_seed
from labs import HostLab
from labs.sriov import (
    LabHost,
    SriovLab,
    agent_command,
    connect,
    ownership_evidence,
    role_defaults,
)
from plugins.sdk import (
    AllocationBinding,
    CleanupRequest,
    CleanupStatus,
    ConnectRequest,
    Hook,
    OperationEnvelope,
    PrepareRequest,
    SandboxHandle,
    Sharing,
)
from plugins.sdk.host import PluginClient

pytestmark = pytest.mark.sriov

SEED = start_state_seed()
REPRODUCE = f"seed {SEED} ({SEED_ENV}={SEED})"
SERVICE = "links"
# Where provisioning put the service's unit, socket and token (the role's defaults).
UNIT = str(role_defaults()["dranp_unit"]).replace("@.", f"@{SERVICE}.")
REMOTE_SOCKET = f"{role_defaults()['dranp_run_root']}/{SERVICE}/macvlan.sock"
TOKEN_FILE = f"{role_defaults()['dranp_config_dir']}/{SERVICE}.token"
CHILD = "net7"
CONFIG = json.dumps({"mode": "bridge", "mtu": 1500})
READY_DEADLINE_S = 120.0


def ssh(host: LabHost, command: str) -> str:
    """``command`` on ``host`` (the agent's ssh argv, another remote command)."""
    argv = [*agent_command(host)[:-1], command]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout


@contextlib.contextmanager
def forwarded_client(host: LabHost) -> Iterator[PluginClient]:
    """A client of the host's macvlan socket, forwarded to a local socket by ssh -L."""
    local = Path(tempfile.mkdtemp(prefix="fwd-", dir="/tmp")) / "macvlan.sock"
    argv = agent_command(host)[:-1]
    forward = subprocess.Popen(
        [
            *argv[:1],
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"{local}:{REMOTE_SOCKET}",
            *argv[1:],
        ],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = None
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        while not local.is_socket():
            assert forward.poll() is None, f"ssh -L exited: {forward.communicate()[1]}"
            assert time.monotonic() < deadline, "the forwarded socket never appeared"
            with contextlib.suppress(subprocess.TimeoutExpired):
                forward.wait(timeout=0.1)  # the condition is the socket; this notices a death
        client = PluginClient(local, ssh(host, f"cat {TOKEN_FILE}").strip(), timeout=120)
        client.wait_ready(READY_DEADLINE_S)
        yield client
    finally:
        if client is not None:
            client.close()
        forward.terminate()
        forward.communicate()  # reaps it and closes its stderr pipe
        local.unlink(missing_ok=True)
        local.parent.rmdir()


def restarts(host: LabHost) -> int:
    return int(ssh(host, f"systemctl show -p NRestarts --value {UNIT}").strip())


def kill_and_await_restart(host: LabHost, client: PluginClient) -> None:
    """SIGKILL the service through systemd; return once systemd restarted it and it is
    ready again (recovery done)."""
    before = restarts(host)
    ssh(host, f"systemctl kill --signal=SIGKILL {UNIT}")
    deadline = time.monotonic() + READY_DEADLINE_S
    while restarts(host) == before:
        assert time.monotonic() < deadline, f"systemd did not restart {UNIT}"
    client.wait_ready(READY_DEADLINE_S)


def envelope(hook: Hook, op: str, scope: str) -> OperationEnvelope:
    return OperationEnvelope(op, hook, scope, "step-1", 1, 1)


def share(parent: str) -> AllocationBinding:
    return AllocationBinding(
        "root-1",
        "dra.networking",
        "node",
        f"{parent}-macvlan",
        "pf",
        Sharing.SHARED,
        {"ifName": parent},
        {"dra.networking/macvlans": "1"},
    )


class Cycle:
    """One macvlan attachment's four hooks, each retried (same operation) until answered."""

    def __init__(self, client: PluginClient, parent: str, sandbox: SandboxHandle, tag: str):
        self.client = client
        self.binding = share(parent)
        self.sandbox = sandbox
        self.tag = tag
        self.prepared: object = None

    def prepare(self) -> None:
        req = PrepareRequest(
            envelope(Hook.NODE_PREPARE, f"prep-{self.tag}", f"claim-{self.tag}"),
            self.binding,
            CONFIG,
        )
        self.prepared = self.client.node_prepare(req).prepared_state

    def connect_request(self) -> ConnectRequest:
        return ConnectRequest(
            envelope(Hook.CONNECT_NETWORK, f"conn-{self.tag}", f"att-{self.tag}"),
            self.sandbox,
            CONFIG,
            interface_names={"interface": CHILD},
            prepared=self.prepared,  # type: ignore[arg-type]
            allocation=self.binding,
        )

    def connect(self) -> None:
        self.client.connect_network(self.connect_request())

    def clean(self) -> None:
        removed = self.client.remove_network(
            CleanupRequest(envelope(Hook.REMOVE_NETWORK, f"rm-{self.tag}", f"att-{self.tag}"))
        )
        assert removed.status is CleanupStatus.CLEANED, removed.detail
        unprepared = self.client.node_unprepare(
            CleanupRequest(envelope(Hook.NODE_UNPREPARE, f"unprep-{self.tag}", f"claim-{self.tag}"))
        )
        assert unprepared.status is CleanupStatus.CLEANED, unprepared.detail


@pytest.fixture(scope="module")
def hosts(sriov_lab: SriovLab) -> list[tuple[LabHost, HostLab]]:
    return [(h, sriov_lab.host_lab(h.name)) for h in sriov_lab.inventory]


@pytest.mark.timeout(1800)
def test_a_service_killed_by_systemd_recovers_and_cleans_up(
    hosts: list[tuple[LabHost, HostLab]], rig_stats: RigStats
) -> None:
    rng = random.Random(f"{SEED}/sriov/systemd-kill")
    for host, lab in hosts:
        before = lab.kernel.snapshot()
        sandbox = lab.sandbox("pod-kill")
        try:
            with forwarded_client(host) as client:
                kill_between_hooks(host, client, Cycle(client, lab.pfs[0], sandbox, "idle"))
                rig_stats.add("crash_runs_sigkill")
                delay = rng.uniform(0, 1)  # of the connect's duration, measured first
                kill_mid_connect(host, client, Cycle(client, lab.pfs[0], sandbox, "mid"), delay)
                rig_stats.add("crash_runs_sigkill")
        finally:
            lab.kernel.delete_namespace("pod-kill")
        assert ownership_evidence(host, connect(host)) == []
        assert lab.changes_since(before) == [], f"{host.name}: the host changed ({REPRODUCE})"


def kill_between_hooks(host: LabHost, client: PluginClient, cycle: Cycle) -> None:
    """The journal alone carries the attachment across the restart."""
    cycle.prepare()
    cycle.connect()
    kill_and_await_restart(host, client)
    cycle.clean()


def kill_mid_connect(host: LabHost, client: PluginClient, cycle: Cycle, fraction: float) -> None:
    """Kill at ``fraction`` of a connect's duration (measured on a first attachment,
    then cleaned); the retry of the same operation answers after recovery."""
    probe = Cycle(client, cycle.binding.attributes["ifName"], cycle.sandbox, "probe")
    probe.prepare()
    started = time.monotonic()
    probe.connect()
    delay = fraction * (time.monotonic() - started)
    probe.clean()
    print(f"\n{host.name}: kill {delay:.2f} s into a connect ({REPRODUCE})")
    cycle.prepare()
    outcome: list[BaseException | None] = []
    call = threading.Thread(target=lambda: outcome.append(_caught(cycle.connect)))
    call.start()
    time.sleep(delay)  # the seeded moment of the kill, not a synchronization
    kill_and_await_restart(host, client)
    call.join()
    print(f"{host.name}: the interrupted connect answered {outcome[0]!r}")
    cycle.connect()  # the retry (same operation): recovered, replayed or finished
    cycle.clean()


def _caught(call: Callable[[], None]) -> BaseException | None:
    try:
        call()
    except Exception as exc:
        return exc
    return None
