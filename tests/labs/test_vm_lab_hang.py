"""A guest whose agent stops answering is one failure, not one per case that follows.

A pytest session of its own (the case under test must fail) plants a hung agent in a
real guest (``VmKernel.hang``: the agent sleeps inside one request, so it answers
nothing more): that case fails once the relay gives up (``labs.CALL_TIMEOUT_S``), with
the guest's console tail and the agent's log, where the agent dumped its stacks
(``kernel_agent.STALL_REPORT_S``), in the failure text and attached in Allure; the next
case runs on a rebooted guest, with the module's fixture built again on it
(``harness.guest_watch``). It boots the guest twice: ~2 boots + 2 minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labs._agent_lab import CALL_TIMEOUT_S
from labs.vm import BOOT_DEADLINE_S

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3 * BOOT_DEADLINE_S + 2 * CALL_TIMEOUT_S)]

CASES = """
import os
from pathlib import Path

import pytest

from labs._agent_lab import CALL_TIMEOUT_S
from labs.vm import BOOT_DEADLINE_S

pytestmark = [pytest.mark.vm, pytest.mark.timeout(BOOT_DEADLINE_S + 2 * CALL_TIMEOUT_S)]
FIRST_BOOT = Path(os.environ["FIRST_BOOT_FILE"])


@pytest.fixture(scope="module")
def built_on(vm_lab):
    return vm_lab.kernel.boot_id()


def test_a_planted_hang(vm_lab, built_on):
    FIRST_BOOT.write_text(built_on)
    vm_lab.kernel.hang(5 * CALL_TIMEOUT_S)


def test_after_the_hang(vm_lab, built_on):
    now = vm_lab.kernel.boot_id()
    assert now != FIRST_BOOT.read_text(), "the case after the hang ran on the hung guest"
    assert built_on == now, "a fixture built on the hung guest was kept"
"""


def test_a_planted_hung_agent_fails_its_case_and_the_next_runs_on_a_rebooted_guest(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_cases.py").write_text(CASES)
    results = tmp_path / "allure"
    options = ("-m", "vm", "-p", "no:cacheprovider", "-rA", "--tb=short")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *options, "--alluredir", str(results), str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "FIRST_BOOT_FILE": str(tmp_path / "first-boot")},
        capture_output=True,
        text=True,
        check=False,
        timeout=3 * BOOT_DEADLINE_S + 2 * CALL_TIMEOUT_S - 30,
    )
    out = run.stdout + run.stderr
    print(out)  # the inner session's report, for the reader of this one
    assert run.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "Error: the connection failed earlier" not in out, out
    failed = out.split("_ test_a_planted_hang _")[1].split("PASSES")[0]
    assert "vm lab failed" in failed, out
    assert "the cases that follow run on a new lab (a rebooted guest)" in failed, out
    assert "guest console, last" in failed, out
    # The agent dumped its stacks into its log while it hung: the planted sleep is there.
    assert "guest agent log, last" in failed, out
    assert "in hang" in failed.split("guest agent log, last")[1], out

    attached = allure_attachments(results)["test_a_planted_hang"]
    (log,) = [text for name, text in attached.items() if "guest agent log" in name]
    assert "in hang" in log
    (console,) = [text for name, text in attached.items() if "guest console" in name]
    assert console.strip()


def allure_attachments(results: Path) -> dict[str, dict[str, str]]:
    """Each test's Allure attachments: name -> content."""
    found: dict[str, dict[str, str]] = {}
    for path in results.glob("*-result.json"):
        result = json.loads(path.read_text())
        found[result["name"]] = {
            a["name"]: (results / a["source"]).read_text() for a in result.get("attachments", [])
        }
    return found
