"""``labs.HostLab``: a machine's kernel through an agent that a command starts (over SSH
on the SR-IOV lab's hosts; here the command starts it on this machine, as root)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekernel.client import FakeKernelProtocolError
from harness.pytest_plugin import require_lab
from labs import AgentUnavailable, HostLab
from labs.netns import missing
from plugins.kernel.linux.netns import delete_namespace

pytestmark = pytest.mark.netns

AGENT = [sys.executable, "-m", "labs.kernel_agent", "--stdio"]


def pins() -> set[Path]:
    """The agents' namespace pin directories on this machine (``labs.kernel_agent``)."""
    return set(Path("/run").glob("dranp-vm-*"))


@pytest.fixture(scope="module")
def netns_possible(request: pytest.FixtureRequest) -> None:
    require_lab(request.config, "netns", missing())


@pytest.fixture
def host(netns_possible: None) -> Iterator[HostLab]:
    lab = HostLab("this machine", AGENT, pfs=())
    try:
        yield lab
    finally:
        lab.close()


def test_the_agent_serves_this_machines_kernel_and_a_session(host: HostLab) -> None:
    assert host.kernel.release() == os.uname().release
    session = host.session(7)
    try:
        node = session.kernel.host_namespace()
        names = {link.name for link in session.kernel.list_links(node)}
        assert {"enp3s0f0", "enp3s0f1", "enp3s0f2"} <= names
    finally:
        session.close()
    assert host.sessions == []


def test_closing_leaves_no_pin_and_no_process(netns_possible: None) -> None:
    before = pins()
    lab = HostLab("this machine", AGENT, pfs=())
    assert len(pins() - before) == 1, "the agent pins its root namespace while it serves"
    lab.close()
    assert lab.process.poll() == 0, "the agent exits 0 when its stdin ends"
    assert pins() == before, "the agent left its pins behind"
    assert not lab.directory.exists()


def test_an_agent_that_never_starts_names_the_host_and_shows_its_stderr(
    netns_possible: None,
) -> None:
    command = ["sh", "-c", "echo 'ssh: connect to host 10.0.0.9 port 22: No route' >&2; exit 255"]
    with pytest.raises(AgentUnavailable, match=r"nic-a: the kernel agent did not start") as raised:
        HostLab("nic-a", command, pfs=())
    assert "exited with 255" in str(raised.value)
    assert "No route" in str(raised.value), "the stderr tail is in the error"


def test_a_command_that_does_not_exist_is_one_error_naming_it(netns_possible: None) -> None:
    with pytest.raises(AgentUnavailable, match=r"nic-a: cannot run /nonexistent/ssh"):
        HostLab("nic-a", ["/nonexistent/ssh"], pfs=())


def _lab_pins() -> set[Path]:
    """Every namespace pin directory the agent and its sessions make on this machine."""
    return pins() | set(Path("/run").glob("dranp-lab-*"))


def test_an_agent_that_dies_is_reaped_by_close_which_names_the_session_it_lost(
    netns_possible: None,
) -> None:
    """A host's agent gone mid-run (SSH cut, host rebooted): close() still closes the
    relay, reaps the command and removes its files, then raises what it could not do,
    so the lab above it (SriovLab) goes on to tear down and power off (seen: an
    emulated host left running for half an hour when this raised midway)."""
    before = _lab_pins()
    lab = HostLab("this machine", AGENT, pfs=())
    try:
        lab.session(7)
        os.killpg(lab.process.pid, signal.SIGKILL)
        lab.process.wait(timeout=30)
        with pytest.raises(FakeKernelProtocolError):
            lab.close()
        assert lab.sessions == []
        assert lab.relay is None
        assert not lab.directory.exists()
        lab.close()  # idempotent once closed
    finally:
        # A killed agent cannot remove its namespace pins; the test does.
        for directory in _lab_pins() - before:
            for pin in sorted(directory.iterdir()):
                delete_namespace(pin, missing_ok=True)
            directory.rmdir()
