"""Write the golden journals of a release: ``tests/data/journals/<tag>/<service>/``.

    uv run --locked python -m tests.upgrade.make_golden_journals [TAG [SERVICE ...]]

The release is built from its tag (``harness.upgrade.previous_release``) and each
service's v0.1.0 program driven, on the release's own fake kernel, into every state an
upgrade can meet (``harness.upgrade.leave_every_state``, the service's
``harness.upgrade.LEAVING``): a lifecycle run to its end, a connect that succeeded, a
remove quarantined, a connect SIGKILLed at a kernel effect left ``Applying``
(networkplugin-links: right after its macvlan was created; networkplugin-vf: right after
its VF moved into the pod, its settings applied by the prepare; networkplugin-bond:
right after the bond's first VF was enslaved). The service's journal is copied as the
kill left it (``journal.db`` with its ``-wal`` and ``-shm``: the in-flight commits are
in the WAL only), with the kernel as it was then (``kernel.json``, the fake kernel's
snapshot), and ``records.json`` gets the service's entry: its plugin, topology, crash
point, the scope quarantined (and those it holds) and every operation as the file holds it.
The release's lab file (``lab.yaml``, the host its fake kernel described) is kept beside
them: a later build's kernel starts from it, whatever its own lab files say by then.

A release's golden journals are written once: a service whose directory exists is
never written again (named: refused, exit 2, nothing changed; not named: kept). Every
later build must open and clean them (tests/upgrade/test_golden_journals.py).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.upgrade import (
    LEAVING,
    PREVIOUS_RELEASE,
    Leaving,
    journal_records,
    leave_every_state,
    old_process,
    previous_release,
    previous_release_node,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "journals"
JOURNAL_FILES = ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id")
MANIFEST = "records.json"
LAB = "lab.yaml"


def ending(suffix: str) -> Callable[[list[str]], str]:
    """The crash point among the reference connect's that ends with ``suffix``."""

    def pick(points: list[str]) -> str:
        found = [p for p in points if p.endswith(suffix)]
        if not found:
            raise SystemExit(f"no crash point ends with {suffix!r}; the connect's: {points}")
        return found[0]

    return pick


def read_manifest(tag: str) -> dict[str, Any]:
    path = DATA / tag / MANIFEST
    if not path.exists():
        return {"release": tag, "services": {}}
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def write_service(tag: str, leaving: Leaving, manifest: dict[str, Any]) -> None:
    release = previous_release(tag)
    out = DATA / tag / leaving.service
    with (
        tempfile.TemporaryDirectory(prefix="golden-") as tmp,
        previous_release_node(release, Path(tmp) / "node", leaving.specs) as node,
    ):
        state = old_process(node, leaving.service).root / "state"
        left = leave_every_state(node, Path(tmp) / "trace", ending(leaving.in_flight_at), leaving)
        kernel = node.kernel.snapshot()
        staging = DATA / tag / f".{leaving.service}.new"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in JOURNAL_FILES:
            shutil.copyfile(state / name, staging / name)
        (staging / "kernel.json").write_text(json.dumps(kernel, indent=1, sort_keys=True) + "\n")
        records = [r.as_json() for r in journal_records(staging)]
        staging.rename(out)  # a service's directory appears whole or not at all
    manifest["release"], manifest["commit"] = tag, release.commit
    if not (DATA / tag / LAB).exists():  # the host its kernel was: the release's lab file
        shutil.copyfile(release.src / "fakekernel" / "labs" / "default.yaml", DATA / tag / LAB)
    manifest["lab"] = LAB
    manifest["services"][leaving.service] = {
        "plugin": leaving.plugin,
        "topology": leaving.topology,
        "crash_point": left.point,
        "quarantined_phase": leaving.quarantined_phase,
        "quarantined_scope": leaving.quarantined_scope,
        "held_scopes": list(leaving.held_scopes),
        "kernel": "kernel.json",
        "records": records,
    }
    print(f"{out}: {len(records)} records, killed at {left.point}")


def main(argv: list[str]) -> int:
    tag = argv[0] if argv else PREVIOUS_RELEASE
    named = argv[1:]
    unknown = [s for s in named if s not in LEAVING]
    if unknown:
        print(
            f"no such service: {', '.join(unknown)} (have: {', '.join(LEAVING)})", file=sys.stderr
        )
        return 2
    written = [s for s in named if (DATA / tag / s).exists()]
    if written:
        print(
            f"{', '.join(str(DATA / tag / s) for s in written)} exists: a release's golden "
            "journals are written once (remove the directory to write it again)",
            file=sys.stderr,
        )
        return 2
    todo = [s for s in (named or LEAVING) if not (DATA / tag / s).exists()]
    for service in sorted(set(named or LEAVING) - set(todo)):
        print(f"{DATA / tag / service}: kept (written once)")
    manifest = read_manifest(tag)
    for service in todo:
        write_service(tag, LEAVING[service], manifest)
        # After each service: a later one failing keeps the ones written.
        (DATA / tag / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
