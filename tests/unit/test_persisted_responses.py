"""Responses journaled before the hand-written readers were replaced by the one codec
still read back: the strings below were captured from the code before that change.

The runner stores each create's response (``replay``) and each cleanup's receipt
(``cleanup_response``); the coordinator stores every plugin response and reads the
PrepareResponse back after a restart (``Coordinator.prepared_states``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins.coordinator import Call, Coordinator, CoordinatorJournal, operation_id
from plugins.sdk import (
    CleanupResponse,
    CleanupStatus,
    ConnectRequest,
    ConnectResponse,
    EffectState,
    EffectStatus,
    Hook,
    JSONCodecError,
    PreparedState,
    PrepareRequest,
    PrepareResponse,
    ResourceHandle,
)
from plugins.sdk.runner._codec import cleanup_response, replay, response_json
from tests.factories import SANDBOX, envelope, vf_allocation

VF_HANDLE = ResourceHandle(
    "rh-1",
    "KernelInterface",
    "claim.vf0",
    "vf0",
    "",
    "boot-1",
    "claim.vf0",
    '{"pciAddress":"0000:03:10.0"}',
)
BOND_HANDLE = ResourceHandle(
    "rh-2",
    "KernelInterface",
    "att-1",
    "bond0",
    "att-1",
    "boot-1",
    "claim.vf0,claim.vf1",
    '{"netns":{"device":4}}',
)
PREPARED = PrepareResponse(
    PreparedState("claim.vf0", "sriov", "prep-1", (VF_HANDLE,)), ("cdi/vf=0",)
)
CONNECTED = ConnectResponse({"interface": (BOND_HANDLE,)})
QUARANTINED = CleanupResponse(
    CleanupStatus.QUARANTINED,
    "changed",
    (EffectStatus("e1", "link.create", EffectState.QUARANTINED, "mtu changed"),),
)

# The runner journal's response_json (canonical JSON), captured before the change.
RUNNER_PREPARED = (
    '{"cdi_device_ids":["cdi/vf=0"],"prepared_state":{"handles":[{"attachment_id":"",'
    '"boot_id":"boot-1","description_json":"{\\"pciAddress\\":\\"0000:03:10.0\\"}",'
    '"id":"rh-1","owner_scope":"claim.vf0","owner_step":"vf0","root_provenance":"claim.vf0",'
    '"type":"KernelInterface"}],"plugin":"sriov","preparation_id":"prep-1",'
    '"root_id":"claim.vf0"}}'
)
RUNNER_CONNECTED = (
    '{"outputs":{"interface":[{"attachment_id":"att-1","boot_id":"boot-1",'
    '"description_json":"{\\"netns\\":{\\"device\\":4}}","id":"rh-2","owner_scope":"att-1",'
    '"owner_step":"bond0","root_provenance":"claim.vf0,claim.vf1","type":"KernelInterface"}]}}'
)
RUNNER_QUARANTINED = (
    '{"detail":"changed","effects":[{"detail":"mtu changed","effect_id":"e1",'
    '"kind":"link.create","state":"Quarantined"}],"status":"QUARANTINED"}'
)
# The coordinator journal's response_json of a NodePrepare (json.dumps, sort_keys=True).
COORDINATOR_PREPARED = (
    '{"cdi_device_ids": [], "prepared_state": {"handles": [{"attachment_id": "", '
    '"boot_id": "boot-1", "description_json": "{\\"pciAddress\\":\\"0000:03:10.0\\"}", '
    '"id": "rh-1", "owner_scope": "claim.vf0", "owner_step": "vf0", '
    '"root_provenance": "claim.vf0", "type": "KernelInterface"}], "plugin": "sriov", '
    '"preparation_id": "prep-1", "root_id": "claim.vf0"}}'
)

PREPARE = PrepareRequest(envelope(Hook.NODE_PREPARE, "claim.vf0", "vf0"), vf_allocation(), "{}")
CONNECT = ConnectRequest(envelope(Hook.CONNECT_NETWORK, "att-1", "bond0"), SANDBOX, "{}")


def test_stored_runner_responses_replay_as_they_were_written() -> None:
    assert replay(RUNNER_PREPARED, PREPARE) == PREPARED
    assert replay(RUNNER_CONNECTED, CONNECT) == CONNECTED
    assert cleanup_response(RUNNER_QUARANTINED) == QUARANTINED


def test_the_runner_writes_the_same_bytes_it_reads() -> None:
    assert response_json(PREPARED) == RUNNER_PREPARED
    assert response_json(CONNECTED) == RUNNER_CONNECTED
    assert response_json(QUARANTINED) == RUNNER_QUARANTINED


@pytest.mark.parametrize(
    ("stored", "where"),
    [
        (RUNNER_PREPARED.replace('"plugin":', '"plugin_name":'), "$.prepared_state"),
        (RUNNER_PREPARED.replace('"cdi/vf=0"', "7"), "$.cdi_device_ids[0]"),
        (RUNNER_CONNECTED.replace('"att-1",', "null,", 1), "$.outputs.interface[0].attachment_id"),
    ],
)
def test_a_stored_response_that_does_not_fit_fails_loudly(stored: str, where: str) -> None:
    """The hand-written readers ignored unknown keys and kept wrong types."""
    request = PREPARE if "prepared_state" in stored else CONNECT
    with pytest.raises(JSONCodecError) as info:
        replay(stored, request)
    assert str(info.value).startswith(f"{where}: ")


def test_a_stored_cleanup_status_must_be_known() -> None:
    with pytest.raises(JSONCodecError, match=r"'GONE' is not a CleanupStatus"):
        cleanup_response(RUNNER_QUARANTINED.replace("QUARANTINED", "GONE"))


def test_a_restarted_coordinator_reads_journaled_prepared_states(tmp_path: Path) -> None:
    claim, step = "claim", "vf0"
    scope = f"{claim}.{step}"
    op = operation_id(scope, step, Hook.NODE_PREPARE)
    journal = CoordinatorJournal(tmp_path / "state", runtime_dir=tmp_path / "run")
    try:
        detail = {"roots": [step], "plugins": {step: "sriov"}}
        journal.set_unit(claim, "preparation", "topo", "prepared", detail)
        journal.record_call(
            Call(op, scope, step, "sriov", Hook.NODE_PREPARE.value, 1, {}, "requested", None, None)
        )
        journal.finish_call(op, "succeeded", json.loads(COORDINATOR_PREPARED))
        assert Coordinator(journal, {}).prepared_states(claim) == {
            step: PreparedState("claim.vf0", "sriov", "prep-1", (VF_HANDLE,))
        }
    finally:
        journal.close()
