"""The conformance suite against the bridge plugin, on the lab ``--lab`` names:
``pytest`` runs it on the fake kernel (``fake://``) anywhere, ``pytest --lab netns://``
on this machine's kernel in namespaces of its own (root). No conftest: the kit's pytest
plugin (installed with ``pip install dra-networkplugins-testkit``) brings ``lab_factory``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conformance import CHECKS, Host, LabFactory, NotApplicable, Target
from plugins.sdk import ConnectRequest, Hook, OperationEnvelope, PreparedState

from bridge_plugin import registry
from bridge_plugin.effects import bridge_effects


def connect(host: Host, prepared: PreparedState | None, op: str) -> ConnectRequest:
    """One valid ConnectNetwork on a fresh host; the suite cleans up the scope and step
    it names (a coordinator's attachment id and step name)."""
    envelope = OperationEnvelope(op, Hook.CONNECT_NETWORK, "attachment-1", "net", 1, 1)
    return ConnectRequest(
        envelope, host.sandbox, json.dumps({"mtu": 1500}), interface_names={"interface": "net9"}
    )


TARGET = Target(
    name="bridge",  # what GetInfo must name
    socket="bridge.sock",
    registry=registry,
    effects=bridge_effects,
    connect=connect,
    interface="net9",  # where the foreign-object check plants a link that is not ours
)


@pytest.mark.parametrize("check", list(CHECKS))
def test_conformance(check: str, lab_factory: LabFactory, tmp_path: Path) -> None:
    try:
        CHECKS[check](TARGET, tmp_path, lab_factory)
    except NotApplicable as exc:
        pytest.skip(f"{check} does not apply: {exc}")
