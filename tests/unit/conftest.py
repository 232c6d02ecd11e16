"""Fixtures the unit modules share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..runner.test_journal_loss_service import ToyDeployment


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ToyDeployment]:
    """The toy service deployed as a real process over a toy kernel file (not started)."""
    deployment = ToyDeployment(tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()
