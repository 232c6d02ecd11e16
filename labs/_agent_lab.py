"""Labs whose kernel is a ``labs.kernel_agent`` at the other end of one byte stream.

The VM lab's guest (a virtio-serial port) and an SR-IOV host (an SSH session's stdin
and stdout) serve their real kernel the same way: one long-lived agent process on the
machine, so only kernel calls cross over. ``AgentLab`` is what the two share once the
stream is connected: a relay (``labs._relay.KernelRelay``) that many clients share
(the lab's own ``kernel``, each service process's ``kernel+unix://`` client), fresh lab
sessions on the machine without a restart (``AgentSession``: a ``NetnsLab`` the agent
builds there, each with a relay socket of its own), lending the machine's SR-IOV PFs
and VFs to a session, and the checks that the machine ends as it began (its snapshot
and its PFs' VF tables). How the stream comes to be (booting a guest, logging in over
SSH) is the subclass's.

An agent that leaves a call unanswered for ``call_timeout_s`` (or whose stream ends)
fails the lab for good: the relay hangs up every client, ``failure`` says why, and
``evidence()`` is what the machine's side shows of it (a guest's console, the agent's
log), which ``harness.guest_watch`` attaches to the case it happened in before it has
the lab replaced.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from fakekernel.client import FakeKernelClient
from plugins.coordinator import Inventory, parse_inventory
from plugins.kernel import NsRef, VFConfig

from ._guest import VmKernel
from ._lab import Lab
from ._relay import CLOSED, KernelRelay
from ._traffic import TrafficCalls
from .netns import PARENTS

__all__ = ["CALL_TIMEOUT_S", "AgentLab", "AgentRootKernel", "AgentSession", "sriov_lend"]

CALL_TIMEOUT_S = 120.0  # one kernel call under TCG (a snapshot of many links: seconds)
# A client of the relay waits this much longer than the relay does, so that an agent
# that stops answering is judged once, by the relay (which hangs up on every client and
# says why), not by whichever client timed out first: a client that times out on its
# own is broken for good while the relay and the agent go on.
CLIENT_MARGIN_S = 30.0


class AgentLab(Lab):
    """The machine's root namespace (its NICs, as a node holds them) served by an agent.

    A subclass sets ``tier``, ``pfs`` (the machine's SR-IOV PF netdevs), ``start_seed``
    and ``directory`` (a short path: Unix socket names are limited to 107 bytes), then
    calls ``_serve(upstream)`` with the stream connected to the agent, and
    ``_close_agent()`` first thing in its ``close()``.
    """

    pfs: tuple[str, ...]
    lacking: dict[str, str]  # capability -> why the NICs cannot do it
    # The port traffic from this machine's PFs reaches (the inventory's ``peer``): the
    # lab of the machine holding it (this one, or another host's) and its netdev there.
    peer: tuple[AgentLab, str] | None = None
    no_peer = "this lab wires no traffic peer port"  # why ``peer`` is None
    start_seed: int
    directory: Path
    relay: KernelRelay | None = None
    _client: AgentRootKernel | None = None
    call_timeout_s = CALL_TIMEOUT_S  # how long the agent may take to answer one call

    def _serve(self, upstream: socket.socket) -> None:
        """Relay ``upstream`` on ``directory/relay.sock``; ``kernel`` is a client of it."""
        self.sessions: list[AgentSession] = []
        self.relay_socket = self.directory / "relay.sock"
        self.relay = KernelRelay(
            upstream, timeout=self.call_timeout_s, on_failure=self._agent_failed
        )
        self.relay.listen(self.relay_socket)
        self._client = AgentRootKernel(self.relay_socket, timeout=self.client_timeout_s)

    @property
    def client_timeout_s(self) -> float:
        """How long a client of the relay waits for an answer (see ``CLIENT_MARGIN_S``)."""
        return self.call_timeout_s + CLIENT_MARGIN_S

    @property
    def failure(self) -> str | None:
        """Why the agent's stream failed (it stopped answering, or its stream ended), for
        good; None while it serves, and once the lab is closed."""
        relay = self.relay
        if relay is None or relay.failure == CLOSED:
            return None
        return relay.failure

    def evidence(self) -> dict[str, str]:
        """What this machine's side shows of its agent, by title (a guest's console, the
        agent's own log): read when the agent failed, before the lab is closed."""
        return {}

    def _agent_failed(self, why: str) -> None:
        """The stream to the agent failed (``why``), called once from the relay's thread:
        a subclass logs where its evidence is."""

    @property
    def kernel(self) -> AgentRootKernel:
        assert self._client is not None, f"this {type(self).__name__} is closed"
        return self._client

    @property
    def kernel_url(self) -> str:
        """Service processes reach the guest's root namespace here (through the relay)."""
        return f"kernel+unix://{self.relay_socket}"

    def session(
        self, start_seed: int | None = None, lend: dict[str, str] | None = None
    ) -> AgentSession:
        """A fresh lab on this kernel (see ``AgentSession``); ``start_seed`` None: the lab's."""
        opened = AgentSession(self, self.start_seed if start_seed is None else start_seed, lend)
        self.sessions.append(opened)
        return opened

    def lend_vfs(self, per_pf: int = 1) -> dict[str, str]:
        """The ``lend`` of a session whose node holds the guest's SR-IOV NICs under the
        example inventory's names: each PF of ``pfs`` as ``enp3s0f0``, ``enp3s0f1`` and
        its first ``per_pf`` VFs as ``<that name>v<index>``. Makes the VFs first when a
        PF has fewer (``sriov_numvfs``; it never shrinks what is there, so a test that
        snapshots the guest should call this before it does)."""
        if not 1 <= per_pf <= 4:
            raise ValueError(f"lend_vfs: per_pf must be 1..4, not {per_pf}")
        k = self.kernel
        for pf in self.pfs:
            if k.sriov(pf)["numvfs"] < per_pf:
                k.set_sriov_numvfs(pf, per_pf)
        return sriov_lend(self.pfs, per_pf)

    def changes_since(self, before: dict[str, Any]) -> list[str]:
        """How the guest's kernel differs from the snapshot ``before`` (``diff`` lines),
        leaving out what the NIC does on its own, which no plugin and no lab can give
        back (docs/fake-kernel-fidelity.md, the igb profile):

        - VFs' permanent addresses: an igbvf VF that resets (set down, its MTU changed, a
          bond's VLAN unwound) takes a new one from its PF;
        - a PF's VF table learning or forgetting a VF's own address (its ``mac`` from or
          to the zero address): igb lists the MAC the VF driver programmed once the VF
          told it through the mailbox. A MAC set through the PF over another still shows,
          and tests that compare VF tables (``vf_tables``) apply their own rule."""
        from fakekernel.model import diff

        return [
            c
            for c in diff(before, self.kernel.snapshot())
            if ": perm_mac: " not in c and not _vf_address_learned(c)
        ]

    def vf_tables(self) -> dict[str, list[VFConfig]]:
        """Each guest PF's VF table as the PF reports it (what the sriov plugin changes):
        a test compares it before and after, since a session's close gives lent VFs back
        but a PF keeps what was set through it."""
        k = self.kernel
        host = k.host_namespace()
        tables = {}
        for pf in self.pfs:
            link = k.get_link(host, name=pf)
            assert link is not None, f"{pf} is not in the guest's root namespace"
            tables[pf] = k.get_vfs(host, link.ifindex)
        return tables

    def unlearn_vf_addresses(self, before: dict[str, list[VFConfig]]) -> None:
        """Give back a PF's not knowing its VFs' addresses (``before``: ``vf_tables``).
        igb lists a VF's MAC once the VF has told it through the PF's mailbox, which works
        only while the PF is up: a VF reset with its PF up (a bond setting its MAC, a VLAN
        set through the PF) leaves the table listing it where the lab had made the VFs
        with the PFs down. The next test on the machine must find the tables as they were,
        so an entry that went from none to a MAC is set back to none through the PF (igb
        takes the zero MAC as "no address set by the PF": the VF netdev keeps its own)."""
        from plugins.kernel import VFChanges

        k = self.kernel
        host = k.host_namespace()
        for pf, vfs in self.vf_tables().items():
            was = {vf.vf_index: vf for vf in before.get(pf, [])}
            link = k.get_link(host, name=pf)
            assert link is not None, f"{pf} is not in the machine's root namespace"
            for vf in vfs:
                old = was.get(vf.vf_index)
                if old is not None and old.mac == NO_MAC and vf.mac != NO_MAC:
                    k.set_vf(host, link.ifindex, vf.vf_index, VFChanges(mac=NO_MAC))

    def furnish_sandbox(self, ns: NsRef) -> None:
        """The pod's own ``eth0``, its peer in the node, as the other labs plant it."""
        from fakekernel.lab import plant_pod_interface

        plant_pod_interface(self.kernel, ns, self.start_seed)

    def lacks(self, capability: str) -> str | None:
        """Why this machine's NICs cannot do ``capability`` (a capability name of the
        SR-IOV inventory, docs/labs.md: ``vlan_on_vf``, ``vlan_on_bond``, ...), in one
        line; None: they can. A check needing it expects the kernel's refusal."""
        return self.lacking.get(capability)

    def _close_agent(self) -> bool:
        """Close the sessions, the lab's client and the relay (the agent then sees the
        end of its stream and exits); True if a relay was open. A session that cannot be
        closed (the stream to the agent broke) does not keep the rest open: the agent
        closes what it still holds when its stream ends. Its error is raised once the
        client and the relay are closed."""
        failed: list[Exception] = []
        for opened in list(getattr(self, "sessions", ())):
            try:
                opened.close()
            except Exception as exc:
                failed.append(exc)
                if opened in self.sessions:
                    self.sessions.remove(opened)
        client, self._client = self._client, None
        if client is not None:
            client.close()
        relay, self.relay = self.relay, None
        if relay is not None:
            relay.close()
        if failed:
            raise failed[0]
        return relay is not None


def sriov_lend(pfs: tuple[str, ...], per_pf: int) -> dict[str, str]:
    """Guest device -> its name in a session's node: the PFs as the example inventory's
    ``enp3s0f0``/``enp3s0f1`` (udev names VF ``i`` of ``enp1s0`` ``enp1s0v<i>``), so a
    topology's selectors (``pfName == "enp3s0f0"``) hold on the vm tier unchanged."""
    lend: dict[str, str] = {}
    for pf, name in zip(pfs, PARENTS, strict=False):
        lend[pf] = name
        lend.update({f"{pf}v{i}": f"{name}v{i}" for i in range(per_pf)})
    return lend


class AgentRootKernel(VmKernel, TrafficCalls):
    """The agent's root namespace through the relay, plus opening and closing sessions
    and traffic on the machine (addresses and pings in its namespaces)."""

    def open_session(self, seed: int, lend: dict[str, str]) -> str:
        return str(self._call("open_session", seed=seed, lend=lend))

    def close_session(self, session: str) -> None:
        self._call("close_session", session=session)


class AgentSession(Lab):
    """A fresh lab in a running guest, without a reboot: the agent builds a
    ``labs.netns.NetnsLab`` in the guest (node and wire namespaces of its own, the
    parents ``enp3s0f0``..``enp3s0f2`` as veth ends, the random start state of
    ``start_seed``), served on a relay socket of its own: ``kernel`` and ``kernel_url``
    reach only the session's namespaces. ``lend`` (a guest device's name -> its name in
    the session's node, e.g. ``{"enp1s0v0": "enp3s0f0v0"}``) moves physical devices in
    (a parent of that name is then not made). ``close()`` returns once every namespace
    of the session is dead and the lent devices are back in the guest's root namespace
    under their own names and state."""

    def __init__(self, lab: AgentLab, start_seed: int, lend: dict[str, str] | None = None) -> None:
        assert lab.relay is not None, f"this {type(lab).__name__} is closed"
        self.lab = lab
        self.tier = lab.tier
        self.start_seed = start_seed
        self.lend = dict(lend or {})
        self._client: FakeKernelClient | None = None
        started = time.monotonic()
        self.id = lab.kernel.open_session(start_seed, self.lend)
        self.socket = lab.directory / f"{self.id}.sock"
        try:
            lab.relay.listen(self.socket, session=self.id)
            self._client = FakeKernelClient(self.socket, timeout=lab.client_timeout_s)
        except BaseException:
            self.close()
            raise
        self.open_seconds = time.monotonic() - started
        self.close_seconds: float | None = None
        self._inventory: Inventory | None = None

    def inventory(self) -> Inventory | None:
        """With lent devices: what discovery would publish on the session's node, read
        from the guest's kernel (each lent VF as ``type: vf`` with its name in the node,
        its real PCI address, its PF's name in the node and its VF index; each lent
        netdev that is no VF, and each parent the session made, as ``type: pf``).
        Without: None (the node is the example inventory's, as on the netns tier)."""
        if not self.lend:
            return None
        if self._inventory is None:
            self._inventory = parse_inventory(
                self._inventory_document(), f"{self.tier} session {self.id}"
            )
        return self._inventory

    def _inventory_document(self) -> dict[str, Any]:
        k = self.kernel
        host = k.host_namespace()
        links = {}
        for name in [*self.lend.values(), *(p for p in PARENTS if p not in self.lend.values())]:
            link = k.get_link(host, name=name)
            if link is None:
                raise RuntimeError(
                    f"{self.tier} session {self.id}: {name} is not in the session's node"
                )
            links[name] = link
        pf_names = {link.pci_address: name for name, link in links.items() if link.pci_address}
        devices = []
        for name, link in links.items():
            attributes: dict[str, Any] = {"ifName": name}
            if link.vf_of is not None:
                pf_pci, index = link.vf_of
                if pf_pci not in pf_names:
                    raise RuntimeError(
                        f"{self.tier} session {self.id}: VF {name}'s PF {pf_pci} was not lent with it"
                    )
                attributes.update(type="vf", pfName=pf_names[pf_pci], vfIndex=index)
            else:
                if any(vf.vf_of and vf.vf_of[0] == link.pci_address for vf in links.values()):
                    continue  # a PF whose VFs are in use is not itself allocatable
                attributes["type"] = "pf"
            if link.pci_address:
                attributes["pciAddress"] = link.pci_address
            devices.append({"name": name, "attributes": {"dra.networking": attributes}})
        return {
            "kind": "DeviceInventory",
            "pool": f"{self.tier}-{self.id}".lower(),
            "driver": "dra.networking",
            "devices": devices,
        }

    @property
    def kernel(self) -> FakeKernelClient:
        assert self._client is not None, f"session {self.id} is closed"
        return self._client

    @property
    def kernel_url(self) -> str:
        return f"kernel+unix://{self.socket}"

    def furnish_sandbox(self, ns: NsRef) -> None:
        """The pod's own ``eth0``, its peer in the node, as the other labs plant it."""
        from fakekernel.lab import plant_pod_interface

        plant_pod_interface(self.kernel, ns, self.start_seed)

    def close(self) -> None:
        """Delete the session's namespaces, returning once they are dead (idempotent)."""
        if self.close_seconds is not None:
            return
        started = time.monotonic()
        self.close_seconds = 0.0
        client, self._client = self._client, None
        if client is not None:
            client.close()
        if self in self.lab.sessions:
            self.lab.sessions.remove(self)
        if self.lab.relay is None or self.lab.failure is not None:
            # The guest is gone, or its agent stopped answering: the session goes with
            # the agent (it closes what it holds when its stream ends) or the guest.
            return
        self.lab.relay.unlisten(self.socket)
        self.lab.kernel.close_session(self.id)
        self.close_seconds = time.monotonic() - started


NO_MAC = "00:00:00:00:00:00"


def _vf_address_learned(change: str) -> bool:
    """A ``diff`` line of a VF table entry whose ``mac`` went from or to the zero address."""
    return change.startswith("~ vf ") and (
        f": mac: '{NO_MAC}' -> " in change or change.endswith(f" -> '{NO_MAC}'")
    )
