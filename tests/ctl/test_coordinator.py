"""``networkplugin-ctl coordinator apps|show|remove`` against the coordinator program.

Real service processes on the fake kernel server and ``networkplugin-coordinator`` over
them (``harness.coordinator_process.CoordinatorRig``). The CLI finds the coordinator's
socket and token through the node config's ``coordinator`` key, as an operator's would.
An apply into a sandbox whose namespace handle is stale (its inode is not the pod's) is
refused by the VF plugin at its first connect: the application is ``failed`` with that
call open. The CLI shows it; a removal while the VF service is down stays ``removing``
(exit 1), and once the service is back the removal ends ``removed`` (exit 0).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.coordinator_process import CoordinatorRig
from plugins.coordinator import CoordinatorCallError
from plugins.ctl import PROG, Exit
from plugins.sdk import SandboxHandle

from .kit import Run, camel_case_problems, ctl, one_line, with_coordinator, write_node_config

VF_BOND_VLAN = "sdk-vf-bond-vlan"
VF = "networkplugin-vf"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorRig]:
    node = CoordinatorRig(tmp_path_factory.mktemp("coordinator"))
    try:
        node.program.start()
        yield node
    finally:
        node.close()


@pytest.fixture
def node(rig: CoordinatorRig, tmp_path: Path) -> Path:
    """A node config naming the services' configs and the coordinator's."""
    return with_coordinator(write_node_config(rig, tmp_path / "node.yaml"), rig.program.config)


def _app(run: Run, attachment: str) -> Any:
    assert run.code == Exit.OK, run
    return next(a for a in run.json()["applications"] if a["attachment"] == attachment)


def _remove_until_removed(node: Path, attachment: str, capsys: Any, deadline_s: float) -> Run:
    """The removal again until it ends removed: the coordinator reconnects to the restarted
    service with gRPC's backoff (at most 1 s), so an attempt may still find it away. A
    condition polled under a deadline (the coordinator's channel is not ours to watch)."""
    deadline = time.monotonic() + deadline_s
    while True:
        run = ctl(node, ["coordinator", "remove", attachment, "-o", "json"], capsys)
        if run.code != Exit.FINDINGS or time.monotonic() > deadline:
            return run
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_a_failed_application_shown_and_removed(
    rig: CoordinatorRig, node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = rig.sandbox()
    stale = SandboxHandle(
        pod.sandbox_id, dataclasses.replace(pod.namespace, inode=pod.namespace.inode + 1)
    )
    with rig.program.coordinator_client() as client, pytest.raises(CoordinatorCallError):
        client.apply("att-ctl", "claim-ctl", VF_BOND_VLAN, stale)

    apps = ctl(node, ["coordinator", "apps", "-o", "json"], capsys)
    assert apps.json()["ready"] is True
    assert camel_case_problems(apps.json()) == []
    app = _app(apps, "att-ctl")
    assert (app["claim"], app["topology"], app["state"]) == ("claim-ctl", VF_BOND_VLAN, "failed")
    assert app["error"].startswith("step vf0: ConnectNetwork failed")
    assert [(c["operation"], c["scope"], c["step"], c["plugin"], c["state"]) for c in app["openCalls"]] == [
        ("att-ctl:vf0:ConnectNetwork:g1", "att-ctl", "vf0", "sriov", "failed")
    ]  # fmt: skip
    assert sorted(c["holder"] for c in app["claims"]) == ["claim-ctl.vf0", "claim-ctl.vf1"]
    as_yaml = ctl(node, ["coordinator", "apps", "-o", "yaml"], capsys)
    assert yaml.safe_load(as_yaml.out) == apps.json()

    table = ctl(node, ["coordinator", "apps"], capsys).out.splitlines()
    assert table[0].split() == [
        "ATTACHMENT",
        "CLAIM",
        "TOPOLOGY",
        "STATE",
        "OPEN",
        "CALLS",
        "ERROR",
    ]
    (row,) = [line for line in table if line.startswith("att-ctl ")]
    assert row.split()[:5] == ["att-ctl", "claim-ctl", VF_BOND_VLAN, "failed", str(len(app["openCalls"]))]  # fmt: skip
    wide = ctl(node, ["coordinator", "apps", "-o", "wide"], capsys).out.splitlines()
    assert "SANDBOX" in wide[0]
    assert "CLAIMED" in wide[0]
    bare = ctl(node, ["coordinator", "apps", "--no-headers"], capsys).out.splitlines()
    assert [line.split() for line in bare] == [line.split() for line in table[1:]]

    shown = ctl(node, ["coordinator", "show", "att-ctl", "-o", "json"], capsys)
    assert shown.json() == {"application": app}
    described = ctl(node, ["coordinator", "show", "att-ctl"], capsys)
    assert described.code == Exit.OK
    assert re.search(r"^State: +failed$", described.out, re.MULTILINE), described.out
    assert "Open calls:" in described.out
    assert "att-ctl:vf0:ConnectNetwork:g1" in described.out
    assert "claim-ctl.vf0" in described.out

    # With the VF service down its step cannot be cleaned: the removal stays open.
    vf = rig.processes.processes[VF]
    vf.kill()
    removing = ctl(node, ["coordinator", "remove", "att-ctl", "-o", "json"], capsys)
    assert removing.code == Exit.FINDINGS, removing
    assert removing.json()["state"] == "removing"
    assert [(r["step"], r["hook"], r["status"]) for r in removing.json()["receipts"]] == [
        ("vf0", "RemoveNetwork", "PENDING")
    ]
    said = ctl(node, ["coordinator", "remove", "att-ctl"], capsys)
    assert said.code == Exit.FINDINGS
    assert said.out.splitlines()[-1] == (
        f"att-ctl: removing (a receipt is not CLEANED): run '{PROG} coordinator remove "
        "att-ctl' again later"
    )
    assert _app(ctl(node, ["coordinator", "apps", "-o", "json"], capsys), "att-ctl")["state"] == (
        "removing"
    )

    vf.start()
    removed = _remove_until_removed(node, "att-ctl", capsys, deadline_s=60)
    assert removed.code == Exit.OK, removed
    assert removed.json()["state"] == "removed"
    assert removed.json()["receipts"]
    assert {r["status"] for r in removed.json()["receipts"]} <= {"CLEANED", "NOT_RUN"}
    again = ctl(node, ["coordinator", "remove", "att-ctl"], capsys)  # idempotent
    assert again.code == Exit.OK
    assert again.out.splitlines()[-1] == "att-ctl: removed"
    after = _app(ctl(node, ["coordinator", "apps", "-o", "json"], capsys), "att-ctl")
    assert (after["state"], after["openCalls"], after["claims"]) == ("removed", [], [])


def test_an_application_the_coordinator_never_applied(
    rig: CoordinatorRig, node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = ctl(node, ["coordinator", "apps", "-o", "json"], capsys).json()
    show = ctl(node, ["coordinator", "show", "att-never"], capsys)
    assert show.code == Exit.USAGE
    assert "att-never" in one_line(show.err)
    remove = ctl(node, ["coordinator", "remove", "att-never"], capsys)
    assert remove.code == Exit.USAGE
    assert "att-never" in one_line(remove.err)
    bad = ctl(node, ["coordinator", "remove", "Att_Bad"], capsys)
    assert bad.code == Exit.USAGE
    assert "'Att_Bad' must be a DNS label" in one_line(bad.err)
    assert ctl(node, ["coordinator", "apps", "-o", "json"], capsys).json() == before


def test_a_token_the_coordinator_refuses(
    rig: CoordinatorRig, node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = yaml.safe_load(rig.program.config.read_text())
    token = tmp_path / "other.token"
    token.write_text("not-the-token\n")
    token.chmod(0o600)
    other = tmp_path / "coordinator.yaml"
    other.write_text(yaml.safe_dump({**config, "tokenFile": str(token)}))
    with_coordinator(node, other)
    run = ctl(node, ["coordinator", "apps"], capsys)
    assert run.code == Exit.USAGE
    assert one_line(run.err) == (
        f"{PROG}: coordinator {rig.program.socket}: refuses the token "
        "(is the token file the coordinator's?)\n"
    )
