"""Render Allure results to the rig's HTML report, and check it loads nothing from elsewhere.

``python -m harness.report_render RESULTS OUTPUT``: installs the generator if it is not
installed at its pinned version (``tools/report``: the npm ``allure`` package, from its
lock), renders ``RESULTS`` into ``OUTPUT`` with ``tools/report/allurerc.mjs`` (one
self-contained ``index.html``, the analytics off), then runs ``harness.report_check``
on it: exit 1 if the page would load anything from another host, 2 on bad input.
``--install`` only installs the generator (``scripts/rig`` does that before the labs run,
so a test that renders a report finds it installed).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
from pathlib import Path

from .report_check import problems

GENERATOR = Path(__file__).resolve().parent.parent / "tools" / "report"
CONFIG = GENERATOR / "allurerc.mjs"
ALLURE = GENERATOR / "node_modules" / ".bin" / "allure"


class RenderError(RuntimeError):
    """The generator could not be installed or failed; the message says how."""


def pinned_version() -> str:
    return str(json.loads((GENERATOR / "package.json").read_text())["dependencies"]["allure"])


def installed_version() -> str | None:
    package = GENERATOR / "node_modules" / "allure" / "package.json"
    try:
        return str(json.loads(package.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def ensure_generator() -> Path:
    """The generator's ``allure`` program, installed first (``npm ci``) unless the pinned
    version is there. Several test processes may ask at once: the first installs while
    the others wait on a lock (the lock file is the package's lock, only read)."""
    if not (GENERATOR / "package.json").is_file():
        raise RenderError(f"{GENERATOR}: no report generator here (a source checkout has it)")
    with (GENERATOR / "package-lock.json").open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed_version() != pinned_version() or not ALLURE.is_file():
            done = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--silent"],
                cwd=GENERATOR,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if done.returncode != 0:
                raise RenderError(f"npm ci in {GENERATOR} failed: {done.stderr.strip()[-2000:]}")
    return ALLURE


def render(results: Path, output: Path, config: Path = CONFIG) -> Path:
    """``results`` rendered into ``output`` with ``config``; the page's path."""
    allure = ensure_generator()
    done = subprocess.run(
        [str(allure), "generate", str(results), "--config", str(config), "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    page = output / "index.html"
    if done.returncode != 0 or not page.is_file():
        raise RenderError(f"allure generate {results} failed: {done.stderr.strip()[-2000:]}")
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness.report_render", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--install", action="store_true", help="only install the generator")
    parser.add_argument("results", nargs="?", type=Path)
    parser.add_argument("output", nargs="?", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.install:
            ensure_generator()
            return 0
        if args.results is None or args.output is None:
            parser.error("RESULTS and OUTPUT are needed (or --install)")
        if not args.results.is_dir():
            print(f"{args.results}: no Allure results there", file=sys.stderr)
            return 2
        render(args.results, args.output)
    except RenderError as exc:
        print(exc, file=sys.stderr)
        return 1
    found = problems(args.output)
    for line in found:
        print(line, file=sys.stderr)
    if found:
        print(f"{args.output}: the report would load from another host", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
