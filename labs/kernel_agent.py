"""The VM lab's guest agent: the guest's real kernel served over one byte stream.

Under TCG one ``ip`` exec costs about a second in the guest and Python starts slowly,
so the guest runs one long-lived process, this agent, and only kernel calls cross into
it. It speaks the kernel wire of the fake kernel server (``fakekernel/server.py``: one
JSON object per line each way, the calls of ``fakekernel.LAB_CALLS``, answered through
the same ``answer`` and ``dispatch``), so the host talks to it with ``FakeKernelClient``
unchanged. The server itself is tied to the model (it listens on a Unix socket, it can
replace its model), so this module serves any ``LabKernel`` over a stream it is handed:
in the guest, a virtio-serial port whose host end is a Unix socket of QEMU's.

Besides the kernel and lab methods, the agent answers what only the guest can see:
``release`` (the guest kernel's ``uname -r``), ``sriov`` (a PF's ``sriov_totalvfs`` and
``sriov_numvfs``) and ``set_sriov_numvfs`` (which returns once the VFs' netdevs exist),
and traffic (``labs._traffic``: an address in a namespace, pings in the background).

The guest's own root namespace is the lab's node (it holds the emulated igb PFs, as a
node holds its NICs), pinned beside the lab's other namespaces under ``/run``; the
kernel the agent serves is a ``labs.netns.NetnsKernel`` over it, so named namespaces and
the snapshot are exactly the netns lab's, computed in the guest.

**Lab sessions**: a fresh lab per crash run without rebooting. ``open_session(seed)``
builds a ``labs.netns.NetnsLab`` in the guest (its own node and wire namespaces, the
parents ``enp3s0f0``..``enp3s0f2`` as veth ends, the random start state of ``seed``) and
answers its id; a request carrying ``"session": id`` (the host's relay adds it for the
session's own socket, ``labs._relay``) runs on that lab's kernel; ``close_session(id)``
deletes the lab's namespaces and returns once every one of them is dead (so a physical
device moved into one is back in the guest's root namespace).

Run in the guest as ``python -m labs.kernel_agent --port dranp.kernel``; it prints
``READY`` once serving, and exits (and with it the guest) when the host hangs up.
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import functools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from fakekernel import LabKernel
from fakekernel.server import ProtocolError, answer, dispatch
from plugins.kernel import KernelError, Link, LinkChanges, LinkSpec, NsRef, kernel_error
from plugins.sdk import NamespaceHandle

from ._guest import (
    GUEST_METHODS,
    GUEST_PARAMS,
    GuestSide,
    give_pfs_link_once,
    load_link_modules,
)
from ._traffic import TRAFFIC_METHODS, TRAFFIC_PARAMS, TrafficSide

if TYPE_CHECKING:
    from .netns import NetnsKernel

__all__ = ["PORT_NAME", "READY", "GuestSide", "KernelAgent", "SessionLab", "main"]

PORT_NAME = "dranp.kernel"  # the virtserialport's name: /dev/virtio-ports/<name> in the guest
READY = "dranp-kernel-agent ready"
# Lab sessions: the methods and their parameters' types (plain JSON scalars).
SESSION_PARAMS: dict[str, dict[str, type]] = {
    "open_session": {"seed": int, "lend": dict},
    "close_session": {"session": str},
}
# How long a closed session's namespaces may take to die (cleanup_net, under TCG).
SESSION_DEATH_DEADLINE_S = 60.0
# A request unanswered this long prints every thread's stack on stderr (the guest's
# console, an SSH session's stderr): the host gives up at labs.CALL_TIMEOUT_S (120 s),
# and what the agent was stuck in is then in the log the failure shows.
STALL_REPORT_S = 60.0


class SessionLab(Protocol):
    """What the agent needs of a session's lab: its kernel, and closing it."""

    @property
    def kernel(self) -> LabKernel: ...

    def close(self) -> None: ...


class KernelAgent:
    """Answers the fake kernel protocol's requests with ``kernel`` (any ``LabKernel``),
    for the guest-only methods with ``guest`` (None: they are unknown), and runs lab
    sessions made by ``open_lab(seed, lend)`` (None: ``open_session`` is unknown)."""

    def __init__(
        self,
        kernel: LabKernel,
        guest: GuestSide | None = None,
        open_lab: Callable[[int, dict[str, str]], SessionLab] | None = None,
        traffic: TrafficSide | None = None,
    ) -> None:
        self.kernel = kernel
        self.guest = guest
        self.open_lab = open_lab
        self.traffic = traffic
        self.sessions: dict[str, SessionLab] = {}
        self._opened = 0

    def handle(self, line: bytes) -> dict[str, Any]:
        session = _session_of(line)
        if session is None:
            return answer(line, self.call, "kernel agent")
        return answer(line, functools.partial(self.session_call, session), "kernel agent")

    def call(self, method: str, params: dict[str, Any]) -> Any:
        if method in GUEST_METHODS and self.guest is not None:
            return _shaped_call(self.guest, method, params, GUEST_PARAMS[method])
        if method in TRAFFIC_METHODS and self.traffic is not None:
            return _shaped_call(self.traffic, method, params, TRAFFIC_PARAMS[method])
        if method in SESSION_PARAMS and self.open_lab is not None:
            return _shaped_call(self, method, params, SESSION_PARAMS[method])
        return _kernel_call(self.kernel, method, params)

    def session_call(self, session: Any, method: str, params: dict[str, Any]) -> Any:
        """A kernel or lab method on the session's lab (nothing else runs in a session)."""
        lab = self.sessions.get(session) if isinstance(session, str) else None
        if lab is None:
            raise ProtocolError(f"no open session {session!r}")
        return _kernel_call(lab.kernel, method, params)

    def open_session(self, seed: int, lend: dict[str, Any]) -> str:
        """A new lab of the start state ``seed``, holding the guest's devices ``lend``
        names (root name -> name in the session); answers the session's id."""
        assert self.open_lab is not None
        if not all(isinstance(v, str) for v in lend.values()):
            raise ProtocolError("open_session: lend maps device names to names")
        self._opened += 1
        name = f"s{self._opened}"
        self.sessions[name] = self.open_lab(seed, lend)
        return name

    def close_session(self, session: str) -> None:
        lab = self.sessions.pop(session, None)
        if lab is None:
            raise ProtocolError(f"no open session {session!r}")
        lab.close()

    def close(self) -> None:
        """Stop the pings and close every session still open (the host hung up)."""
        if self.traffic is not None:
            self.traffic.close()
        for name in list(self.sessions):
            self.close_session(name)

    def serve(self, incoming: BinaryIO, outgoing_fd: int) -> None:
        """Answer each request line until the stream ends (the host hung up)."""
        answered_count = 0
        for line in incoming:
            if not line.strip():
                continue
            faulthandler.dump_traceback_later(STALL_REPORT_S)
            try:
                answered = self.handle(line)
            finally:
                faulthandler.cancel_dump_traceback_later()
            _write_all(outgoing_fd, json.dumps(answered).encode() + b"\n")
            answered_count += 1
        # Said on stderr (the guest's agent log): an agent that ends quietly is otherwise
        # told apart from one that died only by the absence of a traceback.
        print(
            f"kernel agent: end of the request stream after {answered_count} requests",
            file=sys.stderr,
            flush=True,
        )


def _session_of(line: bytes) -> Any:
    """The request's ``session`` (None: the guest's own kernel, or not a request: then
    ``answer`` names what is wrong with it)."""
    try:
        request = json.loads(line)
    except ValueError:
        return None
    return request.get("session") if isinstance(request, dict) else None


def _kernel_call(kernel: LabKernel, method: str, params: dict[str, Any]) -> Any:
    return dispatch(kernel, method, params)


def _shaped_call(
    target: object, method: str, params: dict[str, Any], shape: dict[str, type]
) -> Any:
    if set(params) != set(shape) or any(
        type(params[name]) is not kind for name, kind in shape.items()
    ):
        wanted = ", ".join(f"{n} ({k.__name__})" for n, k in shape.items()) or "nothing"
        raise ProtocolError(f"{method} takes {wanted}")
    handler: Callable[..., Any] = getattr(target, method)
    return handler(**params)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class GuestSession:
    """A lab session in the guest: a ``NetnsLab`` (fresh node and wire namespaces, the
    parents and the random start state of ``seed``) whose ``close()`` returns only once
    all its namespaces are dead.

    Death is watched as ``NetnsKernel.delete_namespace`` watches it: a veth from each of
    the session's namespaces into the agent's ``wire`` namespace, which dies with it.
    Physical devices never die with a namespace: the kernel moves them back to the
    guest's root namespace under the name they had; ``lend`` (a root device's name ->
    its name in the session's node) moves some in at open, and close gives each back
    its root name, MTU, MAC, alias and admin state, and its ifindex when the device was
    made again meanwhile (a VF, by a ``sriov_numvfs`` round trip).
    """

    def __init__(self, root: NetnsKernel, seed: int, lend: dict[str, str] | None = None) -> None:
        from .netns import PARENTS, NetnsLab

        self.root = root
        self.lend = dict(lend or {})
        host = root.host_namespace()
        lent = [root.get_link(host, name=name) for name in self.lend]
        missing = [n for n, link in zip(self.lend, lent, strict=True) if link is None]
        if missing:
            raise kernel_error(errno.ENODEV, f"no device {missing} in the guest to lend")
        self.lent = [link for link in lent if link is not None]
        parents = [p for p in PARENTS if p not in self.lend.values()]
        try:
            self.lab = NetnsLab(
                start_seed=seed, parents=parents, randomize=True, furnish_node=self._move_in
            )
        except BaseException:
            self._give_back()  # the lab deleted its namespaces: the lent devices come home
            raise

    def _move_in(self, session: NetnsKernel) -> None:
        """The lent devices into the session's node while it is empty, so each keeps its
        ifindex there (Linux renumbers a device moved onto a taken ifindex and keeps the
        new one), and so again back home in the root namespace."""
        root = self.root
        host = root.host_namespace()
        target = root.open_namespace(_handle_of(session.host_namespace()))
        try:
            for link in self.lent:
                if link.up:
                    root.set_link(host, link.ifindex, LinkChanges(up=False))
                root.move_link(host, link.ifindex, target, new_name=self.lend[link.name])
        finally:
            root.linux.release_namespace(target)

    @property
    def kernel(self) -> NetnsKernel:
        return self.lab.kernel

    def close(self) -> None:
        from .netns import DEATH_MARKER, _link_events

        wire = self.root.wire
        session = self.lab.kernel
        witnesses = []
        far_end = session.open_namespace(_handle_of(wire))
        for i, ns in enumerate(session.namespaces()):
            name = f"{self.lab.directory.name[-8:]}{i}"[-15:]
            spec = LinkSpec(kind="veth", name=DEATH_MARKER, peer_name=name, peer_ns=far_end)
            session.create_link(ns, spec)
            witnesses.append(name)
        with _link_events(wire.path) as events:
            self.lab.close()
            deadline = time.monotonic() + SESSION_DEATH_DEADLINE_S
            while alive := [w for w in witnesses if self.root.get_link(wire, name=w)]:
                if not events.wait(deadline - time.monotonic()):
                    raise kernel_error(
                        errno.ETIMEDOUT,
                        f"session namespaces still alive {SESSION_DEATH_DEADLINE_S:g} s after "
                        f"close ({len(alive)} of {len(witnesses)}): something holds them",
                    )
        self._give_back()

    def _give_back(self) -> None:
        """Each lent device back under its root name and state, once the kernel brought
        it home (under the name it had in the session) as its namespace died."""
        from ._guest import renumber
        from .netns import _link_events

        root = self.root
        host = root.host_namespace()
        deadline = time.monotonic() + SESSION_DEATH_DEADLINE_S
        for before in self.lent:
            assert before.pci_address is not None
            with _link_events(host.path) as events:
                while (now := root.find_device(before.pci_address)) is None or (
                    now.ns.key != host.key
                ):
                    if not events.wait(deadline - time.monotonic()):
                        raise kernel_error(
                            errno.ETIMEDOUT,
                            f"{before.name} ({before.pci_address}) not back in the root "
                            f"namespace {SESSION_DEATH_DEADLINE_S:g} s after its session closed",
                        )
            if now.up:
                now = root.set_link(host, now.ifindex, LinkChanges(up=False))
            now = self._rename_home(now, before.name, deadline)
            if now.ifindex != before.ifindex:
                # The device was removed and made again while lent (an administrator's
                # sriov_numvfs round trip), and Linux numbered it anew: the root
                # namespace's links are known by ifindex, so it gets its own back.
                renumber(host.path, root.wire.path, now.name, before.ifindex)
                found = root.get_link(host, ifindex=before.ifindex)
                if found is None:
                    raise kernel_error(errno.ENODEV, f"{now.name} lost on its way home")
                now = found
            # The alias too: a check that loses a journal on purpose leaves its marker on
            # the device, as it must; the next session's lab starts without it.
            changes = LinkChanges(
                mtu=None if now.mtu == before.mtu else before.mtu,
                mac=None if now.mac == before.mac else before.mac,
                alias=None if now.alias == before.alias else (before.alias or ""),
            )
            if changes != LinkChanges():
                now = root.set_link(host, now.ifindex, changes)
            if before.up:
                root.set_link(host, now.ifindex, LinkChanges(up=True))

    def _rename_home(self, link: Link, name: str, deadline: float) -> Link:
        """``link`` named ``name`` again. The guest's udev sees the device come home (an
        add event in the root namespace) and may rename it meanwhile, to its udev name:
        the same as ours, or, while it holds another, EEXIST until udev is done."""
        from .netns import _link_events

        root = self.root
        host = root.host_namespace()
        with _link_events(host.path) as events:
            while link.name != name:
                try:
                    return root.set_link(host, link.ifindex, LinkChanges(name=name))
                except KernelError as exc:
                    if exc.code != errno.EEXIST:
                        raise
                    holder = root.get_link(host, name=name)
                    if holder is not None and holder.ifindex == link.ifindex:
                        if holder.name == name:
                            return holder
                        # ``name`` is the device's own altname: the guest's udev gave it
                        # its predictable name as an alternative one when it came home
                        # under the session's name. Drop it, then rename.
                        _drop_altname(holder.name, name)
                        continue
                    if not events.wait(deadline - time.monotonic()):
                        raise kernel_error(
                            errno.EEXIST,
                            f"cannot give {link.name} its name {name} back: {holder} has it",
                        ) from exc
                    found = root.get_link(host, ifindex=link.ifindex)
                    if found is None:
                        raise
                    link = found
        return link


def _drop_altname(device: str, altname: str) -> None:
    """``ip link property del dev DEVICE altname ALTNAME`` in the agent's (the guest's
    root) namespace; its error, if any, names the device."""
    import subprocess

    done = subprocess.run(
        ["ip", "link", "property", "del", "dev", device, "altname", altname],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise kernel_error(
            errno.EEXIST, f"{device} holds {altname} as an altname: {done.stderr.strip()}"
        )


def _handle_of(ref: NsRef) -> NamespaceHandle:
    return NamespaceHandle(ref.path, ref.device, ref.inode, ref.boot_id)


def guest_kernel(pin_root: Path = Path("/run")) -> tuple[NetnsKernel, GuestSide]:
    """The guest's root namespace as the lab's node (pinned as ``node``), an empty
    ``wire`` namespace beside it (``NetnsKernel`` watches a namespace die through it)."""
    from plugins.kernel.linux.netns import (
        MS_BIND,
        check_call,
        create_namespace,
        libc,
        namespace_handle,
    )

    from .netns import NetnsKernel

    directory = Path(tempfile.mkdtemp(prefix="dranp-vm-", dir=pin_root))
    node_pin = directory / "node"
    node_pin.touch(mode=0o444)
    check_call(
        libc().mount(b"/proc/self/ns/net", bytes(node_pin), b"none", MS_BIND, None),
        f"mount {node_pin}",
    )
    wire = create_namespace(directory, "wire")
    kernel = NetnsKernel(directory, namespace_handle(node_pin), wire)
    return kernel, GuestSide(str(node_pin))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.kernel_agent", description=__doc__)
    parser.add_argument("--port", default=PORT_NAME, help="virtio-serial port name")
    parser.add_argument(
        "--stdio",
        action="store_true",
        help="serve on stdin/stdout instead (an SSH session's; READY goes to stderr)",
    )
    args = parser.parse_args(argv)
    from .netns import _remove_pins

    kernel, guest = guest_kernel()
    agent = KernelAgent(
        kernel, guest, lambda seed, lend: GuestSession(kernel, seed, lend), TrafficSide()
    )
    if args.stdio:
        fd, ready = os.dup(sys.stdout.fileno()), sys.stderr
        # Nothing else may write to the stream the answers go out on.
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        incoming_fd = sys.stdin.fileno()
    else:
        # The VM lab's guest: its PFs' link history (QEMU's igb) and its loaded link
        # modules made the same in every boot, whatever the tests do first.
        give_pfs_link_once(kernel, guest.node_pin)
        load_link_modules(kernel, kernel.wire)
        fd, ready = os.open(f"/dev/virtio-ports/{args.port}", os.O_RDWR | os.O_CLOEXEC), sys.stdout
        incoming_fd = fd
    try:
        with os.fdopen(os.dup(incoming_fd), "rb") as incoming:
            print(READY, file=ready, flush=True)
            agent.serve(incoming, fd)
    finally:
        agent.close()
        kernel.close()
        # A guest dies with its pins; a host (served over SSH) is left as it was.
        _remove_pins(kernel.directory)
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
