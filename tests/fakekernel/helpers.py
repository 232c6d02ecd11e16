"""Shared builders and assertions for the fake kernel tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from fakekernel import FakeKernelModel
from plugins.kernel import KernelError, Link, LinkSpec, NsRef

ALL_CAPS = ("link_state", "trust", "spoofchk", "rate", "vlan_proto_8021ad")
PF_PCI = "0000:03:00.0"


def hardware(model: FakeKernelModel, *, caps: tuple[str, ...] = ALL_CAPS) -> None:
    """A PF with two VFs (enp3s0f0v0/v1) and a shared parent eth9 (MTU 9000), all down."""
    model.add_pf(
        "enp3s0f0",
        pci_address=PF_PCI,
        mac="02:00:00:03:00:00",
        capabilities=caps,
        vfs=[
            ("enp3s0f0v0", "0000:03:10.0", "02:00:00:03:10:00"),
            ("enp3s0f0v1", "0000:03:10.2", "02:00:00:03:10:02"),
        ],
    )
    model.add_device("eth9", pci_address="0000:05:00.0", mac="02:00:00:05:00:00", mtu=9000)


def link(model: FakeKernelModel, ns: NsRef, name: str) -> Link:
    found = model.get_link(ns, name=name)
    assert found is not None, f"no link {name!r}"
    return found


def mk(model: FakeKernelModel, ns: NsRef, kind: Any, name: str, **kw: Any) -> Link:
    return model.create_link(ns, LinkSpec(kind=kind, name=name, **kw))


@contextmanager
def kernel_error(code: int) -> Iterator[pytest.ExceptionInfo[KernelError]]:
    """Expect a KernelError with exactly this errno."""
    with pytest.raises(KernelError) as info:
        yield info
    assert info.value.errno == code, f"expected errno {code}, got {info.value!r}"
