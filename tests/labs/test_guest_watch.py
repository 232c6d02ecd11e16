"""A lab whose agent stops answering fails the case it hung in, with its evidence, and
the cases after it run on a new lab (``harness.guest_watch``); the second failure ends
the session with one line.

Checked in a pytest session of its own over an ``AgentLab`` whose agent (a
``KernelAgent`` over the kernel model, on a socket pair) is told to hang by the
guest's own test-only control (``GuestSide.hang``), with a call timeout of a second,
so it runs on every machine. The vm tier plants the same hang in a real guest
(tests/labs/test_vm_lab_hang.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.guest_watch import FAILURE_COUNT, RERUN_COUNT
from harness.stats import STATS_DIR_ENV

CONFTEST = """
import contextlib
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest

from fakekernel.lab import load_lab
from harness.pytest_plugin import WATCH_KEY
from labs import DEFAULT_LAB, AgentLab
from labs._guest import GuestSide
from labs.kernel_agent import KernelAgent


class PairLab(AgentLab):
    tier = "pair"
    pfs = ()
    lacking = {}
    call_timeout_s = 1.0
    built = 0

    def __init__(self):
        PairLab.built += 1
        self.number = PairLab.built
        self.start_seed = 1
        self.directory = Path(tempfile.mkdtemp(prefix="watch-", dir="/tmp"))
        host, self.guest = socket.socketpair()
        agent = KernelAgent(load_lab(DEFAULT_LAB), GuestSide(str(self.directory)))
        threading.Thread(target=self.run, args=(agent,), daemon=True).start()
        self._serve(host)

    def run(self, agent):
        # A hung agent wakes into a closed stream: that is its end, as in a guest.
        with contextlib.suppress(OSError), self.guest.makefile("rb") as incoming:
            agent.serve(incoming, self.guest.fileno())

    def evidence(self):
        return {f"pair lab {self.number} agent log": f"planted hang, lab {self.number}"}

    def close(self):
        try:
            self._close_agent()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def pair_lab(request):
    lab = request.config.stash[WATCH_KEY].build(request, PairLab)
    yield lab
    lab.close()
"""

CASES = """
import pytest

from fakekernel.client import FakeKernelProtocolError

HANG_S = 30.0  # far past the lab's call timeout (1 s)


@pytest.fixture(scope="module")
def built_on(pair_lab):
    return pair_lab.number, pair_lab.kernel.boot_id()


def test_a_hang(pair_lab, built_on):
    pair_lab.kernel.hang(HANG_S)


def test_after_the_hang(pair_lab, built_on):
    assert pair_lab.number == 2
    assert built_on[0] == 2, "a fixture built on the failed lab was kept"
    assert pair_lab.kernel.boot_id() == built_on[1]


def test_a_hang_the_case_swallows(pair_lab):
    with pytest.raises(FakeKernelProtocolError):
        pair_lab.kernel.hang(HANG_S)


def test_never_runs(pair_lab):
    pass
"""


def test_a_hung_agent_fails_its_case_and_the_next_cases_get_a_new_lab(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cases.py").write_text(CASES)
    results = tmp_path / "allure"
    allure = ("--alluredir", str(results))
    stats = tmp_path / "stats"
    stats.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *allure, str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, STATS_DIR_ENV: str(stats)},
        capture_output=True,
        text=True,
        check=False,
        timeout=90,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 2, out  # interrupted: the session ended
    assert "2 failed, 1 passed" in out, out
    assert "test_never_runs" not in out.split("short test summary")[-1], out
    assert "Interrupted: the pair lab's agent stopped answering 2 times" in out, out
    assert "Error: the connection failed earlier" not in out, out
    # The failure text: why, what follows, and the evidence, under the case it hung in.
    first = out.split("_ test_a_hang _")[1].split("_ test_a_hang_the_case_swallows _")[0]
    assert "pair lab failed" in first, out
    assert "the cases that follow run on a new lab" in first, out
    assert "planted hang, lab 1" in first, out
    # The case that caught the lab's error fails all the same, the session ending there.
    swallowed = out.split("_ test_a_hang_the_case_swallows _")[1]
    assert "the session ends here (the lab failed 2 times)" in swallowed, out
    assert "planted hang, lab 2" in swallowed, out

    # Allure: the same, attached to the case it hung in (beside its captured log).
    attached = allure_attachments(results)
    assert attached["test_a_hang"]["pair lab 1 agent log"] == "planted hang, lab 1"
    assert "timed out" in attached["test_a_hang"]["pair lab failed"]
    assert "pair lab failed" not in attached["test_after_the_hang"]
    # The rig's summary counts them.
    counted = json.loads((stats / "stats-main.json").read_text())["counts"]
    assert counted[FAILURE_COUNT] == 2


HANG_IN_SETUP = """
import pytest

from harness.pytest_plugin import WATCH_KEY
from conftest import PairLab

LABS = []


@pytest.fixture(scope="session")
def hung_lab(request):
    lab = request.config.stash[WATCH_KEY].build(request, PairLab)
    LABS.append(lab)
    if len(LABS) == 1:  # the first lab's first call hangs: pytest keeps the fixture's error
        lab.kernel.hang(30.0)
    yield lab
    lab.close()


def test_on_a_lab_that_hangs_as_it_is_built(hung_lab):
    pass


def test_after_it(hung_lab):
    assert hung_lab is not LABS[0]
    assert LABS[0].relay is None, "the hung lab was left open"
"""


def test_a_lab_that_hangs_while_its_fixture_builds_it_is_closed_and_built_again(
    tmp_path: Path,
) -> None:
    """The fixture that built the lab raised (its own first call hung), so no teardown
    of it closes the lab: the watch does, and the next case gets a new one."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_setup_hang.py").write_text(HANG_IN_SETUP)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=90,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "1 passed, 1 error" in out, out
    assert "the pair lab's agent stopped answering during setup" in out, out


NOT_BUILT_AGAIN = """
import pytest

from harness.pytest_plugin import WATCH_KEY
from conftest import PairLab


def make():
    if PairLab.built:
        raise RuntimeError("the second lab does not boot\\nits console says more")
    return PairLab()


@pytest.fixture(scope="session")
def lab(request):
    built = request.config.stash[WATCH_KEY].build(request, make)
    yield built
    built.close()


def test_a_hang(lab):
    lab.kernel.hang(30.0)


def test_on_a_lab_that_does_not_build(lab):
    pass


def test_never_runs(lab):
    pass
"""


def test_a_lab_that_cannot_be_built_again_ends_the_session_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_not_again.py").write_text(NOT_BUILT_AGAIN)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=90,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 2, out  # interrupted
    assert "1 failed, 1 error" in out, out
    assert (
        "Interrupted: the lab could not be built again after its agent stopped answering "
        "(test_not_again.py::test_a_hang: the guest agent left 'hang' unanswered: timed out "
        "after 1 s): the second lab does not boot !"
    ) in out, out


RERUNS = """
import pytest

from fakekernel.client import FakeKernelProtocolError


@pytest.fixture(scope="module")
def built_on(pair_lab):
    return pair_lab.number


def test_hangs_on_the_first_lab(pair_lab, built_on):
    if pair_lab.number == 1:
        pair_lab.kernel.hang(30.0)
    assert built_on == pair_lab.number == 2, "the rerun ran on the failed lab's fixtures"


def test_after_it(pair_lab):
    assert pair_lab.number == 2


def test_hangs_on_every_lab(pair_lab):
    pair_lab.kernel.hang(30.0)


def test_never_runs(pair_lab):
    pass
"""


def test_with_lab_reruns_the_case_a_lab_failed_in_runs_again_on_a_new_lab(tmp_path: Path) -> None:
    """``--lab-reruns 1``: the failed attempt is a rerun (with its evidence), the second
    attempt on a new lab passes; a case that fails its rerun too fails, and ends the
    session (the labs failed twice). Without the option nothing reruns (the test above)."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_reruns.py").write_text(RERUNS)
    results = tmp_path / "allure"
    stats = tmp_path / "stats"
    stats.mkdir()
    options = ("-p", "no:cacheprovider", "-rA", "--lab-reruns=1", "--alluredir", str(results))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *options, str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, STATS_DIR_ENV: str(stats)},
        capture_output=True,
        text=True,
        check=False,
        timeout=90,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 2, out  # interrupted: the labs failed twice
    assert "1 failed, 2 passed, 1 rerun" in out, out
    # The attempt run again, with its evidence, after the summary's lab failures.
    rerun = out.split("test_reruns.py::test_hangs_on_the_first_lab: the attempt run again (call)")[
        1
    ]
    assert "the cases that follow run on a new lab" in rerun, out
    assert "planted hang, lab 1" in rerun.split("short test summary")[0], out
    assert "FAILED test_reruns.py::test_hangs_on_every_lab" in out, out
    assert "test_never_runs" not in out.split("short test summary")[-1], out
    counted = json.loads((stats / "stats-main.json").read_text())["counts"]
    assert counted[RERUN_COUNT] == 1
    assert counted[FAILURE_COUNT] == 2
    # Allure keeps both attempts (one history id: the first is the retry), the failed one
    # with the lab's evidence.
    attempts = sorted(
        (result["start"], result["status"], [a["name"] for a in result.get("attachments", [])])
        for path in results.glob("*-result.json")
        if (result := json.loads(path.read_text()))["name"] == "test_hangs_on_the_first_lab"
    )
    # broken: the lab's error is no assertion of the case
    assert [status for _, status, _ in attempts] == ["broken", "passed"], attempts
    assert "pair lab 1 agent log" in attempts[0][2], attempts


def allure_attachments(results: Path) -> dict[str, dict[str, str]]:
    """Each test's Allure attachments: name -> content."""
    found: dict[str, dict[str, str]] = {}
    for path in results.glob("*-result.json"):
        result = json.loads(path.read_text())
        found[result["name"]] = {
            a["name"]: (results / a["source"]).read_text() for a in result.get("attachments", [])
        }
    return found
