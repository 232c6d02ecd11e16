"""Open a rendered report in headless Chromium as a CI reader would: what it requests, and a picture.

``python -m harness.report_view reports/html [--test NAME [--attachment NAME]]
[--screenshot PNG]`` opens ``index.html`` (on the page of the first test whose name
contains the test's ``NAME``, at its attachment of that name, if given),
prints every request the page made to a host other than localhost (none: exit 0; some:
exit 1) and saves a screenshot. Chromium is ``scripts/install-report``'s.

Chromium runs with a fresh profile and its own background traffic turned off
(``FLAGS``); every host name resolves to nothing (``--host-resolver-rules``), so a
request the page makes is logged (``--log-net-log``) but never leaves the machine. What
Chromium asks for itself despite the flags (component updates, account lists) carries no
initiator; a request the page made carries the page's (``null`` for a ``file://`` page).
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report_check import external

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost",
)
BROWSER_OWN = "not an origin"  # the initiator of Chromium's own requests
TEST_CASE = re.compile(r'd\("data/test-cases/([0-9a-f]+)\.json",\s*"([^"]*)"\)')


class ViewError(RuntimeError):
    """Chromium is missing or failed; the message says which."""


def chromium() -> str | None:
    """The Chromium program (None: not installed; ``scripts/install-report``)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass(frozen=True)
class View:
    requests: list[str]  # the external URLs the page requested
    screenshot: Path | None


def open_page(
    page: Path,
    fragment: str = "",
    screenshot: Path | None = None,
    window: tuple[int, int] = (1400, 1000),
    budget_ms: int = 10000,
) -> View:
    """Load ``page`` (at ``#fragment``) and let its scripts run for ``budget_ms`` of
    virtual time (Chromium skips ahead while the page waits on timers), then look."""
    program = chromium()
    if program is None:
        raise ViewError("chromium is not installed (scripts/install-report installs it)")
    with tempfile.TemporaryDirectory(prefix="report-view-") as scratch:
        netlog = Path(scratch) / "netlog.json"
        argv = [
            program,
            *FLAGS,
            f"--user-data-dir={scratch}/profile",
            f"--log-net-log={netlog}",
            f"--window-size={window[0]},{window[1]}",
            f"--virtual-time-budget={budget_ms}",
        ]
        if screenshot is not None:
            argv.append(f"--screenshot={screenshot.resolve()}")
        else:
            argv.append("--dump-dom")
        url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
        done = subprocess.run(
            [*argv, url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise ViewError(f"chromium exited {done.returncode}: {done.stderr.strip()[-1000:]}")
        return View(page_requests(netlog), screenshot)


def page_requests(netlog: Path) -> list[str]:
    """The external URLs requests in a Chromium NetLog asked for on a page's behalf."""
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    found = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        if event.get("type") != start or params.get("initiator") == BROWSER_OWN:
            continue
        url = str(params.get("url", ""))
        if external(url) and url not in found:
            found.append(url)
    return found


def fragment_of(page: Path, name: str, attachment: str = "") -> str:
    """The report's address (after ``#``) of the first test case whose name contains
    ``name``, opened at its first attachment named ``attachment`` (if given)."""
    for match in TEST_CASE.finditer(page.read_text()):
        case = json.loads(base64.b64decode(match.group(2)))
        if name not in str(case.get("name", "")):
            continue
        fragment = f"testresult/{match.group(1)}"
        if not attachment:
            return fragment
        uid = next((a["uid"] for a in _attachments(case) if a.get("name") == attachment), None)
        if uid is None:
            raise ViewError(f"{page}: {case['name']} has no attachment {attachment!r}")
        return f"{fragment}?attachment={uid}"
    raise ViewError(f"{page}: no test case named like {name!r}")


def _attachments(case: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stages = [case.get(key) or {} for key in ("beforeStages", "testStage", "afterStages")]
    todo = [s for stage in stages for s in (stage if isinstance(stage, list) else [stage])]
    while todo:
        step = todo.pop(0)
        yield from step.get("attachments", [])
        todo[:0] = step.get("steps", [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness.report_view", description=__doc__.split("\n")[0])
    parser.add_argument("report", type=Path, help="a rendered report's directory")
    parser.add_argument("--test", help="open the page of the first test whose name has this")
    parser.add_argument("--attachment", default="", help="and open its attachment of this name")
    parser.add_argument("--screenshot", type=Path, help="save a PNG of the page here")
    parser.add_argument("--window", default="1400x1000", help="WIDTHxHEIGHT")
    args = parser.parse_args(argv)
    page = args.report / "index.html"
    if not page.is_file():
        print(f"{page}: no rendered report there", file=sys.stderr)
        return 2
    width, _, height = args.window.partition("x")
    try:
        fragment = fragment_of(page, args.test, args.attachment) if args.test else ""
        view = open_page(page, fragment, args.screenshot, (int(width), int(height)))
    except (ViewError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 2
    for url in view.requests:
        print(f"the page requested {url}")
    if view.screenshot is not None:
        print(f"screenshot: {view.screenshot}")
    return 1 if view.requests else 0


if __name__ == "__main__":
    sys.exit(main())
