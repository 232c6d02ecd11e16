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

from plugins.kernel import KernelError, LinkKind, LinkSpec
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux.netns import create_namespace, delete_namespace

from .world import errno_name, running_kernel_has_live_rename

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
    if not s.scenarios:
        return
    skipped = sum(s.skipped.values())
    reasons = "; ".join(f"{n}x {why}" for why, n in sorted(s.skipped.items()))
    rename = "live rename" if s.live_rename else "no live rename"
    line = (
        f"differential: {len(s.scenarios)} scenarios, {len(s.ran)} ran on the real kernel "
        f"({os.uname().release}, fake with {rename}), {skipped} skipped"
    )
    terminalreporter.write_line(line + (f" ({reasons})" if reasons else ""))
