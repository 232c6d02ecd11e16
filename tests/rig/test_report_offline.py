"""The rendered report must not phone home (harness.report_check has the rule).

A small report (a few synthetic results: a test with a crash run's failed step and its
evidence, a JSON attachment naming a schema's URL, a crash matrix, the environment) is
rendered through the rig's own configuration (tools/report/allurerc.mjs) and checked:
statically, and where Chromium is installed (scripts/install-report), by opening it and
recording every request the page makes. Both checks are shown to fail on the generator's
default configuration, which embeds Google Analytics.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from uuid import uuid4

import pytest

from harness.crash_log import CrashRun
from harness.crash_matrix import write_matrices
from harness.report import write_environment
from harness.report_check import markup_problems, problems, script_problems
from harness.report_render import render
from harness.report_view import chromium, open_page
from plugins.sdk.runner import CrashPoint

SCHEMA = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_CONFIG = """export default {
  name: "the generator's default report",
  plugins: { awesome: { options: { singleFile: true } } },
};
"""


def write_results(results: Path) -> None:
    """A test whose crash run failed (a failed step, its evidence attached), a JSON
    attachment that names a schema (data, not a script), a crash matrix, the environment."""
    results.mkdir(parents=True)
    request = results / f"{uuid4()}-attachment.json"
    request.write_text(json.dumps({"$schema": SCHEMA, "name": "eth1"}))
    diff = results / f"{uuid4()}-attachment.txt"
    diff.write_text("~ link eth1: mtu 1500 -> 9000")
    step = {
        "name": "cleanup: ConnectNetwork/att-1:x/-/intent.after-commit -> 1 invariant violations",
        "status": "failed",
        "statusDetails": {"message": "kernel differs: ~ link eth1: mtu 1500 -> 9000"},
        "parameters": [{"name": "point", "value": "ConnectNetwork/att-1:x/-/intent.after-commit"}],
        "attachments": [{"name": "kernel diff", "source": diff.name, "type": "text/plain"}],
        "start": 1,
        "stop": 2,
    }
    result = {
        "uuid": str(uuid4()),
        "historyId": "h1",
        "name": "test_crash_at_every_point[macvlan-1of1-cleanup]",
        "fullName": "tests.rig.test_topology_crashes#test_crash_at_every_point",
        "status": "failed",
        "steps": [step],
        "attachments": [{"name": "request", "source": request.name, "type": "application/json"}],
        "labels": [
            {"name": "parentSuite", "value": "fake"},
            {"name": "suite", "value": "crashes"},
            {"name": "subSuite", "value": "test_topology_crashes"},
        ],
        "start": 1,
        "stop": 3,
    }
    (results / f"{result['uuid']}-result.json").write_text(json.dumps(result))
    runs = [
        CrashRun("fake", "macvlan", CrashPoint.parse("NodePrepare/c/-/intent.before-commit"), 0,
                 "retry", "ok", True, 0.1, "t"),
        CrashRun("fake", "macvlan", CrashPoint.parse("ConnectNetwork/att-1:x/-/intent.after-commit"), 1, "cleanup",
                 "1 invariant violations", False, 0.1, "t"),
    ]  # fmt: skip
    write_matrices(results, runs)
    write_environment(results, "fake://", {}, {"crash_points_enumerated": 2})


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The small report rendered with the rig's configuration (``rig``) and with the
    generator's default (``default``)."""
    root = tmp_path_factory.mktemp("report")
    write_results(root / "results")
    (root / "default.mjs").write_text(DEFAULT_CONFIG)
    render(root / "results", root / "rig")
    render(root / "results", root / "default", root / "default.mjs")
    return {"rig": root / "rig", "default": root / "default"}


def test_the_rendered_report_loads_nothing_from_another_host(reports: dict[str, Path]) -> None:
    page = (reports["rig"] / "index.html").read_text()
    assert problems(reports["rig"]) == []
    assert "googletagmanager" not in page
    assert "gtag(" not in page


def test_the_check_fails_the_generators_default_which_phones_home(
    reports: dict[str, Path],
) -> None:
    found = problems(reports["default"])
    assert any("googletagmanager.com/gtag/js" in line for line in found), found


@pytest.mark.parametrize(
    "markup",
    [
        '<script async src="https://www.googletagmanager.com/gtag/js?id=G-1"></script>',
        '<link rel="stylesheet" href="//fonts.example.com/a.css">',
        '<img src="http://example.com/pixel.gif">',
        '<a href="https://example.com/">docs</a>',
        '<iframe src="wss://example.com/socket"></iframe>',
        "<style>@import 'https://cdn.example.com/x.css';</style>",
        '<div style="background: url(https://cdn.example.com/b.png)"></div>',
        "<script>fetch('https://collector.example.com/hit')</script>",
        "<script>var u = '//collector.example.com/hit';</script>",
        '<button onclick="navigator.sendBeacon(`https://x.example.com`)">go</button>',
        '<meta http-equiv="refresh" content="0; url=https://example.com/">',
    ],
)
def test_what_would_load_from_another_host_is_caught(markup: str) -> None:
    assert markup_problems(f"<html><head>{markup}</head></html>", "page") != []


@pytest.mark.parametrize(
    "markup",
    [
        '<script src="http://localhost:8080/app.js"></script>',
        '<link rel="icon" href="data:image/svg+xml,%3Csvg xmlns=%27http://www.w3.org/2000/svg%27/%3E">',
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"></svg>',
        "<script>const ns = 'http://www.w3.org/2000/svg'; // a comment\n</script>",
        '<script>d("data/attachments/1.json","'
        + "eyIkc2NoZW1hIjogImh0dHBzOi8vanNvbi1zY2hlbWEub3JnL2RyYWZ0LzIwMjAtMTIvc2NoZW1hIn0="
        + '")</script>',
    ],
)
def test_names_and_data_are_not_loads(markup: str) -> None:
    assert markup_problems(f"<html><head>{markup}</head></html>", "page") == []


def test_a_markup_attachment_is_checked_like_the_page() -> None:
    attachment = '<html><body><img src="https://tracker.example.com/p.gif"></body></html>'
    encoded = base64.b64encode(attachment.encode()).decode()
    page = f'<html><script>d("data/attachments/9.html","{encoded}")</script></html>'
    (problem,) = markup_problems(page, "page")
    assert "attachment data/attachments/9.html" in problem
    assert "https://tracker.example.com/p.gif" in problem


def test_a_url_new_to_the_generators_scripts_fails_until_listed() -> None:
    assert script_problems("x='https://cdn.example.com/lib.js'", "bundle") == [
        "bundle: script names https://cdn.example.com/lib.js (not in harness.report_check.SCRIPT_URLS)"
    ]


@pytest.fixture
def browser() -> str:
    program = chromium()
    if program is None:
        pytest.skip("chromium is not installed (scripts/install-report installs it)")
    return program


def test_opened_in_chromium_the_page_requests_nothing_elsewhere(
    browser: str, reports: dict[str, Path], tmp_path: Path
) -> None:
    picture = tmp_path / "report.png"
    view = open_page(reports["rig"] / "index.html", screenshot=picture)
    assert view.requests == []
    assert picture.stat().st_size > 0
    # The same browser sees the default configuration's analytics request.
    default = open_page(reports["default"] / "index.html")
    assert any("googletagmanager.com" in url for url in default.requests), default.requests
