"""Where each test sits in the Allure report's tree, and the truth of its ``host`` label.

The tree groups by lab first, then by family, then by file: ``parentSuite`` is the lab
the test ran on (``fake``, ``netns``, ``vm 6.1``, ``sriov <host>``), ``suite`` its family
(``conformance``, ``crashes``, ``topologies``, ``differential``, else its directory
under ``tests``), ``subSuite`` its file. Left to allure-pytest, every test sat under its
file path below one ``tests`` node, whatever lab it ran on.

``host`` names where the kernel calls went: the fake kernel model, this machine (netns:
its hostname, marked as such),
the guest, the SR-IOV host. allure-pytest labels every test with this machine's hostname
(which is ``vm`` on the CI runner, so fake-tier cases read as run in a VM); a test's own
``host`` label now wins (``KeepOwnHost``).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import allure
import allure_commons
import pytest

from labs.vm import asked_kernel

LAB_TIERS = ("netns", "vm", "sriov")  # a test marked with none of these is a fake-tier one

FAMILIES = (
    ("tests/conformance/", "conformance"),
    ("tests/rig/test_rig_", "rig"),
    ("tests/rig/test_report", "rig"),
    ("tests/rig/", "crashes"),
    ("tests/e2e/", "topologies"),
    ("tests/differential/", "differential"),
)
"""A test's family by where its file is (the first prefix that matches); a test elsewhere
is of its directory's family (``tests/unit/...``: ``unit``)."""


def tier_of(item: pytest.Item) -> str:
    return next((t for t in LAB_TIERS if item.get_closest_marker(t) is not None), "fake")


def _lab_param(item: pytest.Item) -> str:
    """The lab a parametrized case runs on (``nic_lab``, ``make_lab``: ``sriov/<host>``)."""
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    return next((str(params[k]) for k in ("nic_lab", "make_lab") if k in params), "")


def lab_label(item: pytest.Item) -> str:
    """The lab a test runs on, as the tree's first level names it."""
    tier = tier_of(item)
    if tier == "vm":
        return f"vm {asked_kernel()}"
    if tier == "sriov":
        host = _lab_param(item).partition("/")[2]
        return f"sriov {host}" if host else "sriov"
    return tier


def host_label(item: pytest.Item) -> str:
    """Where the test's kernel calls went."""
    tier = tier_of(item)
    if tier == "fake":
        return "fakekernel (model)"
    if tier == "netns":
        return f"{socket.gethostname()} (netns)"  # the CI runner's name is "vm"
    if tier == "vm":
        return f"vm guest (kernel {asked_kernel()})"
    return _lab_param(item).partition("/")[2] or "sriov hosts"


def family_of(path: str) -> str:
    """The family of a test file (``path`` relative to the rootdir, ``/``-separated)."""
    for prefix, family in FAMILIES:
        if path.startswith(prefix):
            return family
    parts = path.split("/")
    if parts[0] == "tests" and len(parts) > 2:
        return parts[1]
    return parts[-2] if len(parts) > 1 else "tests"


def _relative(item: pytest.Item) -> str:
    path = Path(item.path)
    try:
        return path.relative_to(item.config.rootpath).as_posix()
    except ValueError:
        return path.as_posix()


class ReportLabels:
    """A pytest plugin (``harness.pytest_plugin`` registers it): every collected test gets
    the tree's labels and its ``host`` label as allure marks, which allure-pytest applies
    however the test ends (a test skipped in a session fixture's setup too)."""

    def __init__(self) -> None:
        self._host = KeepOwnHost()

    def pytest_configure(self, config: pytest.Config) -> None:
        allure_commons.plugin_manager.register(self._host)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        allure_commons.plugin_manager.unregister(self._host)

    @pytest.hookimpl(trylast=True)  # after the tier markers are added
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            path = _relative(item)
            labels = {
                "parentSuite": lab_label(item),
                "suite": family_of(path),
                "subSuite": Path(path).stem,
                "host": host_label(item),
            }
            for name, value in labels.items():
                mark = allure.label(name, value)  # type: ignore[no-untyped-call]
                if isinstance(mark, pytest.MarkDecorator):  # allure-pytest is loaded
                    item.add_marker(mark)


class KeepOwnHost:
    """An allure-commons plugin: of a result's ``host`` labels, keep the first (the
    test's own, from its marks; allure-pytest appends the machine's hostname after it)."""

    @allure_commons.hookimpl(tryfirst=True)
    def report_result(self, result: Any) -> None:
        hosts = [label for label in result.labels if label.name == "host"]
        for extra in hosts[1:]:
            result.labels.remove(extra)
