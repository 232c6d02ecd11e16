"""The Linux naming facts, defined once in the SDK (re-exported by plugins.kernel) and used by
the SDK, the kernel backends and the fake."""

from __future__ import annotations

import errno

import pytest

import plugins.kernel
import plugins.sdk
from fakekernel import FakeKernelModel
from plugins.kernel import IFNAMSIZ, PCI_ADDRESS, KernelError, LinkSpec


@pytest.mark.parametrize(
    ("address", "valid"),
    [
        ("0000:03:00.0", True),
        ("0000:03:1f.7", True),
        ("10000:e1:00.0", True),  # a VMD domain: %04x is a minimum width
        ("ffffffff:00:00.0", True),
        ("0000:03:20.0", False),  # the slot is 5 bits
        ("0000:03:00.8", False),  # the function is 3 bits
        ("000:03:00.0", False),
        ("0000:3:00.0", False),
        ("0000:03:00.0\n", False),
        ("0000:0A:00.0", False),  # sysfs prints lowercase
        ("100000000:00:00.0", False),
    ],
)
def test_pci_address_is_the_kernels_pci_name(address: str, valid: bool) -> None:
    assert (PCI_ADDRESS.match(address) is not None) is valid


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("eth0", None),
        ("x" * (IFNAMSIZ - 1), None),
        ("x" * IFNAMSIZ, "must be 1..15 bytes"),
        ("", "must be 1..15 bytes"),
        ("..", "is reserved"),
        ("a/b", "contains '/', ':' or whitespace"),
        ("a:b", "contains '/', ':' or whitespace"),
        ("a b", "contains '/', ':' or whitespace"),
        ("a\x1cb", None),  # not whitespace in the kernel's C locale
    ],
)
def test_the_kernel_rule(name: str, problem: str | None) -> None:
    found = plugins.kernel.check_interface_name(name)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_the_sdk_rule_is_the_kernel_rule_plus_printable_ascii() -> None:
    assert plugins.sdk.check_interface_name("a:b") == plugins.kernel.check_interface_name("a:b")
    assert plugins.sdk.check_interface_name("a\x1cb") == "'a\\x1cb' must be printable ASCII"
    assert plugins.sdk.check_interface_name("é0") == "'é0' must be printable ASCII"
    assert plugins.sdk.check_interface_name("eth0") is None


@pytest.mark.parametrize("name", ["x" * IFNAMSIZ, "..", "a:b", "a\tb"])
def test_the_fake_kernel_refuses_what_the_rule_refuses(name: str) -> None:
    model = FakeKernelModel()
    with pytest.raises(KernelError) as caught:
        model.create_link(model.host_namespace(), LinkSpec(kind="dummy", name=name))
    assert caught.value.code in (errno.EINVAL, errno.ERANGE)


def test_a_name_template_is_the_kernels_to_resolve_not_a_name_a_plugin_may_ask_for() -> None:
    """The kernel accepts "net%d" (it picks net0); a plugin's interface name may not be one."""
    assert plugins.kernel.check_interface_name("net%d") is None
    assert plugins.sdk.check_interface_name("net%d") == (
        "'net%d' is a name template ('%'): the kernel would choose the name"
    )
