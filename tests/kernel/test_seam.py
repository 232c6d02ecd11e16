"""The kernel seam is declared once (plugins/kernel/_protocol.py) and everything at the
boundary follows from it: the generated methods are current, every backend answers each
call under the protocol's own parameter names (the wire and the forwarding base pass
arguments by name), the declared types resolve at run time (a name imported only for
type checking would fail on a call's first use, as a vm:// run once found), and the
wrappers act on exactly the calls the table marks mutating."""

from __future__ import annotations

import errno
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

import pytest

from fakekernel import LAB_CALLS, FakeKernelClient, FakeKernelModel, LabKernel
from fakekernel.lab import load_lab
from fakekernel.server import FakeKernelServer, answer
from labs import DEFAULT_LAB
from labs.netns import NetnsKernel
from plugins.kernel import (
    KERNEL_CALLS,
    PROTOCOL_VERSION,
    ForwardingKernel,
    Kernel,
    KernelCall,
    LinkChanges,
    ReadSharingKernel,
    calls_of,
    reads,
)
from plugins.kernel.linux import LinuxKernel

REPO = Path(__file__).resolve().parents[2]
BACKENDS = [LinuxKernel, FakeKernelModel, NetnsKernel, FakeKernelClient, ReadSharingKernel]


def test_the_generated_methods_are_current() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/gen_kernel_seam.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("call", LAB_CALLS.values(), ids=lambda c: c.name)
def test_the_kernel_wires_client_takes_every_lab_call_by_the_protocols_names(
    call: KernelCall,
) -> None:
    own = inspect.signature(getattr(FakeKernelClient, call.name)).parameters
    declared = inspect.signature(call.function).parameters
    assert [(p.name, p.kind) for p in own.values()] == [(p.name, p.kind) for p in declared.values()]


def test_every_public_method_of_the_protocol_is_a_declared_call() -> None:
    public = {n for n, m in vars(Kernel).items() if callable(m) and not n.startswith("_")}
    assert public == set(KERNEL_CALLS)
    assert set(KERNEL_CALLS) < set(LAB_CALLS)


def test_an_undeclared_method_is_refused_with_its_name() -> None:
    class Half(Protocol):
        @reads()
        def declared(self) -> int: ...

        def forgotten(self) -> int: ...

    with pytest.raises(TypeError, match=r"Half\.forgotten is not declared"):
        calls_of(Half)


@pytest.mark.parametrize("call", LAB_CALLS.values(), ids=lambda c: c.name)
def test_each_calls_types_resolve_at_run_time(call: KernelCall) -> None:
    assert set(call.params) == set(inspect.signature(call.function).parameters) - {"self"}
    assert call.result is not inspect.Signature.empty


def test_the_table_says_which_calls_mutate() -> None:
    mutating = {name for name, call in KERNEL_CALLS.items() if call.mutating}
    assert mutating == {
        "create_link",
        "set_link",
        "set_link_options",
        "move_link",
        "delete_link",
        "set_vf",
    }
    # Every errno a call declares is a real errno with a reason.
    for call in LAB_CALLS.values():
        for code, why in call.errors.items():
            assert code in errno.errorcode, call.name
            assert why, call.name


def test_a_constant_is_a_read_without_parameters() -> None:
    # What the VM lab's relay answers again from its first answer (labs/_relay.py):
    # it cannot hide a change of the kernel only if it can never change.
    constants = {name for name, call in LAB_CALLS.items() if call.constant}
    assert constants == {"host_namespace"}  # boot_id: how a reboot is seen
    for name in constants:
        assert not LAB_CALLS[name].mutating
        assert not LAB_CALLS[name].params


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("call", KERNEL_CALLS.values(), ids=lambda c: c.name)
def test_every_backend_takes_each_call_under_the_protocols_parameter_names(
    backend: type, call: KernelCall
) -> None:
    method = getattr(backend, call.name)
    own = inspect.signature(method).parameters
    declared = inspect.signature(call.function).parameters
    assert [(p.name, p.kind) for p in own.values()] == [(p.name, p.kind) for p in declared.values()]


def test_a_forwarding_wrapper_overrides_only_what_it_changes() -> None:
    model = load_lab(DEFAULT_LAB)
    seen: list[tuple[str, bool]] = []

    class Watching(ForwardingKernel):
        def _kernel_call(self, call: KernelCall, arguments: dict[str, Any]) -> Any:
            seen.append((call.name, call.mutating))
            return super()._kernel_call(call, arguments)

    kernel: Kernel = Watching(model)
    host = kernel.host_namespace()
    link = kernel.get_link(host, name="enp3s0f0")
    assert link is not None
    kernel.set_link(host, link.ifindex, LinkChanges(mtu=1400))
    assert seen == [("host_namespace", False), ("get_link", False), ("set_link", True)]
    assert model.get_link(host, ifindex=link.ifindex) == kernel.get_link(host, ifindex=link.ifindex)


def ask(line: dict[str, Any]) -> dict[str, Any]:
    server = FakeKernelServer("/nonexistent", load_lab(DEFAULT_LAB))
    return answer(json.dumps(line).encode(), server.call, "test")


def test_a_request_of_another_wire_version_is_refused_naming_both() -> None:
    reply = ask({"v": PROTOCOL_VERSION - 1, "id": 1, "method": "boot_id", "params": {}})
    assert reply["error"]["kind"] == "protocol"
    assert f"version {PROTOCOL_VERSION - 1}" in reply["error"]["message"]
    assert f"speaks {PROTOCOL_VERSION}" in reply["error"]["message"]
    assert "result" in ask({"v": PROTOCOL_VERSION, "id": 2, "method": "boot_id", "params": {}})


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"ns": None, "ifindex": 1, "bogus": 2}, "unknown parameters ['bogus']"),
        ({"ifindex": 1}, "missing a required argument: 'ns'"),
    ],
)
def test_a_request_with_parameters_the_call_does_not_take_is_refused(
    params: dict[str, Any], problem: str
) -> None:
    reply = ask({"v": PROTOCOL_VERSION, "id": 1, "method": "delete_link", "params": params})
    assert reply["error"]["kind"] == "protocol"
    assert problem in reply["error"]["message"]


def test_only_declared_calls_are_served() -> None:
    # The model has helpers of its own (add_device, set_sriov_numvfs): not on the wire.
    reply = ask({"v": PROTOCOL_VERSION, "id": 1, "method": "add_device", "params": {}})
    assert reply["error"]["message"] == "unknown method 'add_device'"


def _is_a_lab_kernel(model: FakeKernelModel) -> LabKernel:
    return model
