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
a socket of its own: ``kernel_url`` is ``kernel+unix://<relay socket>`` (service processes open
a ``FakeKernelClient`` on it), and ``lab.kernel`` is a ``FakeKernelClient`` on it too
(the agent speaks the fake kernel server's protocol) plus the guest-only calls
(``release``, ``sriov``, ``set_sriov_numvfs``).

The agent's stderr (its errors, the stack dump of a stalled call) goes out on a second
virtio-serial port into ``agent.log`` on the host, apart from the kernel's console
(``console.log``); both are the lab's ``evidence()`` when the agent stops answering.

``lab.session(seed)`` is a fresh lab in the same guest without a reboot (a
``labs.AgentSession``: a ``NetnsLab`` the agent builds in the guest, with its own relay socket
and ``kernel_url``), what the rig's crash enumeration builds once per run.
docs/vm-lab.md has the design and the figures.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._agent_lab import AgentLab
from ._console import AgentUnavailable, Console, reap, tail_of
from ._guest import GuestSide, VmKernel
from ._seed import start_state_seed
from .kernel_agent import PORT_NAME, READY

__all__ = [
    "KERNELS",
    "PFS",
    "GuestSide",
    "VmKernel",
    "VmLab",
    "VmLabUnavailable",
    "asked_kernel",
    "kernel_image",
    "missing",
]

log = logging.getLogger(__name__)

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
# What QEMU's igb cannot do (the SR-IOV inventory's capability names; docs/vm-lab.md).
IGB_LACKS = {
    "vlan_on_vf": "igb refuses its VFs' VLAN filters: a VLAN on an igbvf VF is EINVAL",
    "vlan_on_bond": "8021q asks each slave for the VLAN id and igb refuses igbvf's: EINVAL",
    "vf_link_state": "igb has no VF link-state control (EOPNOTSUPP)",
}
BOOT_DEADLINE_S = 300.0  # TCG boots in ~30 s on 2 cores; a loaded CI machine is slower
POWER_OFF_DEADLINE_S = 60.0
FAILURE_CONSOLE_LINES = 150  # the kernel's messages before the agent failed
AGENT_LOG_LINES = 200  # a stalled agent's stack dump (every thread's) and its errors
AGENT_LOG_PORT = "dranp.agentlog"  # the virtserialport the agent's stderr goes out on
# Bytecode for the guest's Python: the machine sets PYTHONDONTWRITEBYTECODE and the
# guest's root is read-only, so without this every boot compiles pyroute2 and the
# project from source under TCG (measured: ~115 s of a 147 s boot).
PYCACHE = Path.home() / ".cache" / "dranp-vm-lab" / "pycache"
# What the agent imports, lazily ones included (pyroute2's IPRoute for the snapshot).
AGENT_IMPORTS = ("labs.kernel_agent", "labs.netns", "plugins.kernel.linux.netns", "pyroute2")


def asked_kernel() -> str:
    """The kernel the vm tier's tests boot: ``KERNEL_ENV``, else ``DEFAULT_KERNEL``."""
    return os.environ.get(KERNEL_ENV, DEFAULT_KERNEL)


# Extra kernel command line for the guest, for experiments (e.g. "nohz=off": the guests'
# RCU stalls under TCG, docs/vm-lab.md); empty: none.
APPEND_ENV = "DRANP_VM_APPEND"


class VmLabUnavailable(AgentUnavailable):
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


def qemu_missing() -> str | None:
    """What is missing of QEMU for an emulated igb (None: nothing), for a ``missing()``."""
    major = qemu_major()
    if major is None:
        return f"{QEMU} >= {QEMU_MIN_MAJOR}"
    if major < QEMU_MIN_MAJOR:
        return f"{QEMU} >= {QEMU_MIN_MAJOR} (found {major}.x)"
    return None


def missing(kernel: str = DEFAULT_KERNEL) -> str | None:
    """Why a ``VmLab`` of ``kernel`` cannot run here, in one line naming the install
    command (None: it may; booting tells the rest)."""
    absent = [qemu] if (qemu := qemu_missing()) else []
    if kernel_image(kernel) is None:
        absent.append(f"the {kernel} kernel image (/boot/{KERNELS[kernel]})")
    if vng_path() is None:
        absent.append("virtme-ng (vng)")
    if os.geteuid() != 0:
        absent.append("root (the guest's root is the host's, and the agent runs as root)")
    if not absent:
        return None
    return f"the VM lab needs {', '.join(absent)}; install with {INSTALL}"


class VmLab(AgentLab):
    """A QEMU guest of Debian's ``kernel`` (a key of ``KERNELS``) and its kernel agent.

    Boots in the constructor (raising ``VmLabUnavailable`` with the console's tail if the
    agent is not ready by ``boot_deadline_s``); ``close()`` powers the guest off.
    ``boot_seconds``: from starting virtme-ng to the agent serving.
    """

    tier = "vm"
    pfs = PFS
    lacking = IGB_LACKS
    # Its igb NICs are cabled to nothing; the emulated SR-IOV host's share a hub with a
    # peer port (labs.emulated_host), so traffic is checked there.
    no_peer = "the VM lab's guest wires no traffic peer port (the emulated SR-IOV host does)"

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
        self.console_log = self.directory / "console.log"
        self.agent_log = self.directory / "agent.log"  # QEMU writes it: the agent's stderr
        self._console = Console(self.console_log, READY, "virtme-ng")
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
            self._serve(self._connect(started + boot_deadline_s))
            self._console.wait_marked(self.process, started + boot_deadline_s)
            self.boot_seconds = time.monotonic() - started
        except BaseException as exc:
            self.close()
            if isinstance(exc, AgentUnavailable | TimeoutError | OSError):
                raise VmLabUnavailable(
                    f"the {kernel} guest did not boot: {exc}\n"
                    f"console ({self.console_log}), last lines:\n{self._console.tail()}\n"
                    f"agent log ({self.agent_log}):\n{tail_of(self.agent_log, AGENT_LOG_LINES)}"
                ) from exc
            raise

    def evidence(self) -> dict[str, str]:
        """The console's last lines (what the guest's kernel printed) and the agent's log
        (a stalled agent's stack dump: ``kernel_agent.STALL_REPORT_S``), by title."""
        return {
            f"{self.kernel_name} guest console, last {FAILURE_CONSOLE_LINES} lines": tail_of(
                self.console_log, FAILURE_CONSOLE_LINES
            ),
            f"{self.kernel_name} guest agent log, last {AGENT_LOG_LINES} lines": tail_of(
                self.agent_log, AGENT_LOG_LINES
            ),
        }

    def _agent_failed(self, why: str) -> None:
        """One line saying where the evidence is (``evidence()``; the kit's guest watch
        attaches it to the failing case)."""
        log.warning(
            "the %s guest's agent failed (%s); console %s, agent log %s",
            self.kernel_name,
            why,
            self.console_log,
            self.agent_log,
        )

    def _command(self, vng: str, memory: str, cpus: int) -> list[str]:
        devices = []
        for slot, _ in enumerate(PFS, start=1):
            devices += [
                f"-device pcie-root-port,id=rp{slot},chassis={slot},slot={slot}",
                f"-device igb,bus=rp{slot}",
            ]
        # wait=on: QEMU starts the guest only once we are connected, so the agent's port
        # is connected from the start (a virtio-serial port with no host end reads EOF).
        # The agent's stderr: a port whose host end is a file QEMU writes, so the log is
        # on the host whatever the guest does (no shared directory, nothing to flush).
        devices += [
            f"-chardev socket,id=dranpk,path={self.socket},server=on,wait=on",
            f"-chardev file,id=dranplog,path={self.agent_log}",
            "-device virtio-serial-pci",
            f"-device virtserialport,chardev=dranpk,name={PORT_NAME}",
            f"-device virtserialport,chardev=dranplog,name={AGENT_LOG_PORT}",
        ]
        # udev makes the port's name; should it not have yet, the agent's stderr stays on
        # the console rather than the agent not starting.
        log_port = f"/dev/virtio-ports/{AGENT_LOG_PORT}"
        agent = (
            f"cd {shlex.quote(str(REPO))} || exit 1; "
            f"[ -e {log_port} ] || udevadm settle --timeout=30; "
            f"[ -e {log_port} ] && exec 2>{log_port}; "
            f"PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX={shlex.quote(str(PYCACHE))} "
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
            *(["--append", extra] if (extra := os.environ.get(APPEND_ENV, "")) else []),
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

    def close(self) -> None:
        """Power the guest off (the agent exits when we hang up, and virtme-ng's init
        then powers off), killing it at a deadline; leaves nothing running."""
        # The agent sees the end of its stream, and virtme-ng's init then powers off.
        served = True  # if closing raises, the relay is closed all the same: wait for it
        # An agent that stopped answering does not see the hang-up: kill the guest at once.
        answering = self.failure is None
        try:
            served = self._close_agent()
        finally:
            reap(
                getattr(self, "process", None),
                self._console,
                POWER_OFF_DEADLINE_S if served and answering else 0,
            )
            shutil.rmtree(self.directory, ignore_errors=True)


def _warm_bytecode() -> None:
    """Import what the agent imports in a host Python that writes bytecode into
    ``PYCACHE``, where the guest's Python reads it (PYTHONPYCACHEPREFIX): about a
    second on the host, and a no-op when the bytecode is up to date."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(PYCACHE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [sys.executable, "-c", f"import {', '.join(AGENT_IMPORTS)}"], env=env, cwd=REPO, check=True
    )
