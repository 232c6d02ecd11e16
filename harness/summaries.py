"""Combine the rig's per-lab summaries into ``reports/summary.json``.

``python -m harness.summaries REPORTS LAB_URL...``: reads each lab's
``REPORTS/summary-<lab>.json`` (``harness.rig``) and writes ``REPORTS/summary.json``. One
summary is copied as it is (so
``scripts/rig vm://`` gives a ``summary.json`` whose ``tier`` is ``vm``); several become
``{"labs": [...], "invariant_violations": n, "tests_failed": n, "seconds": s}``, the
totals a reader checks first followed by each lab's own summary.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .labs import summary_path

TOTALS = ("invariant_violations", "io_fault_violations", "tests_passed", "tests_failed")


def combine(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    if len(summaries) == 1:
        return summaries[0]
    combined: dict[str, Any] = {key: sum(s.get(key, 0) for s in summaries) for key in TOTALS}
    combined["seconds"] = round(sum(s.get("seconds", 0.0) for s in summaries), 1)
    combined["labs"] = summaries
    return combined


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m harness.summaries REPORTS LAB_URL...", file=sys.stderr)
        return 2
    reports = Path(argv[0])
    out, paths = reports / "summary.json", [summary_path(reports, url) for url in argv[1:]]
    absent = [str(p) for p in paths if not p.is_file()]
    if absent:
        # A lab whose run died before writing its summary: say which, keep the rest.
        print(f"no summary from: {', '.join(absent)}", file=sys.stderr)
    written = [json.loads(p.read_text()) for p in paths if p.is_file()]
    if not written:
        return 1
    out.write_text(json.dumps(combine(written), indent=2) + "\n")
    return 0 if not absent else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
