"""The coordinator program checks who answers on each plugin socket (issue 26, item 3).

At start, a socket that serves another plugin than the config maps to it, or refuses the
configured token, is refused in one line with exit status 2 and nothing created. While
it runs, a plugin service that comes back as another plugin (here: the macvlan socket
replaced by the vlan endpoint across a restart of the link service) makes every call to
it fail ``UNAVAILABLE`` with the reason before anything is sent, and the application it
failed is removed (``NOT_RUN`` receipts), not left ``removing`` forever.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from harness.coordinator_process import CoordinatorRig
from plugins.coordinator import (
    CoordinatorCallError,
    CoordinatorConfig,
    identity_problem,
    pinned_descriptors,
    plugin_clients,
)
from plugins.sdk import EndpointInfo
from plugins.sdk.service import StartupRefused

from .programs import MACVLAN, PROG, client, run_program, status, write_config, write_token

PINNED = pinned_descriptors()


def endpoint_info(name: str) -> EndpointInfo:
    descriptor = PINNED[name]
    return EndpointInfo(
        name,
        descriptor.contract_version,
        tuple(str(k) for k in descriptor.step_kinds),
        descriptor.contract_digest,
        "sha256:artifact",
        f"{name}/v1alpha1",
        True,
        "{}",
    )


def test_the_identity_check_compares_name_and_contract_digest() -> None:
    sock = Path("/run/x/macvlan.sock")
    macvlan = PINNED["macvlan"]
    assert identity_problem("macvlan", sock, endpoint_info("macvlan"), macvlan) is None
    assert identity_problem("macvlan", sock, endpoint_info("vlan"), macvlan) == (
        f"{sock} serves plugin 'vlan', not 'macvlan'"
    )
    other = replace(endpoint_info("macvlan"), contract_digest="sha256:other")
    assert identity_problem("macvlan", sock, other, macvlan) == (
        f"{sock} serves plugin 'macvlan' with contract digest sha256:other, not the pinned "
        f"{macvlan.contract_digest} (an artifact pinned to another contract)"
    )


def test_a_plugin_no_pinned_contract_names_is_refused(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        plugins={
            "macvlan": {"socket": "macvlan.sock", "tokenFile": "macvlan.token"},
            "macvlan2": {"socket": "macvlan2.sock", "tokenFile": "macvlan.token"},
        },
    )
    with pytest.raises(StartupRefused) as refused:
        plugin_clients(CoordinatorConfig.load(path), PINNED)
    assert refused.value.message == (
        f"coordinator config {path}: $.plugins: no contract this artifact pins is for "
        f"'macvlan2' (pinned: {', '.join(sorted(PINNED))})"
    )


@pytest.mark.parametrize("wrong", ["plugin", "token"])
def test_a_socket_that_is_not_the_configured_plugin_is_refused_at_start(
    rig: CoordinatorRig, tmp_path: Path, wrong: str
) -> None:
    """The issue's socket map (``macvlan`` -> ``vlan.sock``), and a token the plugin refuses."""
    links = rig.processes.of("macvlan")
    socket = links.socket_dir / ("vlan.sock" if wrong == "plugin" else "macvlan.sock")
    token = links.root / "token" if wrong == "plugin" else write_token(tmp_path / "t", "wrong")
    write_token(tmp_path / "token")
    config = write_config(
        tmp_path, plugins={"macvlan": {"socket": str(socket), "tokenFile": str(token)}}
    )
    done = run_program("--config", str(config))
    problem = {
        "plugin": f"$.plugins.macvlan.socket: {socket} serves plugin 'vlan', not 'macvlan'",
        "token": f"$.plugins.macvlan.tokenFile: {socket} refuses the token in {token}",
    }[wrong]
    assert (done.returncode, done.stderr.splitlines()) == (
        2,
        [f"{PROG}: coordinator config {config}: {problem}"],
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["coordinator.yaml", "token", *(["t"] if wrong == "token" else [])]
    )


@contextmanager
def macvlan_socket_serving_vlan(rig: CoordinatorRig) -> Iterator[Path]:
    """The link service restarted (the coordinator's connection ends), its macvlan socket
    then replaced by a link to its vlan socket; all put back (and restarted) after."""
    links = rig.processes.of("macvlan")
    socket = links.socket_dir / "macvlan.sock"
    aside = links.socket_dir / "macvlan-aside.sock"
    links.stop()
    links.start()
    socket.rename(aside)
    os.symlink("vlan.sock", socket)
    try:
        yield socket
    finally:
        socket.unlink()
        aside.rename(socket)
        links.stop()
        links.start()


def test_a_plugin_that_comes_back_as_another_is_refused_and_its_application_removed(
    rig: CoordinatorRig,
) -> None:
    with macvlan_socket_serving_vlan(rig) as socket, client(rig) as c:
        for attempt in (1, 2):  # the check runs at every call until the socket is right
            with pytest.raises(CoordinatorCallError) as refused:
                c.apply("att-swap", "claim-swap", MACVLAN, rig.sandbox())
            assert (refused.value.code, refused.value.message) == (
                "FAILED_PRECONDITION",
                f"step secondary: NodePrepare failed: UNAVAILABLE: plugin macvlan: {socket} "
                "serves plugin 'vlan', not 'macvlan'",
            ), attempt
        (app,) = [a for a in c.status().applications if a.attachment == "att-swap"]
        assert app.state == "failed"
        assert c.status().open_calls == ()  # nothing was journaled for a call never sent

        removed = c.remove("att-swap")
        assert removed.state == "removed", removed
        assert [(r.step, r.hook, r.status, r.detail) for r in removed.receipts] == [
            ("secondary", "RemoveNetwork", "NOT_RUN", "never connected: nothing to remove"),
            ("secondary", "NodeUnprepare", "NOT_RUN", "never prepared: nothing to unprepare"),
        ]
        now = c.status()
        (app,) = [a for a in now.applications if a.attachment == "att-swap"]
        assert (app.state, app.error) == ("removed", "")
        assert (now.open_calls, now.claims) == ((), ())
    # The socket put back and the service restarted: checked again, and right.
    with client(rig) as c:
        assert c.apply("att-back", "claim-back", MACVLAN, rig.sandbox()).state == "applied"
        assert c.remove("att-back").state == "removed"
    assert status(rig).open_calls == ()
