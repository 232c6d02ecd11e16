"""The conformance suite over all five registrations of this project."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance import CHECKS, NotApplicable, Target, project_targets

TARGETS = {t.name: t for t in project_targets()}


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("plugin", list(TARGETS))
def test_conformance(plugin: str, check: str, tmp_path: Path) -> None:
    target: Target = TARGETS[plugin]
    try:
        CHECKS[check](target, tmp_path)
    except NotApplicable as exc:
        pytest.skip(f"{check} does not apply to {plugin}: {exc}")
