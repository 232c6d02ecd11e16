"""The coordinator program is as operable as the services (issue 26, item 9): the standard
gRPC health service on its socket (not serving until recovery ran), ``--version``,
``logFormat``/``--log-format`` with one line per apply and remove naming the attachment,
claim and sandbox, a last ``stopped`` line, opt-in Prometheus metrics, and the state
directory rules of the services (a missing parent or a volatile file system refused,
``--init`` to create a new one)."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness.coordinator_process import CoordinatorRig
from plugins.coordinator import (
    Allocator,
    CoordinatorCallError,
    CoordinatorClient,
    CoordinatorConfig,
    CoordinatorJournal,
    CoordinatorServer,
    CoordinatorService,
)
from plugins.sdk.service import package_version

from .programs import MACVLAN, PROG, REPO, client, run_program, write_config, write_token
from .support import inventory, policies

SERVICE = "coordinator.v1alpha1.Coordinator"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
DEADLINE_S = 60.0


def health(socket: Path, service: str = "") -> int:
    """One health Check as a probe makes it: no token."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=DEADLINE_S
        )
    return int(response.status)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path, for a socket (108 bytes at most)."""
    with tempfile.TemporaryDirectory(prefix="co-", dir="/tmp") as d:
        yield Path(d)


def test_health_is_not_serving_until_recovery_ran_nor_with_a_damaged_journal(
    short_dir: Path,
) -> None:
    journal = CoordinatorJournal(short_dir / "state")
    services = {
        "intact": CoordinatorService(journal, {}, {}, Allocator(inventory(), policies())),
        "damaged": CoordinatorService(
            None, {}, {}, Allocator(inventory(), policies()), fault="journal.id is gone"
        ),
    }
    try:
        for name, service in services.items():
            socket = short_dir / f"{name}.sock.d" / "coordinator.sock"
            server = CoordinatorServer(socket, "token", service)
            server.start()
            try:
                assert [health(socket), health(socket, SERVICE)] == [NOT_SERVING] * 2
                service.recover()
                up = SERVING if name == "intact" else NOT_SERVING
                assert [health(socket), health(socket, SERVICE)] == [up] * 2, name
                with pytest.raises(grpc.RpcError) as unknown:
                    health(socket, "networkplugin.v1alpha1.NetworkPlugin")
                assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
            finally:
                server.stop(None)
    finally:
        journal.close()


def test_the_program_serves_health_on_its_socket(rig: CoordinatorRig) -> None:
    assert [health(rig.program.socket), health(rig.program.socket, SERVICE)] == [SERVING] * 2


def test_version() -> None:
    done = run_program("--version")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"{PROG} {package_version()}\n",
        "",
    )


def lines_after(log: Path, offset: int) -> list[dict[str, Any]]:
    """The JSON lines the program wrote to ``log`` after ``offset`` (each one object)."""
    with log.open("rb") as f:
        f.seek(offset)
        return [json.loads(line) for line in f.read().decode().splitlines()]


def test_json_lines_one_per_request_a_stop_line_and_metrics(
    rig: CoordinatorRig, tmp_path: Path
) -> None:
    program = rig.program
    program.stop()
    original = program.config.read_text()
    textfile = tmp_path / "coordinator.prom"
    document = yaml.safe_load(original)
    document.update(logFormat="json", metrics={"textfile": str(textfile)})
    program.config.write_text(yaml.safe_dump(document))
    program.log_level = "INFO"
    offset = program.log.stat().st_size
    try:
        program.start()
        with client(rig) as c:
            assert c.apply("att-m", "claim-m", MACVLAN, rig.sandbox()).state == "applied"
            assert c.remove("att-m").state == "removed"
            with pytest.raises(CoordinatorCallError, match="NOT_FOUND"):
                c.remove("att-nothing")
        assert program.stop() == 0
    finally:
        program.config.write_text(original)
        program.log_level = "WARNING"
        program.start()
    records = lines_after(program.log, offset)
    requests = [
        {k: r.get(k) for k in ("level", "message", "attachment", "claim", "sandbox", "outcome")}
        for r in records
        if r["message"].split(" ")[0] in ("apply", "remove")
    ]
    sandbox = rig.sandbox().sandbox_id
    assert requests == [
        {
            "level": "INFO",
            "message": "apply applied",
            "attachment": "att-m",
            "claim": "claim-m",
            "sandbox": sandbox,
            "outcome": "applied",
        },
        {
            "level": "INFO",
            "message": "remove removed",
            "attachment": "att-m",
            "claim": "claim-m",
            "sandbox": sandbox,
            "outcome": "removed",
        },
        {
            "level": "WARNING",
            "message": "remove NOT_FOUND",
            "attachment": "att-nothing",
            "claim": None,
            "sandbox": None,
            "outcome": "NOT_FOUND",
        },
    ]
    assert {k: records[-1].get(k) for k in ("level", "message", "exit")} == {
        "level": "INFO",
        "message": "stopped",
        "exit": 0,
    }
    # The textfile's last write is the stop's: every request counted.
    metrics = textfile.read_text()
    for sample in (
        'networkplugin_coordinator_request_duration_seconds_count{outcome="applied",'
        'request="apply"} 1.0',
        'networkplugin_coordinator_request_duration_seconds_count{outcome="removed",'
        'request="remove"} 1.0',
        'networkplugin_coordinator_request_duration_seconds_count{outcome="NOT_FOUND",'
        'request="remove"} 1.0',
        'networkplugin_coordinator_plugin_call_duration_seconds_count{hook="NodePrepare",'
        'outcome="OK",plugin="macvlan"} 1.0',
        'networkplugin_coordinator_plugin_call_duration_seconds_count{hook="NodeUnprepare",'
        'outcome="CLEANED",plugin="macvlan"} 1.0',
        "networkplugin_coordinator_open_calls 0.0",
    ):
        assert sample in metrics, sample
    assert 'networkplugin_coordinator_applications{state="removed"}' in metrics
    assert "networkplugin_coordinator_recovery_duration_seconds " in metrics


def refused(config: Path, *args: str) -> list[str]:
    done = run_program("--config", str(config), *args)
    assert done.returncode == 2, done.stderr
    return done.stderr.splitlines()


def plugin_of(rig: CoordinatorRig) -> dict[str, object]:
    """The rig's macvlan socket and token: a plugin that answers as itself."""
    links = rig.processes.of("macvlan")
    return {
        "macvlan": {
            "socket": str(links.socket_dir / "macvlan.sock"),
            "tokenFile": str(links.root / "token"),
        }
    }


@pytest.mark.parametrize(
    ("state_dir", "problem"),
    [
        (
            "typo/state",
            "its parent {base}/typo does not exist (a mistyped path would start an empty "
            "journal); start once with --init to create a new one",
        ),
        ("/dev/shm/{unique}/state", "on a tmpfs mounted at /dev/shm, which is emptied"),
        ("/run/{unique}/state", "under /run, which is emptied at every boot"),
    ],
)
def test_a_state_directory_that_would_start_an_empty_journal_is_refused(
    rig: CoordinatorRig, tmp_path: Path, state_dir: str, problem: str
) -> None:
    state = state_dir.format(unique=f"coordinator-test-{secrets.token_hex(8)}")
    write_token(tmp_path / "token")
    # The typo's case holds wherever the test's directory is (the rig keeps it on a tmpfs).
    volatile_ok = not state.startswith("/")
    config = write_config(
        tmp_path, stateDir=state, plugins=plugin_of(rig), allowVolatileStateDir=volatile_ok
    )
    path = tmp_path / state if not state.startswith("/") else Path(state)
    (line,) = refused(config)
    assert line.startswith(f"{PROG}: state directory {path}: "), line
    assert problem.format(base=tmp_path) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coordinator.yaml", "token"]
    assert not path.parent.exists()


def test_init_creates_a_new_state_directory(rig: CoordinatorRig, tmp_path: Path) -> None:
    token = write_token(tmp_path / "token")
    with tempfile.TemporaryDirectory(prefix="co-", dir="/tmp") as run:
        config = write_config(
            tmp_path,
            stateDir="new/state",
            socket=f"{run}/sock.d/coordinator.sock",
            plugins=plugin_of(rig),
            allowVolatileStateDir=True,  # the rig keeps the test's directory on a tmpfs
        )
        # As a context manager: its pipe is closed however the test ends.
        with subprocess.Popen(
            [sys.executable, "-m", "plugins.coordinator", "--config", str(config), "--init"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            try:
                with CoordinatorClient(
                    Path(run) / "sock.d" / "coordinator.sock", token.read_text()
                ) as c:
                    assert c.wait_ready(DEADLINE_S).ready
            finally:
                proc.send_signal(signal.SIGTERM)  # nothing, if it has already exited
                _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert (tmp_path / "new" / "state" / "journal.id").is_file()


def test_the_operability_keys_are_read(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        logFormat="json",
        metrics={"textfile": "m.prom", "textfileIntervalSeconds": 2},
        allowVolatileStateDir=True,
    )
    config = CoordinatorConfig.load(path)
    assert config.log_format == "json"
    assert config.metrics is not None
    assert (config.metrics.textfile, config.metrics.textfile_interval_seconds) == (
        tmp_path / "m.prom",
        2.0,
    )
    assert config.allow_volatile_state_dir
