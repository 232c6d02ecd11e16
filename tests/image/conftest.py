"""The image tier: tests that build the OCI image with scripts/build-image (root, podman,
minutes). Opt-in: they run only when asked (``pytest -m image``); otherwise each skips
with one line. Asked for on a machine that cannot run them, they fail saying what is
missing (the tier rules of harness.pytest_plugin, which registers the marker and keeps
its tests out of ``-m fake``)."""

from __future__ import annotations

import os
import shutil

import pytest

from harness.pytest_plugin import explicitly_requested, require_lab

TIER = "image"


def missing() -> str | None:
    """What this machine lacks for the image tier (None: nothing)."""
    if os.geteuid() != 0:
        return "it needs root (debootstrap, chroot, podman's storage)"
    if shutil.which("apt-get") is None:
        return "it needs apt-get (scripts/build-image installs its tools with apt)"
    return None


@pytest.fixture(scope="session")
def image_tier(request: pytest.FixtureRequest) -> None:
    """Skips (one line) unless the run asked for the tier; fails if asked and it cannot run."""
    if not explicitly_requested(request.config, TIER):
        pytest.skip(f"{TIER} tier: opt-in (builds and runs the image, minutes): pytest -m {TIER}")
    require_lab(request.config, TIER, missing())
