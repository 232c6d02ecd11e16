"""A service tells its manager READY=1 once it is ready, and STOPPING=1 when it stops.

The protocol (``sd_notify``) and then a real toy service process under a manager's
socket of the test's own: READY comes only once GetInfo says ready (after recovery),
with a STATUS naming its sockets; a journal that lost acknowledged commits is served
all the same, so READY comes with a STATUS saying why it is not ready; SIGTERM sends
STOPPING. The test kit's own listener (``labs._readiness``) is checked on a process
that exits without a word.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labs import ReadyListener
from plugins.sdk.systemd import NOTIFY_SOCKET_ENV, notify, notify_address

from ..runner import node as n
from ..runner.test_journal_loss_service import ToyDeployment, every_file

DEADLINE_S = 60.0


class Manager:
    """The manager's end: a datagram socket whose messages the test reads in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))

    def next(self, timeout: float = DEADLINE_S) -> dict[str, str]:
        self.sock.settimeout(timeout)
        message = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in message.split("\n"))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def manager() -> Iterator[Manager]:
    short = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))  # sun_path is 108 bytes
    manager = Manager(short / "notify")
    try:
        yield manager
    finally:
        manager.close()
        shutil.rmtree(short, ignore_errors=True)


def test_without_a_manager_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NOTIFY_SOCKET_ENV, raising=False)
    assert notify("READY=1") is False


def test_a_path_gets_every_assignment_in_one_datagram(
    manager: Manager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NOTIFY_SOCKET_ENV, str(manager.path))
    assert notify("READY=1", "STATUS=serving a, b") is True
    assert manager.next(5) == {"READY": "1", "STATUS": "serving a, b"}


def test_an_abstract_address_is_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"dranp-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        monkeypatch.setenv(NOTIFY_SOCKET_ENV, f"@{name}")
        assert notify("STOPPING=1") is True
        sock.settimeout(5)
        assert sock.recv(4096) == b"STOPPING=1"


@pytest.mark.parametrize("value", ["vsock:2:1234", "relative/notify"])
def test_an_address_not_supported_is_refused_without_raising(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert notify_address(value) is None
    monkeypatch.setenv(NOTIFY_SOCKET_ENV, value)
    assert notify("READY=1") is False


def test_a_manager_that_is_gone_is_logged_once_and_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from plugins.sdk import systemd

    monkeypatch.setattr(systemd, "_warned", set())
    monkeypatch.setenv(NOTIFY_SOCKET_ENV, str(tmp_path / "nobody-listens"))
    with caplog.at_level(logging.WARNING, logger="plugins.sdk.systemd"):
        assert notify("READY=1") is False
        assert notify("STOPPING=1") is False
    warnings = [r for r in caplog.records if r.name == "plugins.sdk.systemd"]
    assert len(warnings) == 1
    assert "nobody-listens" in warnings[0].getMessage()


def start_under(lab: ToyDeployment, manager: Manager) -> subprocess.Popen[bytes]:
    """The toy service's own command, as a ``Type=notify`` unit would run it."""
    env = {**os.environ, NOTIFY_SOCKET_ENV: str(manager.path)}
    command = [sys.executable, "-m", *lab.service.command, "--config", str(lab.service.config)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(DEADLINE_S)


def test_ready_only_once_serving_and_stopping_on_sigterm(
    lab: ToyDeployment, manager: Manager
) -> None:
    proc = start_under(lab, manager)
    try:
        ready = manager.next()
        assert ready["READY"] == "1"
        assert ready["STATUS"] == "serving toy.sock"  # as its log line says
        with lab.client() as client:
            # Asked at once: a READY said before the socket serves fails here (UNAVAILABLE).
            assert client.get_info().ready
            client.node_prepare(n.prepare())
        proc.send_signal(signal.SIGTERM)
        assert manager.next() == {"STOPPING": "1"}
        assert proc.wait(DEADLINE_S) == 0
    finally:
        stop(proc)


def test_a_journal_that_lost_commits_is_ready_with_a_status_saying_why(
    lab: ToyDeployment, manager: Manager
) -> None:
    lab.acknowledge_then_sigkill()
    every_file(lab)
    proc = start_under(lab, manager)
    try:
        ready = manager.next()
        assert ready["READY"] == "1"  # started: it answers, for the operator to look
        assert ready["STATUS"].startswith("not ready: "), ready
        with lab.client() as client:
            assert not client.get_info().ready
    finally:
        stop(proc)


def test_the_kits_listener_ends_when_the_process_exits_without_a_word() -> None:
    with ReadyListener() as listener:
        proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
        try:
            assert listener.wait(proc, DEADLINE_S) == "exited"
        finally:
            proc.wait(DEADLINE_S)


def test_the_kits_listener_hears_ready_and_times_out_otherwise() -> None:
    with ReadyListener() as listener:
        script = (
            "import sys, time\n"
            "from plugins.sdk.systemd import notify\n"
            "notify('STATUS=starting'); notify('READY=1'); time.sleep(60)\n"
        )
        env = {**os.environ, **listener.env()}
        proc = subprocess.Popen([sys.executable, "-c", script], env=env)
        try:
            assert listener.wait(proc, DEADLINE_S) == "ready"
            assert listener.wait(proc, 0.2) == "timeout"  # nothing more said, still running
        finally:
            proc.kill()
            proc.wait(DEADLINE_S)
