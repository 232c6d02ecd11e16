"""The guest's agent revives udev when udev leaves new VFs unnamed and answers no ping
(labs._guest.revive_udev), once a minute at most, and says which it was in its log.

The commands are the guest's, so they are planted here: ``subprocess.run`` is replaced
by a recorder answering the ping as a live or a dead udev would.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from labs import _guest


class _Commands:
    def __init__(self, ping_code: int) -> None:
        self.ping_code = ping_code
        self.ran: list[list[str]] = []

    def __call__(self, command: list[str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        self.ran.append(command)
        code = self.ping_code if command[:3] == ["udevadm", "control", "--ping"] else 0
        return subprocess.CompletedProcess(command, code, b"", b"")


@pytest.mark.parametrize(("ping_code", "restarted"), [(0, False), (1, True)])
def test_udev_is_started_again_only_when_it_answers_no_ping(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ping_code: int,
    restarted: bool,
) -> None:
    commands = _Commands(ping_code)
    monkeypatch.setattr(_guest.subprocess, "run", commands)
    monkeypatch.setattr(_guest, "_udev_checked", [-_guest.UDEV_CHECK_EVERY_S])
    _guest.revive_udev()
    assert commands.ran[0][:3] == ["udevadm", "control", "--ping"]
    assert (["/lib/systemd/systemd-udevd", "--daemon"] in commands.ran) == restarted
    log = capsys.readouterr().err
    assert ("started again" in log) == restarted
    assert ("answers a ping" in log) == (not restarted)
    _guest.revive_udev()  # within the minute: not asked again
    assert len(commands.ran) == (2 if restarted else 1)
