"""``doctor``'s versions line: one per service, the store format, the effect format and the
topology config versions (docs/file-formats.md, "Versions").

The running service's word (GetInfo) when a socket answers, else the journal's copy and
this build's; a journal this build cannot read is named by the journal check, and
nothing of it changes.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from labs import Node
from plugins.ctl import Exit
from plugins.sdk import EndpointInfo
from plugins.sdk.host import PluginCallError, PluginClient
from plugins.sdk.store import EFFECT_FORMAT, PLUGIN_JOURNAL, SCHEMA_VERSION

from .kit import LINKS, SERVICES, clone, ctl, state_files

STORE_READS = ",".join(map(str, PLUGIN_JOURNAL.readable))
EFFECTS_RUN = ",".join(map(str, PLUGIN_JOURNAL.effect_formats))


CONFIGS = {
    "networkplugin-bond": "bond/v1alpha1",
    LINKS: "vlan/v1alpha1, ipvlan/v1alpha1, macvlan/v1alpha1",
    "networkplugin-vf": "sriov-kernel/v1alpha1",
}
"""Each service's plugins' config schemas, in its registrations' (and sockets') order."""


def _versions(run: Any) -> dict[str, dict[str, str]]:
    rows = [c for c in run.json()["checks"] if c["check"] == "versions"]
    by_service = {r["service"]: r for r in rows}
    assert len(by_service) == len(rows), "one versions line per service"
    return by_service


def test_doctor_has_one_versions_line_per_service_down(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = clone(crashed, tmp_path)
    before = state_files(tmp_path)
    run = ctl(config, ["doctor", "-o", "json"], capsys)
    rows = _versions(run)
    assert set(rows) == set(SERVICES)
    for service, row in rows.items():
        assert (row["subject"], row["status"], row["detail"]) == (
            service,
            "ok",
            f"store format {SCHEMA_VERSION} (reads {STORE_READS}); effect format "
            f"{EFFECT_FORMAT} (journal holds {EFFECT_FORMAT}; executes {EFFECTS_RUN}); "
            f"topology config {CONFIGS[service]} (journal and this build: no socket answered)",
        )
    assert state_files(tmp_path) == before


def _ready_while_running(client: PluginClient, proc: subprocess.Popen[bytes]) -> EndpointInfo:
    """GetInfo once ready, within 60 s; a service that exits first fails at once, with its log."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return client.wait_ready(1)
        except PluginCallError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _, err = proc.communicate(timeout=60)
                pytest.fail(f"the service is not ready (exit {proc.returncode}):\n{err.decode()}")


def test_doctor_reads_the_running_services_versions_from_getinfo(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = clone(crashed, tmp_path)
    service_config = tmp_path / LINKS / "service.yaml"
    socket_dir = Path(yaml.safe_load(service_config.read_text())["socketDir"])
    socket_dir.parent.mkdir(mode=0o700)
    proc = subprocess.Popen(
        [sys.executable, "-m", "plugins.services", LINKS, "--config", str(service_config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        sockets = ("vlan.sock", "ipvlan.sock", "macvlan.sock")
        infos = []
        for name in sockets:
            with PluginClient(socket_dir / name, "a-token", timeout=30) as client:
                infos.append(_ready_while_running(client, proc))
        run = ctl(config, ["doctor", "-o", "json"], capsys)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        shutil.rmtree(socket_dir.parent, ignore_errors=True)
    row = _versions(run)[LINKS]
    configs = ", ".join(info.topology_config_version for info in infos)
    assert configs == CONFIGS[LINKS], err
    assert (row["status"], row["detail"]) == (
        "ok",
        f"store format {SCHEMA_VERSION} (reads {STORE_READS}); effect format {EFFECT_FORMAT} "
        f"(journal holds {EFFECT_FORMAT}; executes {EFFECTS_RUN}); topology config {configs} "
        "(GetInfo)",
    )


def test_doctor_names_a_newer_journal_and_changes_nothing(
    crashed: Node, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = clone(crashed, tmp_path)
    db = tmp_path / LINKS / "state" / "journal.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    conn.commit()
    conn.close()
    before = state_files(tmp_path)
    run = ctl(config, ["doctor", "-o", "json"], capsys)
    assert run.code == Exit.FINDINGS, run
    (journal,) = [
        c for c in run.json()["checks"] if c["service"] == LINKS and c["check"] == "journal"
    ]
    assert (journal["status"], journal["detail"]) == (
        "fail",
        f"store format {SCHEMA_VERSION + 1} (newer than this build; this build reads store "
        f"format {STORE_READS})",
    )
    row = _versions(run)[LINKS]
    assert row["status"] == "warn"
    assert row["detail"].startswith("store format - "), row
    assert state_files(tmp_path) == before
