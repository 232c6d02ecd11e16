"""Write the golden journals of a release: ``tests/data/journals/<tag>/``.

    uv run --locked python -m tests.upgrade.make_golden_journals [v0.1.0]

The release is built from its tag (``harness.upgrade.previous_release``) and its
``networkplugin-links`` driven into every state an upgrade can meet
(``harness.upgrade.leave_every_state``): a lifecycle run to its end, a connect that
succeeded, a remove quarantined, a connect SIGKILLed right after its macvlan was
created (an effect left ``Applying``). The service's journal is copied as the kill left
it (``journal.db`` with its ``-wal`` and ``-shm``: the in-flight commits are in the WAL
only), with ``records.json``: the release, its commit, the crash point and every
operation as the file holds it. Run once per release and committed; every later build
must open and clean these (tests/upgrade/test_golden_journals.py).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from harness.upgrade import (
    LINKS,
    PREVIOUS_RELEASE,
    SERVICE,
    journal_records,
    leave_every_state,
    old_process,
    previous_release,
    previous_release_node,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "journals"
JOURNAL_FILES = ("journal.db", "journal.db-wal", "journal.db-shm", "journal.id")
IN_FLIGHT_AT = "create-child/kernel#1.create_link.after"
"""The macvlan exists in the pod and its effect record says ``Applying``: recovery must
probe it, the cleanup undo it."""


def at_create(points: list[str]) -> str:
    return next(p for p in points if p.endswith(IN_FLIGHT_AT))


def main(argv: list[str]) -> int:
    tag = argv[0] if argv else PREVIOUS_RELEASE
    if (DATA / tag).exists():
        print(
            f"{DATA / tag} exists: a release's golden journals are written once (remove the "
            "directory to write them again)",
            file=sys.stderr,
        )
        return 2
    release = previous_release(tag)
    out = DATA / tag / SERVICE
    with (
        tempfile.TemporaryDirectory(prefix="golden-") as tmp,
        previous_release_node(release, Path(tmp) / "node", LINKS) as node,
    ):
        state = old_process(node).root / "state"
        left = leave_every_state(node, Path(tmp) / "trace", at_create)
        out.mkdir(parents=True)
        for name in JOURNAL_FILES:
            shutil.copyfile(state / name, out / name)
        records = [r.as_json() for r in journal_records(out)]
    manifest = {
        "release": tag,
        "commit": release.commit,
        "service": SERVICE,
        "crash_point": left.point,
        "records": records,
    }
    (DATA / tag / "records.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{out}: {len(records)} records, killed at {left.point}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
