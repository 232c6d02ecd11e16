"""SIGKILL of a real service process at chosen crash points, over its real socket."""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from labs import ServiceProcess
from plugins.sdk import CleanupStatus
from plugins.sdk.host import PluginCallError, PluginClient
from plugins.sdk.runner import CrashPoint

from . import node as n
from .test_crash_points import LIFECYCLE, Recorded, reference
from .toy import ToyKernel

# One point per kind of boundary, across all four hooks (by name: as a launcher arms a
# service process).
CHOSEN = tuple(
    CrashPoint.parse(name)
    for name in (
        "NodePrepare/op-prepare/reserve/kernel#1.create.after",
        "ConnectNetwork/op-connect/-/intent.after-commit",
        "ConnectNetwork/op-connect/create-peer/kernel#1.create.after",
        "ConnectNetwork/op-connect/link/advance.after-commit",
        "ConnectNetwork/op-connect/-/response.before-commit",
        "RemoveNetwork/op-remove/op-connect:set-state/undoing.after-commit",  # with the fence
        "RemoveNetwork/op-remove/op-connect:create-object/kernel#1.delete.after",
        "NodeUnprepare/op-unprepare/-/cleanup.before-commit",  # with op-prepare's finish
    )
)


def call(client: PluginClient, step: str) -> Any:
    calls: dict[str, Callable[[], Any]] = {
        "prepare": lambda: client.node_prepare(n.prepare()),
        "connect": lambda: client.connect_network(n.connect()),
        "remove": lambda: client.remove_network(n.remove()),
        "unprepare": lambda: client.node_unprepare(n.unprepare()),
    }
    return calls[step]()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return reference(tmp_path_factory.mktemp("reference"))


def test_chosen_points_exist(recorded: Recorded) -> None:
    assert set(CHOSEN) <= set(recorded[0])


@pytest.mark.parametrize("point", CHOSEN, ids=str)
def test_sigkill_at_point_then_restart_and_retry(
    point: CrashPoint, recorded: Recorded, tmp_path: Path
) -> None:
    _, responses, initial, mutations = recorded
    toy_file = tmp_path / "toy.json"
    ToyKernel(toy_file)  # the "kernel" outlives every service process
    sockets = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))  # socket paths are short
    service = ServiceProcess(
        "toy",
        ["tests.runner.toy_service"],
        tmp_path,
        sockets / "sock",
        f"toy://{toy_file}",
        ["toy.sock"],
    )
    try:
        service.start(crash_at=point)
        client = service.client("toy.sock")
        crashed_in, error = None, None
        for i, step in enumerate(LIFECYCLE):
            try:
                call(client, step)
            except PluginCallError as exc:  # the process died under the call
                crashed_in, error = i, exc
                break
        client.close()
        assert crashed_in is not None, f"{point} was never reached"
        assert error is not None
        assert error.code == "UNAVAILABLE", error
        assert service.wait_exit() == -signal.SIGKILL
        service.start()
        client = service.client("toy.sock")
        for step, expected in zip(LIFECYCLE[crashed_in:], responses[crashed_in:], strict=True):
            result = call(client, step)
            if step in ("prepare", "connect"):
                assert result == expected, point
            else:
                assert result.status is CleanupStatus.CLEANED, (point, result)
        client.close()
        assert service.stop() == 0
        toy = ToyKernel(toy_file)
        assert toy.observable() == initial
        extra = {k: v for k, v in toy.mutations().items() if v > mutations.get(k, 0)}
        assert not extra, extra
    finally:
        service.kill()
        shutil.rmtree(sockets, ignore_errors=True)
