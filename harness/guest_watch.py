"""A lab whose agent stops answering fails one case, not every case after it.

The vm tier's cases share one guest per pytest session (the ``vm_lab`` fixture: a boot
under TCG takes minutes). When the guest's agent leaves a call unanswered for the
relay's call timeout, or its stream ends, the relay hangs up on every client for good
(``labs.AgentLab.failure``). Before this watch, every later case then failed on the dead
lab ("the connection failed earlier; open a new client"), and nothing in the report said
why. ``GuestWatch`` (registered by the kit's plugin; the fixtures that build or hand out
such a lab call ``hold``):

- the report of the phase during which the lab failed (the case it hung in) fails, with
  the failure and the lab's ``evidence()`` (the guest's console tail, the agent's log,
  where a stalled agent dumps its stacks) as sections of the failure text and as Allure
  attachments;
- after that case's teardown, the fixtures holding the lab are finished, and with them
  everything built on them (a module's lent VFs, a session's baseline of the guest), so
  the next case that asks boots a fresh guest and builds them again there;
- the ``MAX_LAB_FAILURES``-th failure of a session, or a lab that cannot be built again,
  ends the session with one line (pytest's ``Interrupted: ...``);
- with ``reruns`` (``--lab-reruns N``; the rig asks for 1 on its vm and sriov tiers), the
  case the lab failed in runs again on the new lab, up to N times. A real kernel under
  QEMU's emulation has stalled once in CI inside a VF's creation: that is the lab's
  failure, not a verdict on the code under test, so the case gets a fresh guest before it
  is judged (as LAVA retries a job on an infrastructure error). The failed attempt is
  reported as ``rerun`` (pytest's ``R``), with its evidence, and counted
  (``lab_reruns``); a case whose rerun fails again fails, and that second failure of the
  session's labs ends the session. A plain ``pytest`` run does not rerun.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import allure
import pytest
from _pytest.runner import runtestprotocol  # what pytest-rerunfailures and xdist call too

from labs import AgentLab

__all__ = ["MAX_LAB_FAILURES", "RERUN_COUNT", "GuestWatch"]

log = logging.getLogger(__name__)

MAX_LAB_FAILURES = 2  # the first is replaced; a new guest failing again ends the session
FAILURE_COUNT = "lab_agent_failures"
RERUN_COUNT = "lab_reruns"
RERUN = "rerun"  # the outcome of an attempt the lab failed in, run again on a new lab
Built = TypeVar("Built", bound=AgentLab)


@dataclass
class _Held:
    """A lab and the fixtures (definition, request) that hold it, in the order they took it."""

    lab: AgentLab
    fixtures: list[tuple[pytest.FixtureDef[Any], pytest.FixtureRequest]] = field(
        default_factory=list
    )
    evidence: dict[str, str] | None = None  # read once, when the failure is first seen
    reported: bool = False  # a case's report carries the failure
    replaced: bool = False  # its fixtures are finished (the lab is closed)
    why: str | None = None  # the failure, kept once the lab is closed


class GuestWatch:
    """Watches the labs that fixtures ``hold``; see the module's docstring."""

    def __init__(
        self,
        max_failures: int = MAX_LAB_FAILURES,
        count: Callable[[str], None] | None = None,
        reruns: int = 0,
    ) -> None:
        self.max_failures = max_failures
        self.reruns = reruns
        self._count = count  # told FAILURE_COUNT at each failure (the rig's summary counts it)
        self.failures: list[str] = []  # "<nodeid>: <why>", one per failed lab
        self._held: dict[int, _Held] = {}

    def build(self, request: pytest.FixtureRequest, make: Callable[[], Built]) -> Built:
        """``make()`` a lab for the fixture of ``request`` and hold it. When a lab that
        failed is being replaced and the new one cannot be built, the session ends with
        one line (every later case would fail on the same error)."""
        try:
            lab = make()
        except Exception as exc:
            if self.failures:
                first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                request.session.shouldstop = (
                    f"the lab could not be built again after its agent stopped answering "
                    f"({self.failures[-1]}): {first_line}"
                )
            raise
        self.hold(request, lab)
        return lab

    def hold(self, request: pytest.FixtureRequest, lab: AgentLab) -> None:
        """The fixture of ``request`` (a session- or module-scoped one) hands out ``lab``:
        it is finished, with what was built on it, should the lab fail."""
        held = self._held.setdefault(id(lab), _Held(lab))
        # pytest offers no public way to end one fixture early; FixtureDef.finish is what
        # its own teardown calls, and it tears down the fixtures depending on this one
        # first (tests/labs/test_guest_watch.py checks this on the pytest we lock).
        fixturedef: pytest.FixtureDef[Any] = request._fixturedef  # type: ignore[attr-defined]
        held.fixtures.append((fixturedef, request))

    # -- hooks -------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        """Run the case, and again on a new lab while a lab failed in it (``reruns``).
        pytest's own protocol, once per attempt: ``runtestprotocol`` sets up the case's
        request afresh each time, and the failed lab's fixtures were finished in the
        attempt's teardown (``_replace``), so the next attempt builds them again."""
        if self.reruns <= 0:
            return None
        attempt = 0
        while True:
            item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            failed_before = len(self.failures)
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            again = (
                len(self.failures) > failed_before
                and attempt < self.reruns
                and not item.session.shouldstop
            )
            for report in reports:
                if again and report.failed:
                    report.outcome = RERUN  # type: ignore[assignment]
                item.ihook.pytest_runtest_logreport(report=report)
            item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
            if not again:
                return True
            attempt += 1
            if self._count is not None:
                self._count(RERUN_COUNT)
            log.warning("%s: running it again on a new lab (attempt %d)", item.nodeid, attempt + 1)

    def pytest_report_teststatus(
        self, report: pytest.TestReport
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        if report.outcome == RERUN:
            return RERUN, "R", ("RERUN", {"yellow": True})
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        for key, held in list(self._held.items()):
            why = held.why if held.replaced else held.lab.failure
            if why is not None and not held.reported:
                held.reported = True
                self._fail_report(report, held, why)
            if held.reported and held.replaced:
                del self._held[key]
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        try:
            return (yield)
        finally:
            for held in list(self._held.values()):
                why = held.lab.failure
                if why is not None and not held.replaced:
                    # A failure in this teardown is reported after this hook, from ``why``.
                    held.why = why
                    self._replace(item, held, why)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.failures:
            terminalreporter.write_sep("=", "labs whose agent stopped answering (closed there)")
        for failure in self.failures:
            terminalreporter.write_line(failure)
        # A rerun attempt is no failure, so pytest prints nothing of it: its evidence (the
        # guest's console, the agent's stacks) is what says why the lab stalled.
        for report in terminalreporter.stats.get(RERUN, []):
            terminalreporter.write_sep(
                "_", f"{report.nodeid}: the attempt run again ({report.when})"
            )
            for title, text in report.sections:
                if not title.startswith("Captured"):
                    terminalreporter.write_sep("-", title)
                    terminalreporter.write_line(text)

    # -- what a failure does -----------------------------------------------------------------

    def _evidence(self, held: _Held) -> dict[str, str]:
        if held.evidence is None:
            try:
                held.evidence = held.lab.evidence()
            except Exception as exc:  # the evidence must not hide the failure
                held.evidence = {"evidence": f"could not be read: {exc!r}"}
        return held.evidence

    def _fail_report(self, report: pytest.TestReport, held: _Held, why: str) -> None:
        """The case the lab failed in fails, saying why, with the lab's evidence."""
        lab = held.lab
        failures = len(self.failures) + (0 if held.replaced else 1)
        headline = f"the {lab.tier} lab's agent stopped answering during {report.when}: {why}; " + (
            f"the session ends here (the lab failed {failures} times)"
            if failures >= self.max_failures
            else "the cases that follow run on a new lab (a rebooted guest)"
        )
        report.sections.append((f"{lab.tier} lab failed", headline))
        text_type = allure.attachment_type.TEXT
        allure.attach(headline, name=f"{lab.tier} lab failed", attachment_type=text_type)
        for title, text in self._evidence(held).items():
            report.sections.append((title, text))
            allure.attach(text, name=title, attachment_type=text_type)
        if not report.failed:
            # The case went on past the lab's failure (it caught the error, or the lab
            # failed between its calls): it still is the case the lab failed in.
            report.outcome = "failed"
            report.longrepr = headline

    def _replace(self, item: pytest.Item, held: _Held, why: str) -> None:
        """Finish the fixtures holding the failed lab, last taken first: each tears down
        what was built on it, and the last closes the lab. Their errors are the dead
        lab's (a baseline read back, a session closed): logged, not raised."""
        self._evidence(held)  # before the lab is closed, should no report have read it
        held.replaced = True
        self.failures.append(f"{item.nodeid}: {why}")
        if self._count is not None:
            self._count(FAILURE_COUNT)
        for fixturedef, request in reversed(held.fixtures):
            try:
                fixturedef.finish(request)  # the SubRequest pytest's own teardown passes
            except BaseException as exc:  # an ExceptionGroup of teardowns too
                if isinstance(exc, KeyboardInterrupt):
                    raise
                log.warning("tearing down %s after its lab failed: %r", fixturedef.argname, exc)
        if held.lab.relay is not None:
            # No fixture closed it: the one that built it failed after building it (its
            # first call to the agent), so pytest holds its error, not a teardown.
            try:
                held.lab.close()
            except Exception as exc:
                log.warning("closing a %s lab after it failed: %r", held.lab.tier, exc)
        if len(self.failures) >= self.max_failures:
            item.session.shouldstop = (
                f"the {held.lab.tier} lab's agent stopped answering "
                f"{len(self.failures)} times; last in {self.failures[-1]}"
            )
