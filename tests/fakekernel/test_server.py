"""The fake kernel as a separate process, spoken to over its Unix socket."""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakekernel import (
    DEFAULT_LAB,
    FakeKernelClient,
    FakeKernelModel,
    FakeKernelProcess,
    FakeKernelProtocolError,
    LabError,
    load_lab,
)
from plugins.kernel import Kernel, LinkChanges, LinkSpec, NsRef, VFChanges
from plugins.sdk import NamespaceHandle

from .helpers import kernel_error


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKernelProcess]:
    sock = tmp_path_factory.mktemp("fk") / "kernel.sock"
    with FakeKernelProcess(sock, DEFAULT_LAB) as proc:
        yield proc


@pytest.fixture
def client(kernel: FakeKernelProcess) -> Iterator[FakeKernelClient]:
    with kernel.client() as c:
        c.load_lab(path=DEFAULT_LAB)  # every test starts from the same host
        yield c


def scenario(k: Kernel, pod: NsRef) -> None:
    """The same calls on any Kernel: a veth into a namespace, a VF moved, a VF setting."""
    host = k.host_namespace()
    k.create_link(host, LinkSpec("veth", "host0", peer_name="eth0", peer_ns=pod, mtu=9000))
    vf = k.get_link(host, name="enp3s0f0v1")
    assert vf is not None
    k.move_link(host, vf.ifindex, pod, new_name="net1")
    k.set_link(pod, vf.ifindex, LinkChanges(up=True, mtu=9000))
    pf = k.get_link(host, name="enp3s0f0")
    assert pf is not None
    k.set_vf(host, pf.ifindex, 1, VFChanges(vlan=42, trust=True))


def test_a_veth_into_another_namespace_over_the_socket(client: FakeKernelClient) -> None:
    host = client.host_namespace()
    pod = client.add_namespace("pod")
    a = client.create_link(host, LinkSpec("veth", "host0", peer_name="eth0", peer_ns=pod))
    b = client.get_link(pod, name="eth0")
    assert b is not None
    assert (a.peer, b.peer, b.ns) == (b.ifindex, a.ifindex, pod)
    assert client.list_links(pod) == [b]
    assert (
        client.open_namespace(NamespaceHandle(pod.path, pod.device, pod.inode, pod.boot_id)) == pod
    )
    assert client.find_device("0000:03:10.0") == client.get_link(host, name="enp3s0f0v0")
    assert client.namespaces() == [host, pod]
    assert client.namespace("pod") == pod


def test_list_namespaces_over_the_socket(
    kernel: FakeKernelProcess, client: FakeKernelClient
) -> None:
    host = client.host_namespace()
    pod, alpha = client.add_namespace("pod"), client.add_namespace("alpha")
    with kernel.client() as service:  # another connection, as a service process has
        assert service.list_namespaces() == [host, alpha, pod]
        client.delete_namespace("alpha")
        assert service.list_namespaces() == [host, pod]
        assert service.list_links(pod) == []
    local: FakeKernelModel = load_lab(DEFAULT_LAB)
    local.add_namespace("pod")
    assert client.list_namespaces() == local.list_namespaces()


def test_the_process_and_an_in_process_model_agree(client: FakeKernelClient) -> None:
    local: FakeKernelModel = load_lab(DEFAULT_LAB)
    scenario(client, client.add_namespace("pod"))
    scenario(local, local.add_namespace("pod"))
    assert client.snapshot() == local.snapshot()
    pf = client.get_link(client.host_namespace(), name="enp3s0f0")
    assert pf is not None
    assert client.get_vfs(pf.ns, pf.ifindex) == local.get_vfs(pf.ns, pf.ifindex)
    client.delete_namespace("pod")
    local.delete_namespace("pod")
    assert client.snapshot() == local.snapshot()


def test_a_move_with_an_alias_over_the_socket(client: FakeKernelClient) -> None:
    """The alias travels with the move (and "" clears one)."""
    local: FakeKernelModel = load_lab(DEFAULT_LAB)
    for k in (client, local):
        host, pod = k.host_namespace(), k.add_namespace("pod")
        v0, v1 = k.get_link(host, name="enp3s0f0v0"), k.get_link(host, name="enp3s0f0v1")
        assert v0 is not None
        assert v1 is not None
        moved = k.move_link(host, v0.ifindex, pod, new_name="net1", alias="dranp:1234:x")
        assert (moved.ns, moved.name, moved.alias) == (pod, "net1", "dranp:1234:x")
        k.set_link(host, v1.ifindex, LinkChanges(alias="its own"))
        assert k.move_link(host, v1.ifindex, pod, alias="").alias is None
        k.create_link(host, LinkSpec("dummy", "enp3s0f0v0"))
        with kernel_error(errno.EEXIST):  # moved home, the rename refused: no alias set
            k.move_link(pod, v0.ifindex, host, new_name="enp3s0f0v0", alias="")
        back = k.get_link(host, name="net1")
        assert back is not None
        assert back.alias == "dranp:1234:x"
    assert client.snapshot() == local.snapshot()


def test_kernel_errors_keep_their_errno(client: FakeKernelClient) -> None:
    host = client.host_namespace()
    with kernel_error(errno.EEXIST) as info:
        client.create_link(host, LinkSpec("dummy", "foreign0"))
    assert str(info.value).startswith("[Errno 17] EEXIST: interface 'foreign0' already exists")
    with kernel_error(errno.ENODEV):
        client.delete_link(host, 9999)
    pf1 = client.get_link(host, name="enp3s0f1")
    assert pf1 is not None
    with kernel_error(errno.EOPNOTSUPP):  # the NIC variant without link-state control
        client.set_vf(host, pf1.ifindex, 0, VFChanges(link_state="enable"))
    assert client.get_link(host, name="nope") is None


def test_state_outlives_the_connection(kernel: FakeKernelProcess) -> None:
    """A service crash drops its connection; the kernel keeps what it did."""
    with kernel.client() as first:
        first.load_lab(path=DEFAULT_LAB)
        first.add_namespace("survivor")
    with kernel.client() as second:
        assert second.namespace("survivor").path == "/run/netns/survivor"


def test_concurrent_calls_from_threads(client: FakeKernelClient) -> None:
    host = client.host_namespace()
    made: list[int] = []
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                made.append(client.create_link(host, LinkSpec("dummy", f"t{n}x{i}")).ifindex)
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert len(set(made)) == 40


def test_load_lab_from_a_dict_and_lab_errors(client: FakeKernelClient) -> None:
    client.load_lab(lab={"boot_id": "other-boot", "namespaces": ["x"]})
    assert client.boot_id() == "other-boot"
    assert [ns.path for ns in client.namespaces()] == ["/proc/1/ns/net", "/run/netns/x"]
    with pytest.raises(LabError, match=r"lab\.pfs"):
        client.load_lab(lab={"pfs": "nope"})
    with pytest.raises(ValueError, match="exactly one"):
        client.load_lab()


def test_protocol_errors_are_not_kernel_errors(kernel: FakeKernelProcess) -> None:
    with kernel.client() as c, pytest.raises(FakeKernelProtocolError, match="unknown method"):
        c._call("reboot")
    with kernel.client() as c, pytest.raises(FakeKernelProtocolError, match="unknown parameters"):
        c._call("boot_id", force=True)
    with kernel.client() as c, pytest.raises(FakeKernelProtocolError, match="expected"):
        c._call("list_links", ns={"device": "x"})
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(10)
        raw.connect(str(kernel.socket_path))
        raw.sendall(b"not json\n")
        reply = json.loads(raw.makefile("rb").readline())
    assert reply["error"]["kind"] == "protocol"
    assert reply["error"]["errno"] == errno.EPROTO


def test_the_socket_is_private(kernel: FakeKernelProcess) -> None:
    assert stat.S_IMODE(os.stat(kernel.socket_path).st_mode) == 0o600


def test_the_process_stops_and_cleans_up(tmp_path: Path) -> None:
    sock = tmp_path / "k.sock"
    with FakeKernelProcess(sock) as proc:  # the default lab
        pid = proc.pid
        assert sock.is_socket()
        orphan = proc.client(timeout=10)
    assert not sock.exists()
    with pytest.raises(FakeKernelProtocolError):  # never mistaken for a kernel answer
        orphan.boot_id()
    orphan.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_bad_lab_fails_start_with_the_reason(tmp_path: Path) -> None:
    lab = tmp_path / "bad.yaml"
    lab.write_text("pfs: [{name: eth0}]\n")
    with pytest.raises(RuntimeError, match="does not encode a PCI address"):
        FakeKernelProcess(tmp_path / "k.sock", lab).start()


def test_a_refused_connect_leaves_no_socket_open(tmp_path: Path) -> None:
    """filterwarnings=error turns a leaked socket's ResourceWarning into a failure here."""
    import gc

    with pytest.raises(FileNotFoundError):
        FakeKernelClient(tmp_path / "nobody-listens.sock")
    gc.collect()


def test_a_call_cut_off_mid_exchange_leaves_no_stray_answer_for_the_next(
    client: FakeKernelClient,
) -> None:
    """A signal handler's exception (pytest-timeout, ^C) between the request and its
    answer: the answer may still arrive, so the connection is done with."""

    class CutOff(BaseException):
        pass

    reader = client._rfile

    class Interrupted:
        def readline(self) -> bytes:
            raise CutOff

    client._rfile = Interrupted()  # type: ignore[assignment]
    with pytest.raises(CutOff):
        client.boot_id()
    client._rfile = reader
    with pytest.raises(FakeKernelProtocolError, match="failed earlier"):
        client.boot_id()


def test_the_nth_kernel_change_from_now_is_held_and_released_on_demand(
    kernel: FakeKernelProcess, client: FakeKernelClient
) -> None:
    """stall_nth counts the calls the seam declares mutating (reads pass); the held call
    has taken effect; release_held lets it go at once; nothing stays armed."""
    host = client.host_namespace()
    client.stall_nth(2, 60.0, mutating=True)
    answers: list[object] = []

    def work() -> None:
        with kernel.client() as worker:
            worker.create_link(host, LinkSpec("dummy", "d1"))
            worker.get_link(host, name="d1")  # a read: not counted
            answers.append(worker.create_link(host, LinkSpec("dummy", "d2")).name)

    thread = threading.Thread(target=work)
    thread.start()
    assert client.wait_held(30.0) == "create_link"
    assert answers == []  # the second create is held ...
    assert client.get_link(host, name="d2") is not None  # ... after taking effect
    client.release_held()
    thread.join(30.0)
    assert answers == ["d2"]
    client.create_link(host, LinkSpec("dummy", "d3"))  # answered at once: nothing armed
    assert client.wait_held(0) is None


def test_a_hold_counts_reads_too_when_asked(client: FakeKernelClient) -> None:
    client.stall_nth(1, 0.2, mutating=False)
    client.boot_id()  # held for 0.2 s, then answered
    client.stall_nth(0, 0, mutating=False)  # n 0 disarms
    client.boot_id()


@pytest.mark.parametrize(
    ("method", "params", "problem"),
    [
        ("stall_nth", {"n": -1, "seconds": 1, "mutating": True}, "'n' (an int >= 0)"),
        ("stall_nth", {"n": 1, "seconds": 1}, "'mutating' (a bool)"),
        ("wait_held", {"timeout": "soon"}, "'timeout' (a number >= 0)"),
        ("stall", {"name": "add_device", "seconds": 1}, "'name' (a lab call)"),
    ],
)
def test_a_malformed_control_is_refused_naming_what_it_takes(
    client: FakeKernelClient, method: str, params: dict[str, Any], problem: str
) -> None:
    with pytest.raises(FakeKernelProtocolError, match=re.escape(problem)):
        client._call(method, **params)
