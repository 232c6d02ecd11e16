"""Each topology's crash matrix, drawn from the rig's run log once every test has finished.

A topology's crash runs are spread over many cases and test processes (the fake tier
splits vf-bond-vlan's points over eight cases on every core), so no one test can show
them together. ``harness.rig`` reads the run log (``harness.crash_log``) after the run
and writes, per lab and topology, one Allure result ``crash matrix: <topology>`` under
``<lab> / crashes / crash matrix``, failed if any of its runs failed, with the matrix
attached as an HTML table and as CSV: a row per crash point in the order the lifecycle
reaches them (the services' points, then the coordinator's), a column per way the rig
recovers (``COLUMNS``), each cell the run's outcome. A point a column did not run (the
SIGKILL and compound runs take a sample) is left blank.
"""

from __future__ import annotations

import csv
import hashlib
import html
import io
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from uuid import uuid4

from allure_commons.logger import AllureFileLogger
from allure_commons.model2 import (
    Attachment,
    Label,
    Status,
    StatusDetails,
    TestResult,
)

from plugins.sdk.runner import UNSCOPED, CrashPoint, Owner

from .crash_log import CrashRun

COLUMNS = ("retry", "cleanup", "undo crash", "recovery crash", "SIGKILL")
"""retry, cleanup: crashed in-process, restarted, then the interrupted phase retried or
the attachment cleaned up; undo crash, recovery crash: a second crash during the undo
or during the recovery after the first; SIGKILL: the process owning the point killed,
restarted, the lifecycle finished."""

HOOKS = ("NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare")

STYLE = """
body { font: 13px/1.35 system-ui, sans-serif; margin: 8px; color: #222; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.point { font-family: ui-monospace, monospace; font-size: 12px; white-space: nowrap; }
td.ok { background: #d9f2d9; text-align: center; white-space: nowrap; }
td.bad { background: #f8caca; font-weight: bold; white-space: nowrap; }
td.none { background: #fafafa; }
tr.hook td { background: #e8eef8; font-weight: bold; }
p.totals { margin: 4px 0 10px; }
"""


def group(runs: Iterable[CrashRun]) -> dict[tuple[str, str], list[CrashRun]]:
    """The runs of each (lab, topology)."""
    grouped: dict[tuple[str, str], list[CrashRun]] = defaultdict(list)
    for run in runs:
        grouped[run.lab, run.topology].append(run)
    return dict(sorted(grouped.items()))


def _rows(runs: list[CrashRun]) -> list[tuple[CrashPoint, dict[str, list[CrashRun]]]]:
    """(point, its runs by column), the services' points first, each in the lifecycle's order."""
    cells: dict[CrashPoint, dict[str, list[CrashRun]]] = defaultdict(lambda: defaultdict(list))
    order: dict[CrashPoint, int] = {}
    for run in runs:
        cells[run.point][run.column].append(run)
        order[run.point] = min(order.get(run.point, run.order), run.order)
    points = sorted(cells, key=lambda p: (p.owner is not Owner.SERVICE, order[p], p))
    return [(p, cells[p]) for p in points]


def _hook(point: CrashPoint) -> str:
    """A row group: the service's hook (``NodePrepare``), or whose and which hook
    (``coordinator, NodePrepare``)."""
    if point.owner is Owner.SERVICE:
        return point.hook
    owner = point.owner.value.lower()
    return owner if point.hook == UNSCOPED else f"{owner}, {point.hook}"


def _cell(runs: list[CrashRun]) -> tuple[str, str]:
    """(CSS class, text) of a cell."""
    if not runs:
        return "none", ""
    if all(r.ok for r in runs):
        return "ok", ", ".join(r.outcome for r in runs)
    return "bad", "; ".join(r.outcome for r in runs if not r.ok)


def columns_of(runs: list[CrashRun]) -> list[str]:
    present = {r.column for r in runs}
    return [c for c in COLUMNS if c in present] + sorted(present - set(COLUMNS))


def matrix_html(lab: str, topology: str, runs: list[CrashRun]) -> str:
    """The matrix as a self-contained HTML page (inline style only: it loads nothing)."""
    columns = columns_of(runs)
    failed = [r for r in runs if not r.ok]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body: list[str] = []
    hook = None
    for point, by_column in _rows(runs):
        if _hook(point) != hook:
            hook = _hook(point)
            body.append(f'<tr class="hook"><td colspan="{len(columns) + 1}">{hook}</td></tr>')
        cells = []
        for column in columns:
            css, text = _cell(by_column.get(column, []))
            cells.append(f'<td class="{css}">{html.escape(text)}</td>')
        body.append(
            f'<tr><td class="point">{html.escape(str(point))}</td>' + "".join(cells) + "</tr>"
        )
    totals = ", ".join(f"{c}: {sum(r.column == c for r in runs)}" for c in columns)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>crash matrix: {html.escape(topology)}</title><style>{STYLE}</style></head><body>"
        f"<h3>Crash matrix: {html.escape(topology)} on {html.escape(lab)}</h3>"
        f'<p class="totals">{len(runs)} runs at {len(_rows(runs))} points ({totals}); '
        f"<b>{len(failed)} failed</b>. Rows: the crash points in the order the lifecycle "
        "reaches them; a blank cell: not run there (a sampled column).</p>"
        f"<table><thead><tr><th>crash point</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></body></html>"
    )


def matrix_csv(runs: list[CrashRun]) -> str:
    """The matrix as CSV: a row per point, a column per recovery, each cell its outcome."""
    columns = columns_of(runs)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["crash point", *columns])
    for point, by_column in _rows(runs):
        writer.writerow([str(point), *(_cell(by_column.get(c, []))[1] for c in columns)])
    return out.getvalue()


def write_matrices(results: Path, runs: list[CrashRun]) -> list[str]:
    """One Allure result per (lab, topology) of ``runs`` in ``results``; their names."""
    logger = AllureFileLogger(str(results))  # type: ignore[no-untyped-call]
    now = int(time.time() * 1000)
    names = []
    for (lab, topology), group_runs in group(runs).items():
        failed = [r for r in group_runs if not r.ok]
        result = TestResult(
            uuid=str(uuid4()),
            name=f"crash matrix: {topology}",
            fullName=f"crash matrix: {lab}: {topology}",
            historyId=hashlib.md5(f"crash matrix {lab} {topology}".encode()).hexdigest(),
            status=Status.FAILED if failed else Status.PASSED,
            description=(
                f"Every crash run of {topology} on {lab}, one row per crash point and one "
                "column per way of recovering; the attachment is the matrix."
            ),
            start=now,
            stop=now,
            labels=[
                Label("parentSuite", lab),
                Label("suite", "crashes"),
                Label("subSuite", "crash matrix"),
                Label("framework", "harness.crash_matrix"),
            ],
        )
        if failed:
            result.statusDetails = StatusDetails(
                message="\n".join(f"{r.column} at {r.point}: {r.outcome}" for r in failed[:20])
            )
        for body, name, kind, extension in (
            (matrix_html(lab, topology, group_runs), "crash matrix", "text/html", "html"),
            (matrix_csv(group_runs), "crash matrix (CSV)", "text/csv", "csv"),
        ):
            source = f"{uuid4()}-attachment.{extension}"
            result.attachments.append(Attachment(name=name, source=source, type=kind))
            (results / source).write_text(body)
        logger.report_result(result)  # type: ignore[no-untyped-call]
        names.append(result.name)
    return names
