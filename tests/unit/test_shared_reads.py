"""Shared kernel reads (``ReadSharingKernel``): one dump per namespace, only inside the block.

Recovery probes every uncertain effect inside ``EffectRegistry.shared_reads()``; there a
repeated read is answered from the first answer. Everywhere else every read asks the
kernel, a mutation forgets what was shared, errors are never remembered, and another
thread never sees this thread's answers.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from fakekernel import FakeKernelModel
from fakekernel.lab import load_lab
from plugins.effects import CREATE_SHARED_CHILD
from plugins.effects.linux import linux_effects
from plugins.kernel import Kernel, KernelError, LinkChanges, LinkSpec, ReadSharingKernel
from plugins.sdk import NamespaceHandle
from plugins.sdk.runner import (
    CrashPoint,
    CrashPoints,
    EffectContext,
    EffectRegistry,
    Observation,
    Phase,
    PhaseKind,
    Runner,
)
from tests.effects.node import LAB
from tests.runner import node as n
from tests.runner.node import ToyNode
from tests.runner.toy import ToyKernel, toy_effects, toy_registry

VF0_PCI = "0000:03:10.0"  # the lab's first VF of enp3s0f0


class Counting:
    """The fake model, counting the calls that reach it."""

    def __init__(self, model: FakeKernelModel) -> None:
        self.model = model
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.model, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted


@pytest.fixture
def counting() -> Counting:
    model = FakeKernelModel()
    model.add_namespace("pod")
    return Counting(model)


def _shared(counting: Counting) -> ReadSharingKernel:
    return ReadSharingKernel(cast(Kernel, counting))


def _handle(counting: Counting) -> NamespaceHandle:
    ref = counting.model.namespace("pod")
    return NamespaceHandle(ref.path, ref.device, ref.inode, ref.boot_id)


def test_outside_the_block_every_read_asks_the_kernel(counting: Counting) -> None:
    kernel = _shared(counting)
    ns = kernel.open_namespace(_handle(counting))
    kernel.open_namespace(_handle(counting))
    kernel.list_links(ns)
    kernel.list_links(ns)
    assert counting.calls == {"open_namespace": 2, "list_links": 2}


def test_inside_the_block_each_distinct_read_asks_once(counting: Counting) -> None:
    kernel = _shared(counting)
    host = kernel.host_namespace()
    with kernel.shared_reads():
        pod = kernel.open_namespace(_handle(counting))
        assert kernel.open_namespace(_handle(counting)) == pod
        first = kernel.list_links(pod)
        first.clear()  # a caller's own list: the next caller's is whole
        assert kernel.list_links(pod) == counting.model.list_links(pod)
        kernel.list_links(host)
        kernel.get_link(pod, name="lo")
        kernel.get_link(pod, name="lo")
        kernel.get_link(pod, ifindex=1)
    assert counting.calls == {
        "host_namespace": 1,
        "open_namespace": 1,
        "list_links": 2,  # pod and host
        "get_link": 2,  # by name and by ifindex
    }
    kernel.list_links(pod)  # the block is over: asked again
    assert counting.calls["list_links"] == 3


def test_a_mutation_forgets_what_was_shared(counting: Counting) -> None:
    kernel = _shared(counting)
    pod = counting.model.namespace("pod")
    with kernel.shared_reads():
        before = kernel.list_links(pod)
        kernel.create_link(pod, LinkSpec(kind="dummy", name="d0"))
        after = kernel.list_links(pod)
    assert counting.calls["list_links"] == 2
    assert [lk.name for lk in after] == [*(lk.name for lk in before), "d0"]


def test_a_move_with_an_alias_passes_through_and_forgets(counting: Counting) -> None:
    kernel = _shared(counting)
    host, pod = counting.model.host_namespace(), counting.model.namespace("pod")
    d0 = counting.model.create_link(host, LinkSpec(kind="dummy", name="d0"))
    with kernel.shared_reads():
        assert kernel.get_link(pod, name="net0") is None
        moved = kernel.move_link(host, d0.ifindex, pod, new_name="net0", alias="marker")
        assert kernel.get_link(pod, name="net0") == moved
    assert (moved.name, moved.alias) == ("net0", "marker")
    assert counting.calls == {"get_link": 2, "move_link": 1}


def test_a_mutation_keeps_the_namespaces_opened(counting: Counting) -> None:
    kernel = _shared(counting)
    with kernel.shared_reads():
        pod = kernel.open_namespace(_handle(counting))
        kernel.create_link(pod, LinkSpec(kind="dummy", name="d0"))
        assert kernel.open_namespace(_handle(counting)) == pod
        kernel.list_links(pod)
        kernel.delete_link(pod, counting.model.list_links(pod)[-1].ifindex)
        kernel.list_links(pod)
    assert counting.calls == {
        "open_namespace": 1,
        "create_link": 1,
        "list_links": 2,
        "delete_link": 1,
    }


def test_a_mutation_answering_a_device_answers_its_next_lookup(counting: Counting) -> None:
    """A mutation's answer that is a PCI device (read back after the change) is what the
    next ``find_device`` of that function would read: it asks nothing more."""
    model = load_lab(LAB)
    model.add_namespace("pod")
    counted = Counting(model)
    kernel = ReadSharingKernel(cast(Kernel, counted))
    vf = model.find_device(VF0_PCI)
    assert vf is not None
    with kernel.shared_reads():
        pod = kernel.open_namespace(_handle(counted))
        moved = kernel.move_link(vf.ns, vf.ifindex, pod, new_name="net1", alias="marker")
        assert kernel.find_device(VF0_PCI) == moved == model.find_device(VF0_PCI)
        up = kernel.set_link(pod, moved.ifindex, LinkChanges(up=True))
        assert kernel.find_device(VF0_PCI) == up == model.find_device(VF0_PCI)
        kernel.find_device("0000:03:10.1")  # another function: asked
        assert kernel.open_namespace(_handle(counted)) == pod  # a mutation keeps it
    assert counted.calls == {
        "open_namespace": 1,
        "move_link": 1,
        "set_link": 1,
        "find_device": 1,
    }
    kernel.find_device(VF0_PCI)  # the block is over: asked again
    assert counted.calls["find_device"] == 2


def test_errors_are_not_remembered(counting: Counting) -> None:
    kernel = _shared(counting)
    gone = NamespaceHandle("/run/netns/gone", 1, 2, counting.model.boot_id())
    with kernel.shared_reads():
        for _ in range(2):
            with pytest.raises(KernelError) as info:
                kernel.open_namespace(gone)
            assert info.value.errno in (errno.ENOENT, errno.ESTALE)
    assert counting.calls["open_namespace"] == 2


def test_another_thread_does_not_share(counting: Counting) -> None:
    kernel = _shared(counting)
    pod = counting.model.namespace("pod")
    with kernel.shared_reads():
        kernel.list_links(pod)
        other = threading.Thread(target=lambda: [kernel.list_links(pod) for _ in range(2)])
        other.start()
        other.join(30)
        kernel.list_links(pod)
    assert counting.calls["list_links"] == 3  # this thread once, the other twice


def test_nested_blocks_keep_the_outer_answers(counting: Counting) -> None:
    kernel = _shared(counting)
    pod = counting.model.namespace("pod")
    with kernel.shared_reads():
        kernel.list_links(pod)
        with kernel.shared_reads():
            kernel.list_links(pod)
        kernel.list_links(pod)
    assert counting.calls["list_links"] == 1


def test_linux_effects_share_their_reads(counting: Counting) -> None:
    """The executors the services run are bound to one ReadSharingKernel."""
    effects = linux_effects(cast(Kernel, counting))
    executor = effects.get(CREATE_SHARED_CHILD)
    assert executor is not None
    handle = _handle(counting)
    namespace = {
        "path": handle.path,
        "device": handle.device,
        "inode": handle.inode,
        "bootId": handle.boot_id,
    }

    def probe(op: str) -> Observation:
        payload = {"namespace": namespace, "name": "net1", "kind": "macvlan", "mode": "bridge"}
        ctx = EffectContext("macvlan/v1alpha1", op, "create-child", f"att-{op}", "s", payload)
        return executor.probe(ctx, {"existed": False}, None)

    with effects.shared_reads():
        assert {probe(f"op-{i}") for i in range(5)} == {Observation.ABSENT}
    assert counting.calls == {"open_namespace": 1, "list_links": 1}
    probe("op-after")
    assert counting.calls == {"open_namespace": 2, "list_links": 2}


def test_recovery_probes_inside_shared_reads(tmp_path: Path) -> None:
    """Every probe of recovery runs inside the registry's shared_reads() block."""
    created = Phase.kernel(PhaseKind.AFTER_KERNEL_CALL, 1, "create")
    armed = CrashPoint("ConnectNetwork", "op-connect", "create-peer", created)
    toy = ToyNode(tmp_path, CrashPoints(armed=armed))
    with pytest.raises(n.SimulatedCrash):
        toy.endpoint.connect_network(n.connect())
    toy.runner.abandon()
    depth: list[None] = []
    probed_inside: list[bool] = []

    @contextlib.contextmanager
    def shared_reads() -> Iterator[None]:
        depth.append(None)
        try:
            yield
        finally:
            depth.pop()

    class Recording:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.kind, self.payload_schema, self.outputs = (
                inner.kind,
                inner.payload_schema,
                inner.outputs,
            )

        def probe(self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None) -> Any:
            probed_inside.append(bool(depth))
            return self.inner.probe(ctx, before, outputs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    plain = toy_effects(ToyKernel(toy.toy_path))
    effects = EffectRegistry(
        [Recording(plain.get(kind)) for kind in sorted(plain.kinds)],
        evidence=plain.evidence,
        shared_reads=shared_reads,
    )
    runner = Runner.open(
        toy.state_dir,
        toy_registry(),
        effects,
        artifact_digest="sha256:toy-artifact",
        boot_id="boot-1",
    )
    try:
        notes = runner.recover()
    finally:
        runner.close()
    assert any("create-peer: probe at recovery: ours" in note for note in notes)
    assert probed_inside == [True]
    assert depth == []
