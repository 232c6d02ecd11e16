"""Fixtures of the differential tier, and its one-line session summary.

Whether a scenario can run on the real kernel is decided once per session: root is
needed, and each link kind is probed in a scratch namespace (EOPNOTSUPP: the
kernel has no module for it). Nothing here touches the machine's own namespace: the
probe, like every real world, uses a freshly created namespace as its host.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fakekernel.lab import load_lab
from labs import VmLab
from labs.vm import VmKernel
from plugins.kernel import KernelError, LinkKind, LinkSpec
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux.netns import create_namespace, delete_namespace

from .world import (
    GUEST_PFS,
    VM_LAB,
    GuestBaseline,
    errno_name,
    running_kernel_has_live_rename,
)

MODULES: dict[str, str] = {
    "veth": "veth",
    "macvlan": "macvlan",
    "bridge": "bridge",
    "bond": "bonding",
    "vlan": "8021q",
    "ipvlan": "ipvlan",
    "dummy": "dummy",
}


@dataclass
class Stats:
    """What the differential tests did in this session, for the terminal summary."""

    scenarios: set[str] = field(default_factory=set)
    ran: set[str] = field(default_factory=set)
    skipped: Counter[str] = field(default_factory=Counter)
    live_rename: bool | None = None
    # the VM lab's guest: its release, and how many scenarios agreed in what
    vm_release: str | None = None
    vm: Counter[str] = field(default_factory=Counter)


STATS = pytest.StashKey[Stats]()


@dataclass(frozen=True)
class RealKernel:
    """Whether the real tier can run: ``reason`` if not at all, else the missing kinds."""

    reason: str | None
    missing: dict[str, str]  # kind -> errno name of the probe
    directory: Path | None

    def why_not(self, kinds: frozenset[LinkKind]) -> str | None:
        if self.reason is not None:
            return self.reason
        if "device" in kinds:
            return "needs SR-IOV PFs (run in the VM lab)"
        lacking = sorted(k for k in kinds if k in self.missing)
        if not lacking:
            return None
        modules = ", ".join(MODULES.get(k, k) for k in lacking)
        word = "module" if len(lacking) == 1 else "modules"
        return f"needs kernel {word} {modules} (run in the VM lab)"


def _probe(directory: Path) -> dict[str, str]:
    """Create one link of each kind in a scratch namespace; the kinds that fail, and how."""
    handle = create_namespace(directory, f"probe-{uuid.uuid4().hex[:8]}")
    missing: dict[str, str] = {}
    try:
        with LinuxKernel(handle) as k:
            ns = k.host_namespace()
            parent = k.create_link(ns, LinkSpec(kind="veth", name="p0", peer_name="p1"))
            for kind in MODULES:
                spec = LinkSpec(
                    kind=kind,  # type: ignore[arg-type]  # every key of MODULES is a LinkKind
                    name=f"probe-{kind}",
                    parent=parent.ifindex if kind in ("vlan", "macvlan", "ipvlan") else None,
                    vlan_id=7 if kind == "vlan" else None,
                    peer_name="probe-peer" if kind == "veth" else None,
                )
                try:
                    k.create_link(ns, spec)
                except KernelError as exc:
                    missing[kind] = errno_name(exc.code)
    finally:
        delete_namespace(handle.path, missing_ok=True)
    return missing


@pytest.fixture(scope="session")
def real_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealKernel]:
    if os.geteuid() != 0:
        yield RealKernel("needs root for real network namespaces (run as root)", {}, None)
        return
    directory = tmp_path_factory.mktemp("differential-netns")
    try:
        missing = _probe(directory)
    except KernelError as exc:
        yield RealKernel(f"cannot create network namespaces here ({exc})", {}, None)
        return
    if "veth" in missing:
        yield RealKernel(f"needs kernel module veth (probe: {missing['veth']})", missing, None)
        return
    yield RealKernel(None, missing, directory)


@pytest.fixture
def stats(request: pytest.FixtureRequest) -> Stats:
    config = request.config
    if STATS not in config.stash:
        config.stash[STATS] = Stats(live_rename=running_kernel_has_live_rename())
    return config.stash[STATS]


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if STATS not in config.stash:
        return
    s = config.stash[STATS]
    skipped = sum(s.skipped.values())
    reasons = "; ".join(f"{n}x {why}" for why, n in sorted(s.skipped.items()))
    rename = "live rename" if s.live_rename else "no live rename"
    line = (
        f"differential: {len(s.scenarios)} scenarios, {len(s.ran)} ran on the real kernel "
        f"({os.uname().release}, fake with {rename}), {skipped} skipped"
    )
    if s.ran or skipped:
        terminalreporter.write_line(line + (f" ({reasons})" if reasons else ""))
    if s.vm_release is not None and s.vm["scenarios"]:
        terminalreporter.write_line(vm_summary(s))


def vm_summary(s: Stats) -> str:
    n = s.vm["scenarios"]

    def pct(key: str) -> str:
        return f"{100 * s.vm[key] / n:.1f} %"

    return (
        f"differential vm: {s.vm_release}: {n} scenarios, outcome agreement "
        f"{pct('outcome_agree')} ({s.vm['outcome_agree']}), state agreement "
        f"{pct('state_agree')} ({s.vm['state_agree']}), {s.vm['known']} known divergences"
    )


@pytest.fixture(scope="session")
def guest(vm_lab: VmLab) -> Iterator[GuestBaseline]:
    """The VM lab's guest as the corpus found it, with no VFs (put back at the end), and
    checked against the lab file the fake side models it with."""
    kernel = vm_lab.kernel
    found = {pf: kernel.sriov(pf)["numvfs"] for pf in GUEST_PFS}
    for pf, count in found.items():
        if count:
            kernel.set_sriov_numvfs(pf, 0)
    try:
        baseline = GuestBaseline(kernel)
        check_guest_matches_lab(kernel, baseline)
        yield baseline
    finally:
        for pf, count in found.items():
            if count:
                kernel.set_sriov_numvfs(pf, count)


def check_guest_matches_lab(kernel: VmKernel, baseline: GuestBaseline) -> None:
    model = load_lab(VM_LAB)
    host = model.host_namespace()
    for pf in GUEST_PFS:
        fake, real = model.get_link(host, name=pf), baseline.devices_by_name.get(pf)
        assert fake is not None, f"{pf} is not in {VM_LAB}"
        assert real is not None, f"{pf} is not in the guest"
        ours = (fake.pci_address, fake.mac, fake.mtu, fake.up, fake.min_mtu, fake.max_mtu)
        theirs = (real.pci_address, real.mac, real.mtu, real.up, real.min_mtu, real.max_mtu)
        assert ours == theirs, f"{pf}: {VM_LAB} says {ours}, the guest {theirs}"
        total = kernel.sriov(pf)["totalvfs"]
        assert model.sriov_totalvfs(pf) == total, f"{pf}: the guest has totalvfs {total}"
