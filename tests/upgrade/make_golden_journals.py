"""Write the golden journals of a release: ``tests/data/journals/<tag>/<service>/``.

    uv run --locked python -m tests.upgrade.make_golden_journals [TAG [SERVICE ...]]
    uv run --locked python -m tests.upgrade.make_golden_journals --kernel TAG SERVICE

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

``--kernel`` adds the kernel snapshot to a service written before snapshots were kept
(v0.1.0's networkplugin-links): the release is driven again the same way, and the
snapshot kept only if the journal it leaves holds exactly the written one's rows.

A release's golden journals are written once: a service whose directory exists is
never written again (named: refused, exit 2, nothing changed; not named: kept). Every
later build must open and clean them (tests/upgrade/test_golden_journals.py).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.upgrade import (
    LEAVING,
    PREVIOUS_RELEASE,
    Leaving,
    LeftBehind,
    Release,
    journal_copy,
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
KERNEL = "kernel.json"


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


@contextlib.contextmanager
def driven(tag: str, leaving: Leaving) -> Iterator[tuple[Release, LeftBehind, Path, Any]]:
    """The release's ``leaving.service`` driven into every state: the release, what it
    left, its state directory and its kernel's snapshot (the directory is gone after)."""
    release = previous_release(tag)
    with (
        tempfile.TemporaryDirectory(prefix="golden-") as tmp,
        previous_release_node(release, Path(tmp) / "node", leaving.specs) as node,
    ):
        state = old_process(node, leaving.service).root / "state"
        left = leave_every_state(node, Path(tmp) / "trace", ending(leaving.in_flight_at), leaving)
        yield release, left, state, node.kernel.snapshot()


def write_service(tag: str, leaving: Leaving, manifest: dict[str, Any]) -> None:
    out = DATA / tag / leaving.service
    with driven(tag, leaving) as (release, left, state, kernel):
        staging = DATA / tag / f".{leaving.service}.new"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for name in JOURNAL_FILES:
            shutil.copyfile(state / name, staging / name)
        (staging / KERNEL).write_text(json.dumps(kernel, indent=1, sort_keys=True) + "\n")
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
        "kernel": KERNEL,
        "records": records,
    }
    print(f"{out}: {len(records)} records, killed at {left.point}")


def journal_content(state: Path) -> list[tuple[Any, ...]]:
    """Every operation and effect row of the journal in ``state`` but their checksums
    and sequence numbers: what names the kernel's objects (ifindexes, namespaces,
    markers, addresses, before-images), read from a copy."""
    with journal_copy(state) as conn:
        operations = conn.execute(
            "SELECT operation_id, hook, scope, step, state, cleanup_status, request_json, "
            "plan_json, response_json, error_json FROM operations ORDER BY operation_id"
        ).fetchall()
        effects = conn.execute(
            "SELECT operation_id, effect_id, kind, state, before_json, outputs_json, detail "
            "FROM effects ORDER BY operation_id, effect_id"
        ).fetchall()
    return operations + effects


def add_kernel(tag: str, service: str) -> int:
    """A kernel snapshot for a service written before snapshots were kept: the release
    driven again the same way, kept only if the journal it leaves holds exactly what the
    written one does (every operation and effect row, which name the kernel's objects),
    so the snapshot is of the kernel the written journal describes."""
    out, manifest = DATA / tag / service, read_manifest(tag)
    entry = manifest["services"].get(service)
    if entry is None or entry.get("kernel") is not None:
        print(f"{out}: no journal without a kernel snapshot", file=sys.stderr)
        return 2
    with driven(tag, LEAVING[service]) as (_, left, state, kernel):
        again, written = journal_content(state), journal_content(out)
        if left.point != entry["crash_point"] or again != written:
            differ = [(a, w) for a, w in zip(again, written, strict=False) if a != w][:1]
            print(
                f"{out}: driven again, the release left another journal: {differ}", file=sys.stderr
            )
            return 1
    (out / KERNEL).write_text(json.dumps(kernel, indent=1, sort_keys=True) + "\n")
    entry["kernel"] = KERNEL
    (DATA / tag / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{out / KERNEL}: the kernel its journal was left on ({len(written)} rows equal)")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--kernel"] and len(argv) == 3:
        return add_kernel(argv[1], argv[2])
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
