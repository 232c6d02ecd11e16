"""The emulated SR-IOV host: a QEMU guest that Ansible and SSH reach like a real NIC host.

Issue 12, item 4. ``scripts/install-sriov-lab`` builds a Debian 12 image (debootstrap,
sshd, python3 for Ansible, bookworm's 6.1 kernel) into ``IMAGE_DIR``; ``EmulatedHost``
boots it under TCG with two igb PFs (SR-IOV, up to 7 VFs each) and a traffic peer port
on one QEMU hub, sshd forwarded to a free port of 127.0.0.1:

    with EmulatedHost() as host:
        host.run("cat /sys/class/net/enp1s0/device/sriov_totalvfs")
        host.write_inventory(tmp_path / "emulated.yml")   # for ansible-runner

Every session boots a fresh qcow2 overlay on the read-only base image, so it starts
from the image as built and leaves it unchanged. docs/emulated-host.md has the image,
the wiring and the timings.
"""

from __future__ import annotations

import collections
import contextlib
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from ._console import AgentUnavailable, Console, reap
from .vm import PFS, POWER_OFF_DEADLINE_S, QEMU, qemu_missing, qemu_version

__all__ = [
    "HOSTNAME",
    "IMAGE_DIR",
    "EmulatedHost",
    "EmulatedHostUnavailable",
    "NetDevice",
    "missing",
]

# scripts/install-sriov-lab reads these five lines (`NAME = "value"`): keep their shape.
IMAGE_DIR = Path("/var/lib/dranp/sriov-host")
IMAGE_RECIPE = "2"  # bump when the image's recipe changes: the install script rebuilds
HOSTNAME = "sriov-emu"
READY_MARKER = "dranp-sriov-host ready"  # the guest's last boot unit writes it to the console
MGMT_MAC = "52:54:00:d4:a0:01"  # the image's systemd-networkd manages only this NIC

INSTALL = "scripts/install-sriov-lab"
BASE_IMAGE = "base.qcow2"
KERNEL = "vmlinuz"
INITRD = "initrd.img"
SSH_KEY = "id_ed25519"
RECIPE_FILE = "recipe"

BOOT_DEADLINE_S = 300.0  # ~60-90 s idle under TCG on 2 cores; a loaded CI machine is slower
SSH_TIMEOUT_S = 120.0  # one command over SSH (sshd's key exchange alone is seconds under TCG)
MEMORY = "1536M"
CPUS = 2
VFS_PER_PF = 4  # what the inventory asks per PF (igb offers 7)
NIC_MODEL = "igb"
NIC_DESCRIPTION = "Intel 82576 (QEMU igb)"
VF_DRIVER = "igbvf"
# What igb does for a VF through its PF: no VF link-state control, and it refuses VLAN
# ids an igbvf VF asks for, so no VLAN on a bond of VFs (docs/vm-lab.md).
IGB_CAPABILITIES = ("vf_mac", "vf_vlan", "vf_spoofchk", "vf_trust", "vf_rate", "bond_of_vfs")
GUEST_PYTHON = "3.11"  # bookworm's python3
PEER_MODEL = "e1000e"  # a NIC of another driver, so the guest tells it from the PFs
HUB_ID = 0
# The guest's PF netdevs, as udev names an igb behind root port N ("enpNs0"): labs/vm.py's
# wiring, reused so both labs' guests name their PFs alike. The peer sits on the next port.
PF_ROOT_PORTS = tuple(range(1, len(PFS) + 1))
PEER_ROOT_PORT = len(PFS) + 1


class EmulatedHostUnavailable(RuntimeError):
    """The emulated host cannot run or did not boot; the message says why."""


@dataclass(frozen=True)
class NetDevice:
    """A NIC as the guest reports it: netdev name, PCI address and driver."""

    netdev: str
    pci: str
    driver: str


def missing(image_dir: Path | None = None) -> str | None:
    """Why an ``EmulatedHost`` of ``image_dir`` (None: ``IMAGE_DIR``) cannot run here, in
    one line naming the install command (None: it may; booting tells the rest)."""
    image_dir = IMAGE_DIR if image_dir is None else image_dir
    absent = [qemu] if (qemu := qemu_missing()) else []
    if shutil.which("qemu-img") is None:
        absent.append("qemu-img")
    recipe = image_dir / RECIPE_FILE
    if not recipe.is_file():
        absent.append(f"the image ({image_dir})")
    elif recipe.read_text().strip() != IMAGE_RECIPE:
        absent.append(f"the image of recipe {IMAGE_RECIPE} ({image_dir} has an older one)")
    if not absent:
        return None
    return f"the emulated SR-IOV host needs {', '.join(absent)}; run {INSTALL}"


class EmulatedHost:
    """One boot of the emulated SR-IOV host, on an overlay of its own.

    Boots in the constructor and returns once SSH answers (raising
    ``EmulatedHostUnavailable`` with the console's tail if it does not by
    ``boot_deadline_s``); ``close()`` powers it off and deletes the overlay.
    ``boot_seconds``: from starting QEMU to the first command over SSH. ``ssh_port``:
    the port of 127.0.0.1 forwarded to the guest's sshd (None: a free one).
    """

    def __init__(
        self,
        image_dir: Path | None = None,
        *,
        boot_deadline_s: float = BOOT_DEADLINE_S,
        memory: str = MEMORY,
        cpus: int = CPUS,
        ssh_port: int | None = None,
    ) -> None:
        image_dir = IMAGE_DIR if image_dir is None else image_dir
        problem = missing(image_dir)
        if problem is not None:
            raise EmulatedHostUnavailable(problem)
        self.image_dir = image_dir
        self.base_image = image_dir / BASE_IMAGE
        self.ssh_key = image_dir / SSH_KEY
        self.qemu_version = qemu_version() or "unknown"
        self.directory = Path(tempfile.mkdtemp(prefix="sriovemu-", dir="/tmp"))
        self.overlay = self.directory / "overlay.qcow2"
        self.console_log = self.directory / "console.log"
        # A fixed port (an inventory's ansible_port) or any free one (tests in parallel).
        self.ssh_port = _free_port() if ssh_port is None else ssh_port
        self.process: subprocess.Popen[bytes] | None = None
        self._console = Console(self.console_log, READY_MARKER, QEMU)
        self.pfs: tuple[NetDevice, ...] = ()
        self.peer_port: NetDevice | None = None
        started = time.monotonic()
        deadline = started + boot_deadline_s
        try:
            backing = ["-F", "qcow2", "-b", str(self.base_image)]
            subprocess.run(
                ["qemu-img", "create", "-q", "-f", "qcow2", *backing, str(self.overlay)],
                check=True,
                capture_output=True,
            )
            self.process = subprocess.Popen(
                self._command(memory, cpus),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # QEMU alone in its group: killed by group id
            )
            assert self.process.stdout is not None
            self._console.follow(self.process.stdout)
            self._console.wait_marked(self.process, deadline)
            self._wait_for_ssh(deadline)
            self.boot_seconds = time.monotonic() - started
            self._read_nics()
        except BaseException as exc:
            # A guest that did not boot is killed at once: no sshd to ask for a power-off.
            self._shut_down(power_off=False)
            if isinstance(exc, EmulatedHostUnavailable | AgentUnavailable | TimeoutError | OSError):
                raise EmulatedHostUnavailable(
                    f"the emulated SR-IOV host did not boot: {exc}\n"
                    f"console ({self.console_log}), last lines:\n{self._console.tail()}"
                ) from exc
            raise

    def _command(self, memory: str, cpus: int) -> list[str]:
        append = "root=/dev/vda rw console=ttyS0 panic=-1 net.ifnames=1"
        command = [
            QEMU,
            "-nodefaults",
            "-machine",
            "q35",
            "-accel",
            "tcg",  # /dev/kvm is not relied on (unreliable on the lab machines)
            "-smp",
            str(cpus),
            "-m",
            memory,
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "stdio",  # the console, copied to console_log by a thread
            "-no-reboot",  # a panic (panic=-1) or a reboot ends QEMU, which the boot notices
            "-kernel",
            str(self.image_dir / KERNEL),
            "-initrd",
            str(self.image_dir / INITRD),
            "-append",
            append,
            "-drive",
            # cache=unsafe: the overlay dies with the session, so its flushes buy nothing
            f"file={self.overlay},if=virtio,format=qcow2,cache=unsafe",
            "-netdev",
            f"user,id=mgmt,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
            "-device",
            f"virtio-net-pci,netdev=mgmt,mac={MGMT_MAC}",
        ]
        # The PFs and the peer port share one hub: what a VF sends leaves through its PF
        # (igb's internal switch) and reaches the peer port, and the other way round.
        nics = [(slot, NIC_MODEL) for slot in PF_ROOT_PORTS] + [(PEER_ROOT_PORT, PEER_MODEL)]
        for slot, model in nics:
            command += [
                "-device",
                f"pcie-root-port,id=rp{slot},chassis={slot},slot={slot}",
                "-netdev",
                f"hubport,id=hub{slot},hubid={HUB_ID}",
                "-device",
                f"{model},bus=rp{slot},netdev=hub{slot}",
            ]
        return command

    def _wait_for_ssh(self, deadline: float) -> None:
        """The guest said sshd is up and its NIC configured; the first command proves it.
        A refusal is retried (each try takes seconds of key exchange under TCG); QEMU
        exiting or the deadline ends the wait."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("SSH did not answer within the boot deadline")
            try:
                answer = self.run("true", check=False, timeout=min(remaining, SSH_TIMEOUT_S))
            except subprocess.TimeoutExpired:
                continue
            if answer.returncode == 0:
                return
            if self.process is None or self.process.poll() is not None:
                raise EmulatedHostUnavailable("QEMU exited before SSH answered")
            # Waiting on QEMU (not a sleep) paces the tries and notices it dying at once.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=1)

    def _read_nics(self) -> None:
        """The PFs (SR-IOV capable NICs) and the peer port, as the guest names them."""
        script = (
            "for d in /sys/class/net/*/device; do n=${d%/device}; n=${n##*/}; "
            'echo "$n $(basename $(readlink -f $d)) $(basename $(readlink -f $d/driver))"; '
            "done"
        )
        devices = [NetDevice(*line.split()) for line in self.run(script).stdout.splitlines()]
        by_driver: dict[str, list[NetDevice]] = collections.defaultdict(list)
        for device in sorted(devices, key=lambda d: d.pci):
            by_driver[device.driver].append(device)
        self.pfs = tuple(by_driver["igb"])
        peers = by_driver[PEER_MODEL]
        if len(self.pfs) != len(PFS) or len(peers) != 1:
            raise EmulatedHostUnavailable(
                f"the guest shows {len(self.pfs)} igb PFs and {len(peers)} {PEER_MODEL} "
                f"ports, not {len(PFS)} and 1: {devices}"
            )
        self.peer_port = peers[0]

    def ssh_command(self, *argv: str) -> list[str]:
        """The ssh argv running ``argv`` as root in the guest (quoted: one remote word
        per element; a single element is a shell command line as it is)."""
        remote = argv[0] if len(argv) == 1 else shlex.join(argv)
        return [
            "ssh",
            "-i",
            str(self.ssh_key),
            "-p",
            str(self.ssh_port),
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",  # no "Permanently added ..." on every call
            "-o",
            "ConnectTimeout=60",
            "root@127.0.0.1",
            *([remote] if argv else []),
        ]

    def run(
        self, command: str | Sequence[str], *, check: bool = True, timeout: float = SSH_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command line (a str) or an argv (a sequence) in the guest as root.
        ``check``: a nonzero exit raises ``CalledProcessError`` carrying its stderr."""
        argv = [command] if isinstance(command, str) else list(command)
        return subprocess.run(
            self.ssh_command(*argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def inventory(self) -> dict[str, Any]:
        """This host as an SR-IOV lab inventory (``labs.sriov.load_inventory``'s shape,
        docs/labs.md): the connection, both PFs with ``VFS_PER_PF`` VFs each and what igb
        can do, and the peer port on the hub as each PF's traffic peer."""
        assert self.peer_port is not None, "the host has not booted"
        pfs = [
            {
                "pci": pf.pci,
                "netdev": pf.netdev,
                "vfs": VFS_PER_PF,
                "model": NIC_DESCRIPTION,
                "driver": NIC_MODEL,
                "vf_driver": VF_DRIVER,
                "capabilities": list(IGB_CAPABILITIES),
                "peer": {"netdev": self.peer_port.netdev},
            }
            for pf in self.pfs
        ]
        host = {
            "ansible_host": "127.0.0.1",
            "ansible_port": self.ssh_port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.ssh_key),
            # The image's host keys are the same in every session; nothing to remember.
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
            "ansible_python_interpreter": "/usr/bin/python3",
            "sriov_python": GUEST_PYTHON,
            "sriov_pfs": pfs,
        }
        return {"all": {"children": {"sriov_hosts": {"hosts": {HOSTNAME: host}}}}}

    def write_inventory(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump(self.inventory(), sort_keys=False))
        return path

    def close(self) -> None:
        """Power the guest off (``poweroff`` over SSH), kill QEMU at a deadline, delete
        the overlay and the console log; idempotent, and leaves nothing running."""
        self._shut_down(power_off=True)

    def _shut_down(self, *, power_off: bool) -> None:
        """``close()``, or without asking for a power-off (a failed boot: it kills QEMU
        at once and keeps the console log its error names)."""
        process, self.process = self.process, None
        if power_off and process is not None and process.poll() is None:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                # sshd dies with the guest, so this may end in an error: QEMU's exit decides.
                self.run("systemctl poweroff", check=False, timeout=30)
        reap(process, self._console, POWER_OFF_DEADLINE_S if power_off else 0)
        self.overlay.unlink(missing_ok=True)
        if power_off:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmulatedHost:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _free_port() -> int:
    """A TCP port of 127.0.0.1 free now (QEMU binds it a moment later: if another
    process takes it first, QEMU exits and the boot fails saying so)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
