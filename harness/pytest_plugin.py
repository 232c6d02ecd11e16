"""The rig's pytest plugin: lab-tier markers and their selection rules.

A test without a lab marker needs neither root nor a lab, so it is marked
``fake`` and ``pytest -m fake`` is the whole fast suite.
"""

from __future__ import annotations

import pytest

LAB_MARKERS = ("netns", "vm", "sriov")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(m) for m in LAB_MARKERS):
            item.add_marker(pytest.mark.fake)
