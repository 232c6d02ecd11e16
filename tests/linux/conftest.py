"""Fixtures of the netns tier: real network namespaces on this kernel (root).

``netns_dir`` decides whether the tier can run at all: it needs root and a kernel
that can create veth and macvlan links; otherwise every netns test skips with one
line. Link kinds some kernels lack (bond, vlan, ipvlan, dummy) are probed once in a
scratch namespace; their tests skip with one line naming the missing module.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from plugins.kernel import KernelError, LinkKind, LinkSpec, NsRef
from plugins.kernel.linux import LinuxKernel
from plugins.kernel.linux.netns import create_namespace, delete_namespace
from plugins.sdk import NamespaceHandle

from .helpers import senders_end

TIER = "netns tier needs root and the veth/macvlan kernel modules"
MODULES: dict[str, str] = {"bond": "bonding", "vlan": "8021q", "ipvlan": "ipvlan", "dummy": "dummy"}
HOST_NS = "/proc/self/ns/net"  # the tests' approved host namespace, given explicitly

MakeNamespace = Callable[[], NamespaceHandle]


def errno_name(code: int) -> str:
    return "EOPNOTSUPP" if code == errno.EOPNOTSUPP else errno.errorcode.get(code, str(code))


def _cleanup_dir(directory: Path) -> None:
    for entry in directory.iterdir():
        delete_namespace(entry, missing_ok=True)


def _probe(directory: Path, kind: str) -> str | None:
    """None if ``kind`` links can be created here, else why not (errno name)."""
    handle = create_namespace(directory, f"probe-{kind}-{uuid.uuid4().hex[:6]}")
    try:
        with LinuxKernel(HOST_NS) as k:
            ns = k.open_namespace(handle)
            parent = None
            if kind in ("vlan", "ipvlan", "macvlan"):
                parent = k.create_link(ns, LinkSpec(kind="veth", name="p0", peer_name="p1"))
            spec = LinkSpec(
                kind=kind,  # type: ignore[arg-type]  # probed kinds are LinkKinds
                name="probe0",
                parent=parent.ifindex if parent else None,
                vlan_id=7 if kind == "vlan" else None,
                peer_name="probe1" if kind == "veth" else None,
            )
            k.create_link(ns, spec)
        return None
    except KernelError as exc:
        return errno_name(exc.code)
    finally:
        delete_namespace(handle.path)


@pytest.fixture(scope="session")
def netns_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip(f"{TIER} (not running as root)")
    directory = tmp_path_factory.mktemp("netns")
    try:
        for kind in ("veth", "macvlan"):
            missing = _probe(directory, kind)
            if missing is not None:
                pytest.skip(f"{TIER} (creating a {kind} link failed with {missing})")
    except KernelError as exc:
        pytest.skip(f"{TIER} ({exc})")
    yield directory
    _cleanup_dir(directory)


@pytest.fixture(scope="session")
def kind_support(netns_dir: Path) -> dict[str, str | None]:
    return {kind: _probe(netns_dir, kind) for kind in MODULES}


@pytest.fixture
def require_kind(kind_support: dict[str, str | None]) -> Callable[[LinkKind], None]:
    def require(kind: LinkKind) -> None:
        missing = kind_support.get(kind)
        if missing is not None:
            pytest.skip(
                f"netns tier: the host kernel has no {MODULES[kind]} module "
                f"(creating a link of kind {kind} gives {missing})"
            )

    return require


@pytest.fixture(autouse=True)
def _senders_end() -> Iterator[None]:
    """A delete's sender thread outlives its call by the kernel's ack, and ``close`` no
    longer waits for it (it may never come): each test waits here for its senders to end,
    so none closes its socket during the next test (whose descriptor counts it would
    upset). One still running after the deadline fails the test that left it."""
    yield
    senders_end()


@pytest.fixture
def make_ns(netns_dir: Path) -> Iterator[MakeNamespace]:
    """Create named namespaces; all are deleted at teardown, also when the test fails."""
    made: list[NamespaceHandle] = []

    def make() -> NamespaceHandle:
        handle = create_namespace(netns_dir, f"t-{uuid.uuid4().hex[:10]}")
        made.append(handle)
        return handle

    yield make
    for handle in made:
        delete_namespace(handle.path, missing_ok=True)


@pytest.fixture
def kernel(netns_dir: Path) -> Iterator[LinuxKernel]:
    k = LinuxKernel(HOST_NS)
    yield k
    k.close()


@pytest.fixture
def ns_a(kernel: LinuxKernel, make_ns: MakeNamespace) -> NsRef:
    return kernel.open_namespace(make_ns())


@pytest.fixture
def ns_b(kernel: LinuxKernel, make_ns: MakeNamespace) -> NsRef:
    return kernel.open_namespace(make_ns())
