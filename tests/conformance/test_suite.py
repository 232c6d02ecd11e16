"""The conformance suite over all five registrations and the third-party example."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance import CHECKS, NotApplicable, Target, project_targets
from conformance.target import example_target

TARGETS = {t.name: t for t in [*project_targets(), example_target()]}


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("plugin", list(TARGETS))
def test_conformance(plugin: str, check: str, tmp_path: Path) -> None:
    target: Target = TARGETS[plugin]
    try:
        CHECKS[check](target, tmp_path)
    except NotApplicable as exc:
        pytest.skip(f"{check} does not apply to {plugin}: {exc}")
