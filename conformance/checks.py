"""The conformance checks in process: each check of ``conformance.suite`` run by the
in-process driver over a ``Target``. Each takes a ``Target``, a scratch directory and
the factory of the labs it builds its hosts on, and raises ``ConformanceError`` (an
AssertionError) naming what the plugin got wrong.

Run all of them with ``conformance.run_all(target, workdir)``, or one by name from
``CHECKS``; ``tests/conformance`` parametrizes them over every registration.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from plugins.sdk import NetworkPluginError

from .driver import ConformanceError, NotApplicable, expect
from .inprocess import InProcessDriver
from .suite import GENERIC_BAD_CONFIGS, SUITE, SuiteCheck, check_crash_at_every_boundary
from .target import LabFactory, Target


class Check(Protocol):
    """A check: a target, a scratch directory, and the factory of the labs it builds its
    hosts on (None: the fake kernel model)."""

    def __call__(self, target: Target, work: Path, make_lab: LabFactory | None = None) -> Any: ...


def _in_process(check: SuiteCheck) -> Check:
    def run(target: Target, work: Path, make_lab: LabFactory | None = None, **options: Any) -> Any:
        # options: what a check takes beyond the driver (crash-at-every-boundary's pick)
        return check(InProcessDriver(target, work, make_lab), **options)

    run.__name__ = check.__name__
    run.__doc__ = check.__doc__
    return run


CHECKS: dict[str, Check] = {name: _in_process(check) for name, check in SUITE.items()}


def crash_at_every_boundary(
    target: Target,
    work: Path,
    make_lab: LabFactory | None = None,
    pick: Callable[[list[Any]], list[Any]] | None = None,
) -> int:
    """``crash-at-every-boundary`` at a ``pick`` of the points (a seeded sample, on a tier
    where a crash run costs seconds); the number of crash runs."""
    return check_crash_at_every_boundary(InProcessDriver(target, work, make_lab), pick)


def run_all(target: Target, work: Path, make_lab: LabFactory | None = None) -> dict[str, str]:
    """Every check (each host a new lab from ``make_lab``; None: the fake kernel model);
    returns check -> "passed" / "not applicable: ..." (failures raise)."""
    verdicts = {}
    for name, check in CHECKS.items():
        try:
            check(target, work / name, make_lab)
            verdicts[name] = "passed"
        except NotApplicable as exc:
            verdicts[name] = f"not applicable: {exc}"
    return verdicts


__all__ = [
    "CHECKS",
    "GENERIC_BAD_CONFIGS",
    "Check",
    "ConformanceError",
    "NetworkPluginError",
    "NotApplicable",
    "crash_at_every_boundary",
    "expect",
    "run_all",
]
