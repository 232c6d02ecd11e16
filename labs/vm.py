"""The vm tier's lab: Debian's own kernel in a QEMU guest, with two emulated igb PFs.

``VmLab(kernel="6.1")`` boots ``/boot/vmlinuz-<release>`` with virtme-ng under software
emulation (TCG: ``/dev/kvm`` is not relied on), the host's root shared read-only, so
the guest runs this repository and its venv as they are on the host. Each guest has
two igb NICs (QEMU >= 8), each behind a PCIe root port of its own, whose SR-IOV VFs are
real PCI functions with igbvf netdevs (``enp1s0v0``..).

Boot once, call many times: the guest runs one long-lived process, the kernel agent
(``labs.kernel_agent``), serving the guest's real kernel over a virtio-serial port whose
host end is a Unix socket of QEMU's, which takes one connection. A relay in this process
(``labs._relay.KernelRelay``) owns that connection and serves any number of clients on
a socket of its own: ``kernel_url`` is ``fake://<relay socket>`` (service processes open
a ``FakeKernelClient`` on it), and ``lab.kernel`` is a ``FakeKernelClient`` on it too
(the agent speaks the fake kernel server's protocol) plus the guest-only calls
(``release``, ``sriov``, ``set_sriov_numvfs``).

``lab.session(seed)`` is a fresh lab in the same guest without a reboot (a
``VmSession``: a ``NetnsLab`` the agent builds in the guest, with its own relay socket
and ``kernel_url``), what the rig's crash enumeration builds once per run.
docs/vm-lab.md has the design and the figures.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from fakekernel.client import FakeKernelClient
from plugins.coordinator import Inventory, parse_inventory
from plugins.kernel import NsRef, VFConfig

from ._guest import GuestSide, VmKernel
from ._lab import Lab, LabKernel
from ._relay import KernelRelay
from ._seed import start_state_seed
from .kernel_agent import PORT_NAME, READY

__all__ = [
    "KERNELS",
    "PFS",
    "GuestSide",
    "VmKernel",
    "VmLab",
    "VmLabUnavailable",
    "VmSession",
    "asked_kernel",
    "kernel_image",
    "missing",
    "sriov_lend",
]

REPO = Path(__file__).resolve().parent.parent
INSTALL = "scripts/install-vm-lab"
QEMU = "qemu-system-x86_64"
QEMU_MIN_MAJOR = 8  # the igb NIC (emulated SR-IOV) came with QEMU 8.0
# The kernels a lab URL may ask for -> the /boot image names of their Debian packages.
KERNELS = {"6.1": "vmlinuz-6.1.0-*-amd64", "6.12": "vmlinuz-6.12.*-amd64"}
DEFAULT_KERNEL = "6.1"
KERNEL_ENV = "DRANP_VM_KERNEL"
"""Which of ``KERNELS`` the vm tier's tests boot (``scripts/rig vm://?kernel=K`` sets it)."""

# The guest's PF netdevs: udev names an igb on root port N's bus "enpNs0".
PFS = ("enp1s0", "enp2s0")
BOOT_DEADLINE_S = 300.0  # TCG boots in ~30 s on 2 cores; a loaded CI machine is slower
POWER_OFF_DEADLINE_S = 60.0
CONSOLE_TAIL_LINES = 40
# Bytecode for the guest's Python: the machine sets PYTHONDONTWRITEBYTECODE and the
# guest's root is read-only, so without this every boot compiles pyroute2 and the
# project from source under TCG (measured: ~115 s of a 147 s boot).
PYCACHE = Path.home() / ".cache" / "dranp-vm-lab" / "pycache"
# What the agent imports, lazily ones included (pyroute2's IPRoute for the snapshot).
AGENT_IMPORTS = ("labs.kernel_agent", "labs.netns", "plugins.kernel.linux.netns", "pyroute2")
CALL_TIMEOUT_S = 120.0  # one kernel call under TCG (a snapshot of many links: seconds)


def asked_kernel() -> str:
    """The kernel the vm tier's tests boot: ``KERNEL_ENV``, else ``DEFAULT_KERNEL``."""
    return os.environ.get(KERNEL_ENV, DEFAULT_KERNEL)


class VmLabUnavailable(RuntimeError):
    """The VM lab cannot run or did not boot; the message says why (and the console's tail)."""


def kernel_image(kernel: str = DEFAULT_KERNEL) -> Path | None:
    """The newest installed image of a kernel ``KERNELS`` names (None: not installed)."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; valid: {', '.join(KERNELS)}")
    images = Path("/boot").glob(KERNELS[kernel])
    return max(images, key=lambda p: _version_key(p.name), default=None)


def _version_key(name: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", name)]


def vng_path() -> str | None:
    """virtme-ng's ``vng``: on PATH, or where ``uv tool install`` puts it."""
    found = shutil.which("vng")
    if found is None and (Path.home() / ".local/bin/vng").is_file():
        found = str(Path.home() / ".local/bin/vng")
    return found


def qemu_version() -> str | None:
    """``qemu-system-x86_64 --version``'s version (``10.0.2+ds-...``); None: not installed."""
    if shutil.which(QEMU) is None:
        return None
    out = subprocess.run([QEMU, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"version (\S+)", out)
    return match.group(1) if match else None


def qemu_major() -> int | None:
    version = qemu_version()
    match = re.match(r"(\d+)\.", version or "")
    return int(match.group(1)) if match else None


def missing(kernel: str = DEFAULT_KERNEL) -> str | None:
    """Why a ``VmLab`` of ``kernel`` cannot run here, in one line naming the install
    command (None: it may; booting tells the rest)."""
    absent = []
    major = qemu_major()
    if major is None:
        absent.append(f"{QEMU} >= {QEMU_MIN_MAJOR}")
    elif major < QEMU_MIN_MAJOR:
        absent.append(f"{QEMU} >= {QEMU_MIN_MAJOR} (found {major}.x)")
    if kernel_image(kernel) is None:
        absent.append(f"the {kernel} kernel image (/boot/{KERNELS[kernel]})")
    if vng_path() is None:
        absent.append("virtme-ng (vng)")
    if os.geteuid() != 0:
        absent.append("root (the guest's root is the host's, and the agent runs as root)")
    if not absent:
        return None
    return f"the VM lab needs {', '.join(absent)}; install with {INSTALL}"


class VmLab(Lab):
    """A QEMU guest of Debian's ``kernel`` (a key of ``KERNELS``) and its kernel agent.

    Boots in the constructor (raising ``VmLabUnavailable`` with the console's tail if the
    agent is not ready by ``boot_deadline_s``); ``close()`` powers the guest off.
    ``boot_seconds``: from starting virtme-ng to the agent serving.
    """

    tier = "vm"

    def __init__(
        self,
        kernel: str = DEFAULT_KERNEL,
        *,
        start_seed: int | None = None,
        boot_deadline_s: float = BOOT_DEADLINE_S,
        memory: str = "2G",
        cpus: int = 2,
    ) -> None:
        problem = missing(kernel)
        if problem is not None:
            raise VmLabUnavailable(problem)
        image = kernel_image(kernel)
        vng = vng_path()
        assert image is not None
        assert vng is not None
        self.kernel_name = kernel
        self.image = image
        self.qemu_version = qemu_version() or "unknown"
        self.start_seed = start_state_seed() if start_seed is None else start_seed
        # Unix socket paths are short (107 bytes): the lab's files live in a short /tmp dir.
        self.directory = Path(tempfile.mkdtemp(prefix="vmlab-", dir="/tmp"))
        self.socket = self.directory / "kernel.sock"  # QEMU's: one connection, the relay's
        self.relay_socket = self.directory / "relay.sock"
        self.console_log = self.directory / "console.log"
        self._client: VmRootKernel | None = None
        self.relay: KernelRelay | None = None
        self.sessions: list[VmSession] = []
        self._console = _Console(self.console_log, READY)
        started = time.monotonic()
        _warm_bytecode()
        self.process = subprocess.Popen(
            self._command(vng, memory, cpus),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,  # vng and its QEMU: one group, killed together
        )
        try:
            assert self.process.stdout is not None
            self._console.follow(self.process.stdout)
            self.relay = KernelRelay(
                self._connect(started + boot_deadline_s), timeout=CALL_TIMEOUT_S
            )
            self.relay.listen(self.relay_socket)
            self._client = VmRootKernel(self.relay_socket, timeout=CALL_TIMEOUT_S)
            self._console.wait_marked(self.process, started + boot_deadline_s)
            self.boot_seconds = time.monotonic() - started
        except BaseException as exc:
            self.close()
            if isinstance(exc, VmLabUnavailable | TimeoutError | OSError):
                raise VmLabUnavailable(
                    f"the {kernel} guest did not boot: {exc}\n"
                    f"console ({self.console_log}), last lines:\n{self._console.tail()}"
                ) from exc
            raise

    def _command(self, vng: str, memory: str, cpus: int) -> list[str]:
        devices = []
        for slot, _ in enumerate(PFS, start=1):
            devices += [
                f"-device pcie-root-port,id=rp{slot},chassis={slot},slot={slot}",
                f"-device igb,bus=rp{slot}",
            ]
        # wait=on: QEMU starts the guest only once we are connected, so the agent's port
        # is connected from the start (a virtio-serial port with no host end reads EOF).
        devices += [
            f"-chardev socket,id=dranpk,path={self.socket},server=on,wait=on",
            "-device virtio-serial-pci",
            f"-device virtserialport,chardev=dranpk,name={PORT_NAME}",
        ]
        agent = (
            f"cd {shlex.quote(str(REPO))} && PYTHONDONTWRITEBYTECODE=1 "
            f"PYTHONPYCACHEPREFIX={shlex.quote(str(PYCACHE))} "
            f"exec {shlex.quote(sys.executable)} -m labs.kernel_agent --port {PORT_NAME}"
        )
        return [
            vng,
            "--disable-kvm",
            "--disable-microvm",  # microvm has no PCIe: the igb root ports need q35
            "--verbose",  # the kernel's console on stdout, for the log a failure shows
            "--run",
            str(self.image),
            "--cpus",
            str(cpus),
            "--memory",
            memory,
            f"--qemu-opts={' '.join(devices)}",
            "--exec",
            agent,
        ]

    def _connect(self, deadline: float) -> socket.socket:
        """Connect to QEMU's socket once it listens (it does before the guest starts)."""
        while True:
            # Try only once QEMU's socket exists (it binds and listens at once; a
            # refusal is retried).
            if self.socket.is_socket():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(str(self.socket))
                    return sock
                except ConnectionRefusedError:
                    sock.close()
            if self.process.poll() is not None:
                raise VmLabUnavailable(
                    f"virtme-ng exited with {self.process.returncode} before QEMU listened"
                )
            if time.monotonic() >= deadline:
                raise TimeoutError("QEMU never listened on the agent's socket")
            # QEMU creates its socket within a second of starting; waiting on the
            # process (not a sleep) also notices it dying at once.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=0.05)

    @property
    def kernel(self) -> VmRootKernel:
        assert self._client is not None, "this VmLab is closed"
        return self._client

    @property
    def kernel_url(self) -> str:
        """Service processes reach the guest's root namespace here (through the relay)."""
        return f"fake://{self.relay_socket}"

    def session(
        self, start_seed: int | None = None, lend: dict[str, str] | None = None
    ) -> VmSession:
        """A fresh lab in this guest (see ``VmSession``); ``start_seed`` None: the lab's."""
        opened = VmSession(self, self.start_seed if start_seed is None else start_seed, lend)
        self.sessions.append(opened)
        return opened

    def lend_vfs(self, per_pf: int = 1) -> dict[str, str]:
        """The ``lend`` of a session whose node holds the guest's SR-IOV NICs under the
        example inventory's names: each PF of ``PFS`` as ``enp3s0f0``, ``enp3s0f1`` and
        its first ``per_pf`` VFs as ``<that name>v<index>``. Makes the VFs first when a
        PF has fewer (``sriov_numvfs``; it never shrinks what is there, so a test that
        snapshots the guest should call this before it does)."""
        if not 1 <= per_pf <= 4:
            raise ValueError(f"lend_vfs: per_pf must be 1..4, not {per_pf}")
        k = self.kernel
        for pf in PFS:
            if k.sriov(pf)["numvfs"] < per_pf:
                k.set_sriov_numvfs(pf, per_pf)
        return sriov_lend(per_pf)

    def changes_since(self, before: dict[str, Any]) -> list[str]:
        """How the guest's kernel differs from the snapshot ``before`` (``diff`` lines),
        leaving out VFs' permanent addresses: an igbvf VF that resets (set down, its MTU
        changed, a bond's VLAN unwound) takes a new one from its PF, which no plugin
        and no lab can give back (docs/fake-kernel-fidelity.md, the igb profile)."""
        from fakekernel.model import diff

        return [c for c in diff(before, self.kernel.snapshot()) if ": perm_mac: " not in c]

    def vf_tables(self) -> dict[str, list[VFConfig]]:
        """Each guest PF's VF table as the PF reports it (what the sriov plugin changes):
        a test compares it before and after, since a session's close gives lent VFs back
        but a PF keeps what was set through it."""
        k = self.kernel
        host = k.host_namespace()
        tables = {}
        for pf in PFS:
            link = k.get_link(host, name=pf)
            assert link is not None, f"{pf} is not in the guest's root namespace"
            tables[pf] = k.get_vfs(host, link.ifindex)
        return tables

    def furnish_sandbox(self, ns: NsRef) -> None:
        """The pod's own ``eth0``, its peer in the node, as the other labs plant it."""
        from fakekernel.lab import plant_pod_interface

        plant_pod_interface(self.kernel, ns, self.start_seed)

    def close(self) -> None:
        """Power the guest off (the agent exits when we hang up, and virtme-ng's init
        then powers off), killing it at a deadline; leaves nothing running."""
        for opened in list(getattr(self, "sessions", ())):
            opened.close()
        client, self._client = self._client, None
        if client is not None:
            client.close()
        relay, self.relay = getattr(self, "relay", None), None
        if relay is not None:
            relay.close()  # the agent sees the end of its stream, and the guest powers off
        process = getattr(self, "process", None)
        if process is not None and process.poll() is None:
            try:
                process.wait(timeout=POWER_OFF_DEADLINE_S if relay is not None else 0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._console.join()
        if process is not None and process.stdout is not None:
            process.stdout.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def sriov_lend(per_pf: int) -> dict[str, str]:
    """Guest device -> its name in a session's node: the PFs as the example inventory's
    ``enp3s0f0``/``enp3s0f1`` (udev names VF ``i`` of ``enp1s0`` ``enp1s0v<i>``), so a
    topology's selectors (``pfName == "enp3s0f0"``) hold on the vm tier unchanged."""
    from .netns import PARENTS

    lend: dict[str, str] = {}
    for pf, name in zip(PFS, PARENTS, strict=False):
        lend[pf] = name
        lend.update({f"{pf}v{i}": f"{name}v{i}" for i in range(per_pf)})
    return lend


class VmRootKernel(VmKernel):
    """The guest's root namespace through the relay, plus opening and closing sessions."""

    def open_session(self, seed: int, lend: dict[str, str]) -> str:
        return str(self._call("open_session", seed=seed, lend=lend))

    def close_session(self, session: str) -> None:
        self._call("close_session", session=session)


class VmSession(Lab):
    """A fresh lab in a running guest, without a reboot: the agent builds a
    ``labs.netns.NetnsLab`` in the guest (node and wire namespaces of its own, the
    parents ``enp3s0f0``..``enp3s0f2`` as veth ends, the random start state of
    ``start_seed``), served on a relay socket of its own: ``kernel`` and ``kernel_url``
    reach only the session's namespaces. ``lend`` (a guest device's name -> its name in
    the session's node, e.g. ``{"enp1s0v0": "enp3s0f0v0"}``) moves physical devices in
    (a parent of that name is then not made). ``close()`` returns once every namespace
    of the session is dead and the lent devices are back in the guest's root namespace
    under their own names and state."""

    tier = "vm"

    def __init__(self, vm: VmLab, start_seed: int, lend: dict[str, str] | None = None) -> None:
        assert vm.relay is not None, "this VmLab is closed"
        self.vm = vm
        self.start_seed = start_seed
        self.lend = dict(lend or {})
        self._client: FakeKernelClient | None = None
        started = time.monotonic()
        self.id = vm.kernel.open_session(start_seed, self.lend)
        self.socket = vm.directory / f"{self.id}.sock"
        try:
            vm.relay.listen(self.socket, session=self.id)
            self._client = FakeKernelClient(self.socket, timeout=CALL_TIMEOUT_S)
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
            self._inventory = parse_inventory(self._inventory_document(), f"vm session {self.id}")
        return self._inventory

    def _inventory_document(self) -> dict[str, Any]:
        from .netns import PARENTS

        k = self.kernel
        host = k.host_namespace()
        links = {}
        for name in [*self.lend.values(), *(p for p in PARENTS if p not in self.lend.values())]:
            link = k.get_link(host, name=name)
            if link is None:
                raise RuntimeError(f"vm session {self.id}: {name} is not in the session's node")
            links[name] = link
        pf_names = {link.pci_address: name for name, link in links.items() if link.pci_address}
        devices = []
        for name, link in links.items():
            attributes: dict[str, Any] = {"ifName": name}
            if link.vf_of is not None:
                pf_pci, index = link.vf_of
                if pf_pci not in pf_names:
                    raise RuntimeError(
                        f"vm session {self.id}: VF {name}'s PF {pf_pci} was not lent with it"
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
            "pool": f"vm-{self.id}".lower(),
            "driver": "dra.networking",
            "devices": devices,
        }

    @property
    def kernel(self) -> FakeKernelClient:
        assert self._client is not None, f"session {self.id} is closed"
        return self._client

    @property
    def kernel_url(self) -> str:
        return f"fake://{self.socket}"

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
        if self in self.vm.sessions:
            self.vm.sessions.remove(self)
        if self.vm.relay is None:
            return  # the guest is gone, and its sessions with it
        self.vm.relay.unlisten(self.socket)
        self.vm.kernel.close_session(self.id)
        self.close_seconds = time.monotonic() - started


def _warm_bytecode() -> None:
    """Import what the agent imports in a host Python that writes bytecode into
    ``PYCACHE``, where the guest's Python reads it (PYTHONPYCACHEPREFIX): about a
    second on the host, and a no-op when the bytecode is up to date."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(PYCACHE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [sys.executable, "-c", f"import {', '.join(AGENT_IMPORTS)}"], env=env, cwd=REPO, check=True
    )


class _Console:
    """virtme-ng's output (the guest's console and the agent's stdout): copied to a log
    file by a thread, its last lines kept for errors, and waited on for a marker."""

    def __init__(self, log: Path, marker: str) -> None:
        self.log = log
        self.marker = marker
        self.marked = False
        self.lines: collections.deque[str] = collections.deque(maxlen=CONSOLE_TAIL_LINES)
        self.changed = threading.Condition()
        self.ended = False
        self._thread: threading.Thread | None = None

    def follow(self, stream: IO[bytes]) -> None:
        self._thread = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self._thread.start()

    def _copy(self, stream: IO[bytes]) -> None:
        with self.log.open("wb") as log:
            for raw in stream:
                log.write(raw)
                log.flush()
                with self.changed:
                    line = raw.decode(errors="replace").rstrip()
                    self.lines.append(line)
                    self.marked = self.marked or line.endswith(self.marker)
                    self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def wait_marked(self, process: subprocess.Popen[Any], deadline: float) -> None:
        """Return once a line ended with the marker; raise if the output ends first or
        at the deadline."""
        with self.changed:
            self.changed.wait_for(lambda: self.marked or self.ended, deadline - time.monotonic())
            marked, ended = self.marked, self.ended
        if marked:
            return
        if ended:
            raise VmLabUnavailable(f"virtme-ng exited with {process.wait()} before {self.marker!r}")
        raise TimeoutError(f"no {self.marker!r} within the boot deadline")

    def tail(self) -> str:
        with self.changed:
            return "\n".join(self.lines)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=POWER_OFF_DEADLINE_S)


def _is_a_lab_kernel(k: VmKernel, s: FakeKernelClient) -> tuple[LabKernel, LabKernel]:
    return k, s  # mypy proves both satisfy the LabKernel protocol
