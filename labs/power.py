"""Guests whose power can be pulled: a QEMU guest with a disk of its own and a driver.

The VM lab's guest (``labs.vm``) keeps nothing: its root is the host's, read-only, and
its state lives in tmpfs. Pulling the plug needs state that outlives a boot, so a
``PowerGuest`` adds a virtio-blk disk, a raw ext4 image on the host opened with
``cache=none`` (``O_DIRECT``: the host's page cache cannot keep a write the guest did
not flush, so what survives a kill is what the guest's own flushes made durable), and a
virtio-serial port whose host end is a Unix socket of QEMU's, on which a long-lived
program in the guest (the driver, whatever ``command`` runs) and the host exchange JSON
lines: the driver sends events, the host sends commands.

``kill()`` is the plug: SIGKILL to virtme-ng's process group (vng and QEMU), at once,
wherever the guest is. The next ``PowerGuest`` on the same image boots on what the disk
held. ``make_disk`` formats an image on the host (ext4, what the guest mounts).

Python over 9p under TCG is slow (every module lookup is several round trips through
an emulated device), so ``make_bundle`` copies this checkout with its venv, the standard
library and the warmed bytecode into a read-only ext4 image; a guest given it mounts it
over the same paths before its command runs (imports: 15-31 s instead of 101-115 s).
``nofsync_library`` and ``unflushed`` make a guest whose flushes do nothing: the fault
that shows a power-loss check can fail.

docs/power-loss.md has the design and its figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from ._console import Console
from .vm import (
    BOOT_DEADLINE_S,
    DEFAULT_KERNEL,
    POWER_OFF_DEADLINE_S,
    PYCACHE,
    REPO,
    VmLabUnavailable,
    kernel_image,
    missing,
    vng_path,
)

__all__ = [
    "BUNDLE_SERIAL",
    "DISK_SERIAL",
    "PORT_NAME",
    "GuestGone",
    "PowerGuest",
    "guest_python",
    "make_bundle",
    "make_disk",
    "nofsync_library",
    "unflushed",
    "warm_bytecode",
]

PORT_NAME = "dranp.power"  # /dev/virtio-ports/<name> in the guest
DISK_SERIAL = "dranp-power"  # the disk's virtio serial: /sys/block/vdX/serial in the guest
CACHE_MODES = ("none", "writeback", "writethrough", "directsync", "unsafe")
DISK_MIB = 256
BUNDLE_SERIAL = "dranp-bundle"
BUNDLE_MOUNT = "/run/dranp-bundle"
# What the guest's Python reads, copied onto a read-only ext4 disk and mounted over the
# same paths in the guest (9p under TCG is slow: every lookup is several round trips).
# Left out: directories of no use to the driver, anywhere in a tree ...
BUNDLE_SKIP = frozenset({".git", "__pycache__", "node_modules", "reports"})
# ... and the standard library's own packages it never imports (its site-packages is
# not the venv's).
STDLIB_SKIP = frozenset({"site-packages", "test", "idlelib", "tkinter", "ensurepip", "lib2to3"})


class GuestGone(RuntimeError):
    """The guest's driver hung up, the guest exited, or no event came by the deadline;
    the message carries the console's tail."""


def make_disk(path: Path, mib: int = DISK_MIB) -> Path:
    """A fresh raw image of ``mib`` MiB holding an empty ext4 file system (sparse; the
    file system's own journal on, as a node's would be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with path.open("wb") as image:
        image.truncate(mib * 1024 * 1024)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-L", DISK_SERIAL, str(path)],
        check=True,
        capture_output=True,
    )
    return path


def warm_bytecode(modules: Sequence[str]) -> None:
    """Compile what the guest will import into the VM lab's ``PYCACHE`` on the host (the
    guest's root is read-only: without this it compiles under TCG on every boot)."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(PYCACHE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run(
        [sys.executable, "-c", f"import {', '.join(modules)}"], env=env, cwd=REPO, check=True
    )


def bundle_trees() -> dict[str, Path]:
    """What the bundle holds, by its directory in the image: this checkout (with its
    venv), the interpreter's standard library, the warmed bytecode."""
    return {
        "repo": REPO,
        "stdlib": Path(sysconfig.get_paths()["stdlib"]),
        "pycache": PYCACHE,
    }


def make_bundle(path: Path) -> Path:
    """A read-only ext4 image of ``bundle_trees()`` (hard links into a staging directory
    next to ``path``, then ``mkfs.ext4 -d``, which keeps modification times, so the
    warmed bytecode stays valid). Seconds; built once per run, after the bytecode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="bundle-", dir=path.parent))
    try:
        size = 0
        for name, tree in bundle_trees().items():
            size += _link_tree(tree, staging / name, STDLIB_SKIP if name == "stdlib" else ())
        path.unlink(missing_ok=True)
        with path.open("wb") as image:
            image.truncate(size * 2 + 64 * 1024 * 1024)
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-L", BUNDLE_SERIAL, "-d", str(staging), str(path)],
            check=True,
            capture_output=True,
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def _link_tree(source: Path, target: Path, skip_top: Collection[str] = ()) -> int:
    """Hard-link ``source``'s files into ``target`` (copy across file systems), skipping
    ``BUNDLE_SKIP`` directories anywhere and ``skip_top`` ones at its top; the bytes."""

    def kept(directory: str, subdirs: list[str]) -> list[str]:
        top = Path(directory) == source
        return [d for d in subdirs if d not in BUNDLE_SKIP and not (top and d in skip_top)]

    total = 0
    for directory, subdirs, files in os.walk(source):
        subdirs[:] = kept(directory, subdirs)
        into = target / Path(directory).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            src = Path(directory) / name
            if not src.is_file():
                continue
            try:
                os.link(src, into / name)
            except OSError:
                shutil.copy2(src, into / name)
            total += src.stat().st_size
    # Symlinks inside a tree (the venv's bin/python) as they are.
    for directory, subdirs, _ in os.walk(source):
        subdirs[:] = kept(directory, subdirs)
        for name in os.listdir(directory):
            src = Path(directory) / name
            dst = target / Path(directory).relative_to(source) / name
            if src.is_symlink() and not dst.exists() and not dst.is_symlink():
                dst.symlink_to(os.readlink(src))
    return total


def bundle_mounts() -> str:
    """The guest's shell commands that mount the bundle over the paths it copies."""
    commands = [
        f"mkdir -p {BUNDLE_MOUNT}",
        f"mount -o ro /dev/disk/by-id/virtio-{BUNDLE_SERIAL} {BUNDLE_MOUNT}",
    ]
    for name, tree in bundle_trees().items():
        commands.append(f"mount --bind {BUNDLE_MOUNT}/{name} {shlex.quote(str(tree))}")
    return " && ".join(commands)


NOFSYNC_SOURCE = """
/* The power-loss rig's fault: a guest whose flushes do nothing. */
int fsync(int fd) { (void)fd; return 0; }
int fdatasync(int fd) { (void)fd; return 0; }
int syncfs(int fd) { (void)fd; return 0; }
void sync(void) {}
"""


def nofsync_library(directory: Path) -> Path:
    """A shared library (LD_PRELOAD) whose ``fsync``, ``fdatasync``, ``syncfs`` and
    ``sync`` return at once without flushing: what a journal on a disk that lies about
    its flushes sees. Compiled with the host's ``cc``."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "nofsync.c"
    library = directory / "nofsync.so"
    source.write_text(NOFSYNC_SOURCE)
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise VmLabUnavailable("the nofsync fault needs a C compiler (cc) on the host")
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    return library


def unflushed(library: Path) -> str:
    """The guest's shell commands that keep what its programs write in its page cache:
    no periodic writeback, dirty pages never expire, and flushes of the programs run
    afterwards are no-ops (``library`` from ``nofsync_library``)."""
    return (
        "echo 0 > /proc/sys/vm/dirty_writeback_centisecs && "
        "echo 8640000 > /proc/sys/vm/dirty_expire_centisecs && "
        f"export LD_PRELOAD={shlex.quote(str(library))}"
    )


def guest_python(module: str, *args: str) -> str:
    """The shell command that runs ``python -m module args`` in the guest, from this
    checkout with the warmed bytecode."""
    return (
        f"cd {shlex.quote(str(REPO))} && PYTHONDONTWRITEBYTECODE=1 "
        f"PYTHONPYCACHEPREFIX={shlex.quote(str(PYCACHE))} "
        f"exec {shlex.quote(sys.executable)} -m {module} {shlex.join(args)}"
    )


class PowerGuest:
    """One boot of a guest of Debian's ``kernel`` with ``disk`` attached and ``command``
    (a shell command line, e.g. from ``guest_python``) as its program.

    Boots in the constructor and returns once the host end of the port is connected
    (QEMU starts the guest only then); ``wait_event`` waits for the driver's events.
    ``kill()`` pulls the plug; ``close()`` waits for the guest to power off by itself
    (the driver exits) and kills it at a deadline. Nothing is left running either way.
    """

    def __init__(
        self,
        disk: Path,
        command: str,
        *,
        kernel: str = DEFAULT_KERNEL,
        cache: str = "none",
        memory: str = "1G",
        cpus: int = 2,
        boot_deadline_s: float = BOOT_DEADLINE_S,
        bundle: Path | None = None,
    ) -> None:
        """``bundle``: an image from ``make_bundle``, mounted over the paths it copies
        before ``command`` runs (None: the guest reads everything over 9p)."""
        problem = missing(kernel)
        if problem is not None:
            raise VmLabUnavailable(problem)
        if cache not in CACHE_MODES:
            raise ValueError(f"unknown cache mode {cache!r}; valid: {', '.join(CACHE_MODES)}")
        image = kernel_image(kernel)
        vng = vng_path()
        assert image is not None
        assert vng is not None
        self.disk = disk
        self.cache = cache
        self.started = time.monotonic()
        self.directory = Path(tempfile.mkdtemp(prefix="powerlab-", dir="/tmp"))
        self.socket = self.directory / "driver.sock"
        self.console_log = self.directory / "console.log"
        self.events: list[dict[str, Any]] = []
        self.killed = False
        self._changed = threading.Condition()
        self._ended = False
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._console = Console(self.console_log, "\x00never", "virtme-ng")
        devices = [
            f"-drive file={disk},if=none,id=pldisk,format=raw,cache={cache}",
            f"-device virtio-blk-pci,drive=pldisk,serial={DISK_SERIAL}",
            f"-chardev socket,id=pldrv,path={self.socket},server=on,wait=on",
            "-device virtio-serial-pci",
            f"-device virtserialport,chardev=pldrv,name={PORT_NAME}",
        ]
        if bundle is not None:
            devices += [
                f"-drive file={bundle},if=none,id=plbundle,format=raw,readonly=on",
                f"-device virtio-blk-pci,drive=plbundle,serial={BUNDLE_SERIAL}",
            ]
            command = f"{bundle_mounts()} && {command}"
        self.process = subprocess.Popen(
            [
                vng,
                "--disable-kvm",
                "--disable-microvm",
                "--verbose",
                "--run",
                str(image),
                "--cpus",
                str(cpus),
                "--memory",
                memory,
                f"--qemu-opts={' '.join(devices)}",
                "--exec",
                command,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,  # vng and its QEMU: one group, killed together
        )
        try:
            assert self.process.stdout is not None
            self._console.follow(self.process.stdout)
            self._sock = self._connect(self.started + boot_deadline_s)
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
        except BaseException:
            self.kill()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def _connect(self, deadline: float) -> socket.socket:
        while True:
            if self.socket.is_socket():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.connect(str(self.socket))
                    return sock
                except ConnectionRefusedError:
                    sock.close()
            if self.process.poll() is not None:
                raise GuestGone(
                    f"virtme-ng exited with {self.process.returncode} before QEMU listened\n"
                    + self.tail()
                )
            if time.monotonic() >= deadline:
                raise GuestGone("QEMU never listened on the driver's socket\n" + self.tail())
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=0.05)  # notices the process dying at once

    def _read(self) -> None:
        assert self._sock is not None
        try:
            with self._sock.makefile("rb") as stream:
                for raw in stream:
                    if not raw.strip():
                        continue
                    event = json.loads(raw)
                    event["host_t"] = time.monotonic() - self.started
                    with self._changed:
                        self.events.append(event)
                        self._changed.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def send(self, command: dict[str, Any]) -> None:
        assert self._sock is not None
        self._sock.sendall(json.dumps(command).encode() + b"\n")

    def wait_event(
        self, accept: Callable[[dict[str, Any]], bool], deadline_s: float, what: str
    ) -> dict[str, Any]:
        """The first event (of all received so far, then of those to come) ``accept``
        takes; ``GuestGone`` at the deadline or once the driver's stream ended."""
        deadline = time.monotonic() + deadline_s
        with self._changed:
            while True:
                found = next((e for e in self.events if accept(e)), None)
                if found is not None:
                    return found
                if self._ended:
                    raise GuestGone(f"the guest ended before {what}\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GuestGone(f"no {what} within {deadline_s:.0f} s\n{self.tail()}")
                self._changed.wait(left)

    def idle_until(
        self, moment: float, stop: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any] | None:
        """Wait until ``moment`` (seconds since the boot started, the events' ``host_t``
        clock): None then, or the first event ``stop`` takes if one comes first;
        ``GuestGone`` if the driver's stream ends first."""
        with self._changed:
            while True:
                found = next((e for e in self.events if stop(e)), None)
                if found is not None:
                    return found
                if self._ended:
                    raise GuestGone(f"the guest ended before the kill moment\n{self.tail()}")
                left = moment - (time.monotonic() - self.started)
                if left <= 0:
                    return None
                self._changed.wait(left)

    def wait_kind(self, kind: str, deadline_s: float) -> dict[str, Any]:
        """The driver's first event of ``kind``; its ``error`` event fails at once."""

        def accept(event: dict[str, Any]) -> bool:
            if event.get("ev") == "error":
                raise GuestGone(f"the driver failed: {event.get('error')}\n{self.tail()}")
            return bool(event.get("ev") == kind)

        return self.wait_event(accept, deadline_s, f"{kind!r} event")

    def received(self, kind: str) -> list[dict[str, Any]]:
        with self._changed:
            return [e for e in self.events if e.get("ev") == kind]

    def tail(self) -> str:
        return f"console ({self.console_log}), last lines:\n{self._console.tail()}"

    def kill(self) -> None:
        """Pull the plug: SIGKILL vng's group (QEMU with it) and reap it."""
        if self.process.poll() is None:
            self.killed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._finish()

    def close(self, deadline_s: float = POWER_OFF_DEADLINE_S) -> None:
        """Wait for the guest to power off (its driver exited), killing it at the deadline."""
        try:
            self.process.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        self._finish()

    def _finish(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        if self._reader is not None:
            self._reader.join(timeout=POWER_OFF_DEADLINE_S)
        self._console.join()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def remove_files(self) -> None:
        """Remove the boot's socket and console log (after a failure was reported)."""
        shutil.rmtree(self.directory, ignore_errors=True)
