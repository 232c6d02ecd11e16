"""Fixtures the unit modules share."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekernel.client import FakeKernelProcess

from ..runner.test_journal_loss_service import ToyDeployment


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[ToyDeployment]:
    """The toy service deployed as a real process over a toy kernel file (not started)."""
    deployment = ToyDeployment(tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()


@pytest.fixture(scope="module")
def kernel_url() -> Iterator[str]:
    """A fake kernel server process that answers, so that only the thing under test is
    wrong (its socket under a short /tmp path: sun_path holds 107 bytes)."""
    short = Path(tempfile.mkdtemp(prefix="np-", dir="/tmp"))
    try:
        with FakeKernelProcess(short / "kernel.sock"):
            yield f"kernel+unix://{short / 'kernel.sock'}"
    finally:
        shutil.rmtree(short, ignore_errors=True)
