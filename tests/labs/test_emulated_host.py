"""The emulated SR-IOV host: a QEMU guest that SSH (and so Ansible) reach like a NIC host.

One guest for the module (a boot under TCG takes a minute or more, never per test),
checked only over SSH, as a lab engineer's tools see a real host: its name and kernel,
systemd running, two igb PFs whose VFs come and go through ``sriov_numvfs``, the peer
port, Python 3.11 for Ansible, an inventory the SR-IOV lab reads, and a base image no
session changes. Without the image they skip with one line (under ``-m sriov`` they
fail: ``require_lab``). The bad-input tests need no guest and run everywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.pytest_plugin import require_lab
from labs import emulated_host
from labs.emulated_host import (
    BASE_IMAGE,
    BOOT_DEADLINE_S,
    HOSTNAME,
    IMAGE_RECIPE,
    INSTALL,
    RECIPE_FILE,
    VFS_PER_PF,
    EmulatedHost,
    EmulatedHostUnavailable,
    missing,
)
from labs.sriov import load_inventory


def _fingerprint(image: Path) -> tuple[float, str]:
    digest = hashlib.sha256()
    with image.open("rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return image.stat().st_mtime, digest.hexdigest()


@pytest.fixture(scope="module")
def base_fingerprint(request: pytest.FixtureRequest) -> tuple[float, str]:
    """The base image's mtime and checksum before this module's guest boots (skips or
    fails first, in one line, when the emulated host cannot run here)."""
    require_lab(request.config, "sriov", missing())
    return _fingerprint(emulated_host.IMAGE_DIR / BASE_IMAGE)


@pytest.fixture(scope="module")
def host(base_fingerprint: tuple[float, str]) -> Iterator[EmulatedHost]:
    with EmulatedHost() as booted_host:
        print(f"emulated host: SSH after {booted_host.boot_seconds:.1f} s")
        yield booted_host
    assert booted_host.process is None, "QEMU outlived close()"
    assert not booted_host.overlay.exists(), "close() left the overlay"


def _sh(host: EmulatedHost, script: str) -> str:
    return host.run(script).stdout.strip()


@pytest.mark.sriov
@pytest.mark.timeout(BOOT_DEADLINE_S + 120)  # the first test boots the guest in its setup
def test_the_host_answers_over_ssh_as_built(host: EmulatedHost) -> None:
    assert _sh(host, "hostname") == HOSTNAME
    assert re.fullmatch(r"6\.1\.0-\d+-amd64", _sh(host, "uname -r"))
    assert _sh(host, "cat /proc/1/comm") == "systemd"
    # --wait: until the boot's jobs are done; degraded (a unit failed) is still a usable host
    state = host.run("systemctl is-system-running --wait", check=False).stdout.strip()
    assert state in ("running", "degraded"), host.run("systemctl --failed", check=False).stdout
    assert _sh(host, "python3 -c 'import sys, apt; print(*sys.version_info[:2], sep=\".\")'") == (
        "3.11"
    )


@pytest.mark.sriov
@pytest.mark.timeout(BOOT_DEADLINE_S + 120)
def test_two_igb_pfs_make_and_remove_vfs(host: EmulatedHost) -> None:
    assert [pf.driver for pf in host.pfs] == ["igb", "igb"]
    for pf in host.pfs:
        device = f"/sys/bus/pci/devices/{pf.pci}"
        assert _sh(host, f"basename $(readlink -f /sys/class/net/{pf.netdev}/device)") == pf.pci
        assert int(_sh(host, f"cat {device}/sriov_totalvfs")) >= VFS_PER_PF
        # udevadm settle: the VFs' netdevs exist once the write returns, their names
        # once udev has renamed them; nothing is left to wait for after it.
        vfs = _sh(
            host,
            f"echo {VFS_PER_PF} > {device}/sriov_numvfs && udevadm settle && "
            f"for vf in {device}/virtfn*; do "
            'echo "$(ls $vf/net) $(basename $(readlink -f $vf/driver))"; done',
        ).splitlines()
        assert [line.split()[1] for line in vfs] == ["igbvf"] * VFS_PER_PF, vfs
        assert all(line.split()[0].startswith(f"{pf.netdev}v") for line in vfs), vfs
        left = _sh(
            host,
            f"echo 0 > {device}/sriov_numvfs && udevadm settle && "
            f"ls -d {device}/virtfn* 2>/dev/null | wc -l; "
            "grep -l igbvf /sys/class/net/*/device/uevent 2>/dev/null | wc -l",
        )
        assert left.split() == ["0", "0"], f"{pf.netdev}: VFs left after sriov_numvfs=0"


@pytest.mark.sriov
@pytest.mark.timeout(BOOT_DEADLINE_S + 120)
def test_the_peer_port_is_on_the_hub(host: EmulatedHost) -> None:
    assert host.peer_port is not None
    assert host.peer_port.driver == "e1000e"
    assert host.peer_port.netdev not in {pf.netdev for pf in host.pfs}
    assert _sh(host, f"cat /sys/class/net/{host.peer_port.netdev}/address")


@pytest.mark.sriov
@pytest.mark.timeout(BOOT_DEADLINE_S + 120)
def test_a_vf_reaches_the_peer_port_through_the_hub(host: EmulatedHost) -> None:
    """The wiring item 6 of issue 12 relies on: a VF in one namespace pings the peer port
    in another (ARP and ICMP out of the VF, igb's PF, QEMU's hub, into the e1000e)."""
    pf, peer = host.pfs[0], host.peer_port
    assert peer is not None
    device = f"/sys/bus/pci/devices/{pf.pci}"
    # ping -w: tries until the first answer or 60 s, which also covers the links'
    # carrier coming up (QEMU's NICs report link a moment after they are set up).
    answer = host.run(
        f"set -e; echo 1 > {device}/sriov_numvfs; udevadm settle; "
        f"vf=$(ls {device}/virtfn0/net); ip link set {pf.netdev} up; "
        "ip netns add vf-side; ip netns add peer-side; "
        "ip link set $vf netns vf-side; "
        f"ip link set {peer.netdev} netns peer-side; "
        "ip -n vf-side addr add 192.0.2.1/24 dev $vf; ip -n vf-side link set $vf up; "
        f"ip -n peer-side addr add 192.0.2.2/24 dev {peer.netdev}; "
        f"ip -n peer-side link set {peer.netdev} up; "
        "ip netns exec vf-side ping -c 1 -w 60 192.0.2.2",
        check=False,
    )
    # Deleting the namespaces gives the peer port back to the root namespace.
    host.run(
        f"ip netns del vf-side; ip netns del peer-side; echo 0 > {device}/sriov_numvfs; "
        f"ip link set {pf.netdev} down; udevadm settle"
    )
    assert answer.returncode == 0, answer.stdout + answer.stderr
    # Echo requests sent before ARP resolved are answered together once it has: >= 1.
    received = re.search(r" (\d+) received", answer.stdout)
    assert received is not None, answer.stdout
    assert int(received.group(1)) >= 1, answer.stdout
    assert _sh(host, f"ls /sys/class/net/{peer.netdev}/device/driver -d >/dev/null && echo ok")


@pytest.mark.sriov
@pytest.mark.timeout(BOOT_DEADLINE_S + 120)
def test_the_inventory_is_one_the_sriov_lab_reads(host: EmulatedHost, tmp_path: Path) -> None:
    inventory = load_inventory(host.write_inventory(tmp_path / "emulated.yml"))
    (lab_host,) = inventory.hosts
    assert (lab_host.name, lab_host.address, lab_host.port) == (
        HOSTNAME,
        "127.0.0.1",
        host.ssh_port,
    )
    assert [(pf.pci, pf.netdev, pf.vfs) for pf in lab_host.pfs] == [
        (pf.pci, pf.netdev, VFS_PER_PF) for pf in host.pfs
    ]
    assert host.peer_port is not None
    assert {pf.peer.netdev for pf in lab_host.pfs if pf.peer} == {host.peer_port.netdev}


@pytest.mark.sriov
@pytest.mark.timeout(BOOT_DEADLINE_S + 120)
def test_the_session_writes_its_overlay_not_the_base_image(
    host: EmulatedHost, base_fingerprint: tuple[float, str]
) -> None:
    host.run("echo written > /root/overlay-probe && sync")
    assert host.overlay.stat().st_size > 0
    assert _fingerprint(host.base_image) == base_fingerprint


@pytest.mark.sriov
def test_a_boot_past_its_deadline_is_killed_with_the_consoles_tail(
    base_fingerprint: tuple[float, str],
) -> None:
    with pytest.raises(EmulatedHostUnavailable) as raised:
        EmulatedHost(boot_deadline_s=3)  # QEMU starts; the kernel prints later
    message = str(raised.value)
    assert "within the boot deadline" in message
    log = re.search(r"console \((/tmp/sriovemu-[^/]+)/console.log\)", message)
    assert log is not None, message
    session = Path(log.group(1))
    console = (session / "console.log").read_text(errors="replace")
    # QEMU's own first line (stderr shares the console's pipe) is in the log the message
    # names; how much of the kernel's boot follows it in 3 s (and so whether it is still
    # in the message's tail) depends on the machine's speed.
    assert "hub 0 is not connected to host network" in console
    assert console.rstrip().splitlines()[-1] in message, "the tail ends where the log ends"
    running = [p for p in Path("/proc").glob("[0-9]*/cmdline") if _reads(p, str(session))]
    assert running == [], f"QEMU of {session} still runs"
    assert not (session / "overlay.qcow2").exists()
    shutil.rmtree(session)  # a failed boot keeps its console log for the error's reader


def _reads(cmdline: Path, needle: str) -> bool:
    with contextlib.suppress(OSError):
        return needle in cmdline.read_bytes().decode(errors="replace")
    return False


def test_a_missing_image_is_one_line_naming_the_install_script(tmp_path: Path) -> None:
    problem = missing(tmp_path)
    assert problem is not None
    assert "\n" not in problem
    assert f"the image ({tmp_path})" in problem
    assert problem.endswith(f"run {INSTALL}")
    with pytest.raises(EmulatedHostUnavailable) as raised:
        EmulatedHost(tmp_path)
    assert str(raised.value) == problem


def test_an_image_of_an_older_recipe_counts_as_missing(tmp_path: Path) -> None:
    (tmp_path / RECIPE_FILE).write_text("0\n")
    problem = missing(tmp_path)
    assert problem is not None
    assert f"recipe {IMAGE_RECIPE}" in problem
    assert problem.endswith(f"run {INSTALL}")


@pytest.mark.parametrize(
    "name", ["IMAGE_DIR", "IMAGE_RECIPE", "HOSTNAME", "READY_MARKER", "MGMT_MAC"]
)
def test_the_install_script_can_read_the_modules_constants(name: str) -> None:
    """scripts/install-sriov-lab reads these with sed, as `NAME = "value"` lines."""
    source = Path(emulated_host.__file__).read_text()
    value = str(getattr(emulated_host, name))
    assert re.search(rf'^{name} = (Path\()?"{re.escape(value)}"\)?(\s+#.*)?$', source, re.MULTILINE)
