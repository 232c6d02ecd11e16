"""The conformance checks over the wire: each check of ``conformance.suite`` run by the
wire driver (``conformance.wire_plugin``) against a plugin a target file describes.

``run_wire`` runs them and returns one ``Verdict`` per check; ``python -m conformance
--target FILE`` prints them. What each driver can and cannot do, and so where a check is
not applicable, is ``MODES`` (docs/conformance.md has the table).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from plugins.sdk.host import PluginCallError

from .driver import ConformanceError, NotApplicable, Refused
from .suite import SUITE, SuiteCheck
from .wire_driver import WireDriverError, WireLabs
from .wire_plugin import WireDriver
from .wire_target import WireTarget

BOTH = "in-process and wire"

MODES: dict[str, tuple[str, str]] = {
    name: (BOTH, why)
    for name, why in {
        "getinfo-identity": "",
        "authentication": "",
        "wrong-step-kind": "",
        "config-rejections": "in process the rejection's path and rule are compared too",
        "replay": "",
        "reused-id": "",
        "fencing": "",
        "crash-at-every-boundary": (
            "in process at every crash point of the SDK's runner; over the wire a SIGKILL "
            "at each kernel call the fake kernel can hold (fake:// only)"
        ),
        "cleanup-without-response": (
            "in process the runner's point before the answer is journaled; over the wire "
            "a SIGKILL at the connect's last kernel change (fake:// only)"
        ),
        "repeated-cleanup": "",
        "foreign-object": "",
        "damaged-journal": "over the wire: the target file's stateFiles",
        "lost-journal": "over the wire: the target file's stateFiles",
        "concurrent-duplicates": "",
        "inspect-read-only": "in process the journal's commit count is compared too",
        "external-change": "a target file declares no tamper; in process a Target's tamper",
        "kill-and-restart": "in process the crash abandons the service's memory",
    }.items()
}


@dataclass(frozen=True)
class Verdict:
    check: str
    outcome: str  # "passed", "failed", "not applicable"
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"

    def line(self) -> str:
        mark = {"passed": "PASS", "failed": "FAIL", "not applicable": "SKIP"}[self.outcome]
        return f"{mark}  {self.check}" + (f": {self.detail}" if self.detail else "")


WireCheck = Callable[[WireTarget, WireLabs], object]


def _over_the_wire(check: SuiteCheck) -> WireCheck:
    def run(target: WireTarget, labs: WireLabs) -> object:
        return check(WireDriver(target, labs))

    run.__name__ = check.__name__
    run.__doc__ = check.__doc__
    return run


WIRE_CHECKS: dict[str, WireCheck] = {name: _over_the_wire(c) for name, c in SUITE.items()}


def run_check(target: WireTarget, name: str, labs: WireLabs) -> Verdict:
    """One check's verdict; a failure of the plugin is a verdict, never an exception."""
    try:
        result = WIRE_CHECKS[name](target, labs)
    except NotApplicable as exc:
        return Verdict(name, "not applicable", str(exc))
    except ConformanceError as exc:
        return Verdict(name, "failed", str(exc))
    except (Refused, PluginCallError) as exc:
        return Verdict(name, "failed", f"a call the check needed failed: {exc}")
    except WireDriverError as exc:
        return Verdict(name, "failed", str(exc))
    # crash-at-every-boundary counts its crash runs: each a SIGKILL at a kernel call
    return Verdict(name, "passed", f"{result} crash runs" if isinstance(result, int) else "")


def run_wire(target: WireTarget, checks: Iterable[str] | None = None) -> list[Verdict]:
    """The named checks (None: every check), in ``WIRE_CHECKS`` order."""
    names = list(WIRE_CHECKS) if checks is None else list(checks)
    unknown = [n for n in names if n not in WIRE_CHECKS]
    if unknown:
        raise KeyError(f"no wire check {', '.join(unknown)} (known: {', '.join(WIRE_CHECKS)})")
    with WireLabs(target) as labs:
        return [run_check(target, name, labs) for name in names]
