"""Acceptance (issue 14, item 1): after a SIGKILL mid-connect, ``reconcile --dry-run``
lists exactly the leaked objects, ``--apply`` removes them, a second dry-run is empty.

Real service processes on the fake kernel server; the links service is killed inside
ConnectNetwork after the macvlan child exists (once still under its temporary name,
once already carrying its marker). Apply runs through the runner in this process when
the service is down, and over the service's socket once it is back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.invariants import leaks
from plugins.ctl import Exit

from .kit import LINKS, crashed_connect, ctl, files_of, process_node, write_node_config

CONNECT = "ConnectNetwork/att-1:secondary:ConnectNetwork:g1/create-child"
UNMARKED = f"{CONNECT}/kernel#1.create_link.after"  # born under its temporary name
MARKED = f"{CONNECT}/kernel#2.set_link.after"  # carries the marker as its alias


def _leaked_links(node: Any) -> list[tuple[str, str]]:
    """The links the crash left in the pod, as the fake kernel sees them (name, kind)."""
    pod = next(ns for ns in node.kernel.namespaces() if ns.path.endswith("/pod-a"))
    return sorted(
        (link.name, link.kind) for link in node.kernel.list_links(pod) if link.name != "eth0"
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("point", "restart"),
    [(UNMARKED, False), (MARKED, False), (MARKED, True)],
    ids=["unmarked-service-down", "marked-service-down", "marked-service-restarted"],
)
def test_sigkill_mid_connect_dry_run_apply_dry_run(
    point: str, restart: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with process_node(tmp_path / "node") as node:
        crashed_connect(node, point)
        links = node.processes.processes[LINKS]
        if restart:
            links.start()  # recovers by itself: the connect is Failed, its child still there
        config = write_node_config(node, tmp_path / "node.yaml")
        leaked = _leaked_links(node)
        assert len(leaked) == 1, leaked  # the macvlan child, and nothing else

        state = links.root / "state"
        # A running service's -shm is its wal-index: a reader's read marks go there.
        before = {k: v for k, v in files_of(state).items() if not k.endswith("-shm")}
        dry = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
        assert dry.code == Exit.FINDINGS, dry
        assert {k: v for k, v in files_of(state).items() if not k.endswith("-shm")} == before
        found = dry.json()["findings"]
        assert [(f["category"], f["object"].split(" ")[:2]) for f in found] == [
            ("leak", [leaked[0][1], leaked[0][0]])
        ], found
        assert found[0]["service"] == LINKS
        assert found[0]["scope"] == "att-1"
        assert found[0]["action"] == "RemoveNetwork att-1"
        journal = "Failed/Applying" if restart else "Running/Applying"
        assert found[0]["state"] == journal

        table = ctl(config, ["reconcile", "--dry-run"], capsys)
        assert table.code == Exit.FINDINGS
        assert f"digest: {dry.json()['digest']}" in table.out
        assert "leak" in table.out.splitlines()[1]

        applied = ctl(
            config, ["reconcile", "--apply", "--digest", dry.json()["digest"], "-o", "json"], capsys
        )
        assert applied.code == Exit.OK, applied
        cleanups = applied.json()["cleanups"]
        assert [(c["target"], c["status"], c["via"]) for c in cleanups] == [
            (found[0]["operation"], "CLEANED", "socket" if restart else "runner")
        ], cleanups
        assert applied.json()["remaining"] == []
        assert _leaked_links(node) == []
        assert leaks(node.kernel) == []

        again = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
        assert again.code == Exit.OK, again
        assert again.json()["findings"] == []

        # The cleanup is journaled like any operation: ops shows it, Cleaned.
        ops = ctl(config, ["ops", "-o", "json"], capsys).json()["operations"]
        mine = [o for o in ops if o["operation"] == cleanups[0]["operation"]]
        assert [(o["hook"], o["state"], o["cleanup"]) for o in mine] == [
            ("RemoveNetwork", "Cleaned", "CLEANED")
        ]
        target = next(o for o in ops if o["operation"] == found[0]["operation"])
        assert target["state"] == "Cleaned"
        if restart:
            # Every service up: every socket answers as its plugin, ready; journals intact.
            doctor = ctl(config, ["doctor", "-o", "json"], capsys)
            assert doctor.code == Exit.OK, doctor
            checks = doctor.json()["checks"]
            assert {c["status"] for c in checks} == {"ok"}, checks
            assert sum(c["check"] == "socket" for c in checks) == 5
        else:
            # The service starts (ready: recovered) on the journal the CLI wrote, and the
            # node still agrees with it.
            links.start()
            live = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
            assert (live.code, live.json()["findings"]) == (Exit.OK, [])


@pytest.mark.timeout(300)
def test_apply_refuses_a_stale_or_missing_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with process_node(tmp_path / "node") as node:
        crashed_connect(node, MARKED)
        links = node.processes.processes[LINKS]
        config = write_node_config(node, tmp_path / "node.yaml")
        dry = ctl(config, ["reconcile", "--dry-run", "-o", "json"], capsys)
        assert dry.code == Exit.FINDINGS
        state = links.root / "state"

        before = files_of(state)
        missing = ctl(config, ["reconcile", "--apply"], capsys)
        assert missing.code == Exit.REFUSED
        assert missing.err.count("\n") == 1
        assert "--digest" in missing.err
        assert files_of(state) == before

        # The service comes back and recovers by itself: the connect is now Failed, not
        # Running, so the dry-run's digest no longer describes the node.
        links.start()
        links.stop()
        before = files_of(state)
        stale = ctl(config, ["reconcile", "--apply", "--digest", dry.json()["digest"]], capsys)
        assert stale.code == Exit.REFUSED, stale
        assert stale.err.count("\n") == 1
        assert "changed since that dry-run" in stale.err
        assert files_of(state) == before
        assert len(_leaked_links(node)) == 1
