"""The rig's pytest plugin: lab-tier markers, their selection rules, and run statistics.

A test without a lab marker needs neither root nor a lab, so it is marked ``fake`` and
``pytest -m fake`` is the whole fast suite. A lab tier that cannot run here skips with
one line saying what is missing, unless it was asked for explicitly (``-m vm``), in
which case its absence fails the run.

``--lab URL`` is what a test taking ``lab_factory`` builds its labs on (a plugin author's
conformance tests: docs/writing-a-plugin.md). A run that names a lab no selected test
runs on, or one this machine cannot run, is a usage error of one line: it never passes
on the fake kernel in the lab's place.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import allure
import pytest

from harness.guest_watch import GuestWatch
from harness.labs import LabSpec, LabURLError, parse_lab_url
from harness.report_labels import ReportLabels
from harness.sriov_labs import SriovLabs, group_name
from harness.stats import STATS_DIR_ENV
from labs import SEED_ENV, AgentLab, FakeModelLab, Lab, NetnsLab, start_state_seed
from labs.vm import KERNEL_ENV, VmLab, asked_kernel

if TYPE_CHECKING:  # testinfra and ansible-runner load only for a run of the sriov tier
    from labs import HostLab
    from labs.sriov import Inventory, SriovLab

LAB_MARKERS = ("netns", "vm", "sriov")
# Tiers that are no lab but need root and minutes, so they are not fake either; each runs
# only when -m names it (its fixture skips otherwise: tests/image/conftest.py).
OPT_IN_MARKERS = ("image",)
MARKERS = {
    "fake": "needs neither root nor a lab (unit tests and the fake-kernel tier)",
    "netns": "real Linux network namespaces on this kernel (root)",
    "vm": "the QEMU VM lab booting Debian's kernel",
    "sriov": "real SR-IOV NIC hosts from an Ansible inventory",
    "image": "builds and runs the OCI image (scripts/build-image: root, podman, minutes); "
    "opt-in: runs only under -m image",
}
STATS_KEY = pytest.StashKey["RigStats"]()
LAB_KEY = pytest.StashKey["LabSpec | None"]()
WATCH_KEY = pytest.StashKey[GuestWatch]()


@dataclass
class RigStats:
    """Counters the rig's tests add to; written to reports/summary.json by the rig."""

    counts: Counter[str] = field(default_factory=Counter)
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def fact(self, key: str, value: Any) -> None:
        """A single JSON value for the summary (a kernel release, boot seconds)."""
        self.facts[key] = value


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lab",
        default=None,
        metavar="URL",
        help="the lab of the run's lab tier, and what the lab_factory fixture builds: fake:// "
        "(default), netns://, vm://?kernel=6.12 (default vm://), sriov://INVENTORY (the "
        "sriov tier needs it); fake:// and netns:// take no options. A lab no selected "
        "test runs on, or one this machine cannot run, fails the run",
    )
    parser.addoption(
        "--lab-reruns",
        type=int,
        default=0,
        metavar="N",
        help="run a case whose lab's agent stopped answering again on a new lab, up to N "
        "times (harness.guest_watch; scripts/rig asks for 1 on the vm and sriov tiers)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Registered here, not only in this repository's pyproject, so --strict-markers
    # holds in any repository that installs the kit (the pytest11 entry point).
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")
    config.stash[STATS_KEY] = RigStats()
    url = config.getoption("lab", None)
    try:
        spec = parse_lab_url(url) if url else None
    except LabURLError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[LAB_KEY] = spec
    if spec is not None and spec.tier == "vm":
        os.environ[KERNEL_ENV] = spec.kernel  # the guest every vm test boots (asked_kernel)
    # The report's tree (lab, family, file) and each test's true host label.
    config.pluginmanager.register(ReportLabels(), "dra-networkplugins-report-labels")
    # A lab whose agent stops answering fails its case and is replaced (harness.guest_watch).
    config.stash[WATCH_KEY] = GuestWatch(
        count=config.stash[STATS_KEY].add, reruns=config.getoption("lab_reruns", 0)
    )
    config.pluginmanager.register(config.stash[WATCH_KEY], "dra-networkplugins-guest-watch")


def asked_lab(config: pytest.Config) -> LabSpec | None:
    """The run's ``--lab`` (None: not given)."""
    return config.stash.get(LAB_KEY, None)


def pytest_report_header(config: pytest.Config) -> str:
    url = config.getoption("lab", None) or "fake:// (no --lab)"
    return f"lab: {url}, start-state seed {start_state_seed()} ({SEED_ENV} changes it)"


def pytest_collection_finish(session: pytest.Session) -> None:
    """``--lab`` must be used, and usable: one line, exit 4, before any test runs.

    Without this, a suite whose tests take no lab ran on the fake kernel and passed
    under ``--lab netns://``. An xdist controller collects nothing (its workers check)."""
    spec = asked_lab(session.config)
    if spec is None or spec.tier == "fake" or not session.items:
        return
    url = session.config.getoption("lab")
    if not any(item.get_closest_marker(spec.tier) for item in session.items):
        raise pytest.UsageError(
            f"--lab {url}: no selected test runs on it (none takes the lab_factory fixture or "
            f"is marked {spec.tier}); they would run on the fake kernel instead"
        )
    missing = spec.missing()
    if missing is not None:
        raise pytest.UsageError(f"--lab {url}: this machine cannot run it: {missing}")


@pytest.fixture(scope="session")
def rig_stats(request: pytest.FixtureRequest) -> RigStats:
    return request.config.stash[STATS_KEY]


SRIOV_GROUP_PROPERTY = "sriov_group"
"""A case's SR-IOV group of hosts, in its reports' ``user_properties`` (which xdist
carries to the controller): how the rig's summary counts each group's outcomes."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(m) for m in (*LAB_MARKERS, *OPT_IN_MARKERS)):
            item.add_marker(pytest.mark.fake)
        group = item.get_closest_marker("xdist_group")
        if group is not None and item.get_closest_marker("sriov") is not None:
            item.user_properties.append((SRIOV_GROUP_PROPERTY, group.kwargs["name"]))


def explicitly_requested(config: pytest.Config, tier: str) -> bool:
    """True when the run's -m expression names this tier (then a missing lab is a failure)."""
    expression = config.getoption("markexpr", "") or ""
    return tier in expression.replace("(", " ").replace(")", " ").split()


def require_lab(config: pytest.Config, tier: str, missing: str | None) -> None:
    """Skip (one line) or fail when the lab of ``tier`` cannot run here."""
    if missing is None:
        return
    if explicitly_requested(config, tier):
        pytest.fail(f"{tier} tier was requested but cannot run: {missing}", pytrace=False)
    pytest.skip(f"{tier} tier: {missing}")


@pytest.fixture(scope="session")
def vm_lab(request: pytest.FixtureRequest) -> Iterator[VmLab]:
    """The session's one guest (``DRANP_VM_KERNEL``, default 6.1): every vm test shares
    it, since a boot under TCG takes minutes. Tests leave it as they found it (their own
    namespaces, deleted at the end); the first test to ask boots it, in its setup. A guest
    whose agent stops answering fails the case it hung in, and the next test to ask
    boots a new one (``harness.guest_watch``)."""
    kernel = asked_kernel()
    require_lab(request.config, "vm", parse_lab_url(f"vm://?kernel={kernel}").missing())
    lab = request.config.stash[WATCH_KEY].build(request, lambda: VmLab(kernel))
    stats = request.config.stash[STATS_KEY]
    stats.fact("vm_kernel", kernel)
    stats.fact("kernel_release", lab.kernel.release())
    stats.fact("boot_seconds", round(lab.boot_seconds, 1))
    stats.fact("qemu_version", lab.qemu_version)
    try:
        yield lab
    finally:
        lab.close()
    assert lab.process.poll() is not None, "the guest outlived close()"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking ``nic_lab`` runs on every NIC lab: the VM lab's guest (marked
    ``vm``) and each host of the ``--lab sriov://`` inventory (marked ``sriov``; without
    one, a single ``sriov`` case that skips or fails saying so). A test taking
    ``sriov_lab`` runs once per group of the inventory's hosts (``Inventory.groups``).
    Every sriov case is marked with its group's ``xdist_group``: under ``harness.rig``
    each group runs on a worker of its own."""
    config = metafunc.config
    if "lab_factory" in metafunc.fixturenames:
        metafunc.parametrize("lab_factory", lab_factory_params(config), indirect=True)
    if "sriov_group" in metafunc.fixturenames:
        metafunc.parametrize(
            "sriov_group", sriov_group_params(config), indirect=True, scope="session"
        )
    if "nic_lab" not in metafunc.fixturenames:
        return
    params = [pytest.param("vm", marks=pytest.mark.vm, id="vm"), *sriov_host_params(config)]
    metafunc.parametrize("nic_lab", params, indirect=True, scope="session")


def sriov_host_params(config: pytest.Config, *marks: pytest.MarkDecorator) -> list[Any]:
    """One case per host of the run's ``sriov://`` inventory (``sriov/<host>``, marked
    ``sriov``, its group's ``xdist_group`` and ``marks``); without one a single ``sriov``
    case, which skips or fails saying why (the ``sriov_labs`` fixture)."""
    spec = asked_lab(config)
    inventory = sriov_inventory(spec)
    if inventory is None:
        return [pytest.param("sriov", marks=[pytest.mark.sriov, *marks], id="sriov")]
    return [
        pytest.param(
            f"sriov/{host}",
            marks=[pytest.mark.sriov, _group_mark(group), *marks],
            id=f"sriov-{host}",
        )
        for group in inventory.groups()
        for host in group
    ]


def sriov_group_params(config: pytest.Config) -> list[Any]:
    """One case per group of hosts of the run's ``sriov://`` inventory (see above)."""
    inventory = sriov_inventory(asked_lab(config))
    if inventory is None:
        return [pytest.param((), marks=pytest.mark.sriov, id="sriov")]
    return [
        pytest.param(
            group, marks=[pytest.mark.sriov, _group_mark(group)], id=f"sriov-{group_name(group)}"
        )
        for group in inventory.groups()
    ]


def _group_mark(group: tuple[str, ...]) -> pytest.MarkDecorator:
    return pytest.mark.xdist_group(name=group_name(group))


def lab_factory_params(config: pytest.Config) -> list[Any]:
    """The labs of a test taking ``lab_factory``: the one ``--lab`` names (fake:// without
    it), marked with its tier; under ``sriov://``, each host of the inventory."""
    spec = asked_lab(config) or parse_lab_url("fake://")
    tier = spec.tier
    if tier != "sriov":
        return [pytest.param(tier, marks=getattr(pytest.mark, tier), id=tier)]
    return sriov_host_params(config)


@pytest.fixture
def lab_factory(request: pytest.FixtureRequest) -> Iterator[Callable[[], Lab]]:
    """A factory of fresh labs on the run's ``--lab`` (``conformance.LabFactory``: pass
    it to the conformance checks): ``fake://`` (also without ``--lab``) the fake kernel
    model in this process, ``netns://`` a ``NetnsLab`` on this machine's kernel (root),
    ``vm://`` a session of the run's guest, ``sriov://`` a session of one host (one case
    per host). Each starts from the run's seeded random state; labs a test left open are
    closed after it."""
    tier, _, host = str(request.param).partition("/")
    factory: Callable[[], Lab]
    if tier == "fake":
        factory = FakeModelLab
    elif tier == "netns":
        factory = lambda: NetnsLab(randomize=True)  # noqa: E731 - the factory is the value
    elif tier == "vm":
        factory = request.getfixturevalue("vm_lab").session
    else:
        factory = sriov_host_lab(request, host).session
    made: list[Lab] = []

    def make() -> Lab:
        lab = factory()
        made.append(lab)
        return lab

    yield make
    for lab in reversed(made):
        lab.close()


def sriov_inventory(spec: LabSpec | None) -> Inventory | None:
    """The run's ``sriov://`` inventory (None: no such lab, or it does not load)."""
    if spec is None or spec.tier != "sriov":
        return None
    from labs.sriov import InventoryError, load_inventory

    try:
        return load_inventory(Path(spec.target))
    except (InventoryError, OSError):
        return None


@pytest.fixture(scope="session")
def nic_lab(request: pytest.FixtureRequest) -> AgentLab:
    """The machine of this case (``pytest_generate_tests``): the session's guest, or one
    host of the session's SR-IOV lab."""
    tier, _, host = str(request.param).partition("/")
    if tier == "vm":
        lab: AgentLab = request.getfixturevalue("vm_lab")
        request.config.stash[WATCH_KEY].hold(request, lab)  # replaced with the guest
        return lab
    return sriov_host_lab(request, host)


@pytest.fixture(scope="session")
def sriov_labs(request: pytest.FixtureRequest) -> Iterator[SriovLabs]:
    """The ``--lab sriov://INVENTORY`` hosts: each group's lab provisioned when its first
    case asks (``harness.sriov_labs``), each checked at the end to be left as found."""
    spec = asked_lab(request.config)
    if spec is None or spec.tier != "sriov":
        require_lab(request.config, "sriov", "it needs --lab sriov://INVENTORY")
        raise AssertionError("unreachable")  # require_lab skipped or failed
    require_lab(request.config, "sriov", spec.missing())
    labs = SriovLabs(Path(spec.target))
    try:
        yield labs
    finally:
        labs.close()  # teardown, and the testinfra checks that no trace is left


@pytest.fixture(scope="session")
def sriov_group(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The group of hosts of this case (``pytest_generate_tests``)."""
    group: tuple[str, ...] = request.param
    return group


@pytest.fixture(scope="session")
def sriov_lab(request: pytest.FixtureRequest, sriov_group: tuple[str, ...]) -> SriovLab:
    """The provisioned lab of this case's group of hosts (one case per group)."""
    labs: SriovLabs = request.getfixturevalue("sriov_labs")
    if not sriov_group:
        raise AssertionError("unreachable: sriov_labs skips or fails without an inventory")
    return _recorded(request, labs.lab_of(sriov_group[0]))


def sriov_host_lab(request: pytest.FixtureRequest, host: str) -> HostLab:
    """The lab of one host of the run's inventory (its group's, made on first use)."""
    labs: SriovLabs = request.getfixturevalue("sriov_labs")
    return _recorded(request, labs.lab_of(host)).host_lab(host)


def _recorded(request: pytest.FixtureRequest, lab: SriovLab) -> SriovLab:
    """``lab``, its hosts' testbeds and provisioning recorded in the run's facts once."""
    stats = request.config.stash[STATS_KEY]
    hosts = stats.facts.setdefault("hosts", {})
    if not set(lab.testbeds) <= set(hosts):
        hosts.update(lab.testbeds)
        assert lab.provisioning is not None
        stats.add("provisioning_changed", lab.provisioning.changed)
        stats.fact(
            "sriov_groups",
            sorted({*stats.facts.get("sriov_groups", []), group_name(tuple(lab.testbeds))}),
        )
    return lab


@pytest.fixture(autouse=True)
def _vm_kernel_in_report(request: pytest.FixtureRequest) -> None:
    """A vm test's Allure result names the guest's kernel, so one report holds the two
    kernels' runs side by side rather than as retries of one test."""
    if request.node.get_closest_marker("vm") is not None:
        kernel = asked_kernel()
        allure.dynamic.parameter("kernel", kernel)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Each process (xdist worker or not) leaves its counters where the rig can add them up."""
    directory = os.environ.get(STATS_DIR_ENV)
    if not directory:
        return
    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    stats = session.config.stash[STATS_KEY]
    written = {"counts": dict(stats.counts), "facts": stats.facts}
    (Path(directory) / f"stats-{worker}.json").write_text(json.dumps(written))
