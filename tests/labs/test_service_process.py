"""labs.ServiceProcess: a service that dies while starting fails the start at once."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from labs import PROJECT_SERVICES, ServiceProcess

# Far beyond the suite's per-test timeout (120 s): a start that waited for its deadline
# instead of noticing the exit would fail by timing out, not pass.
START_DEADLINE_S = 3600


def test_a_service_that_exits_while_starting_fails_the_start_at_once(tmp_path: Path) -> None:
    links = next(spec for spec in PROJECT_SERVICES if spec.name == "networkplugin-links")
    with tempfile.TemporaryDirectory(prefix="np-", dir="/tmp") as short:  # sun_path is short
        missing = Path(short) / "no-kernel.sock"
        service = ServiceProcess(
            links.name,
            links.command,
            tmp_path / "links",
            Path(short) / "sock",
            f"kernel+unix://{missing}",  # refused at startup: exit status 2
            links.sockets,
        )
        with pytest.raises(RuntimeError, match="exited with status 2 before it was ready"):
            service.start(timeout=START_DEADLINE_S)
    assert f"{missing}: No such file or directory" in service.log.read_text()
