"""Run a program the way its systemd unit does, on a machine where systemd is not PID 1.

A rendered unit (``plugins.services.units``) says where its program's config, sockets and
journal are and what it may write. :func:`unit_command` gives the argv that runs the
unit's ``ExecStart=`` with exactly those paths, in namespaces of its own that emulate the
unit's sandbox, under a root prefix ``R`` so that nothing touches the real ``/etc``,
``/run`` or ``/var/lib``: the program sees ``R/run`` as ``/run``, and ``/etc`` and
``/var/lib`` with ``R/etc`` and ``R/var/lib`` laid over them (overlayfs: what the test
writes there, and what the program writes, is in ``R``; the real directories are never
written). The test reads and connects to ``R/run/...`` from outside.

Emulated, in the order systemd applies them: ``RuntimeDirectory=`` and
``StateDirectory=`` (created with their ``...Mode=``); ``ProtectSystem=strict`` (every
mount read-only but ``/proc``, ``/sys``, ``/dev``, those directories and
``ReadWritePaths=``, which must exist); ``PrivateTmp=`` (where the program or the test's
interpreter is installed under ``/tmp``, as a checkout may be, that stays visible,
read-only); ``PrivateNetwork=`` (a network
namespace of its own); ``UMask=``; ``CapabilityBoundingSet=`` and ``NoNewPrivileges=``
(``setpriv``); a clean environment with ``$NOTIFY_SOCKET`` at ``/run/systemd/notify``
(the caller's listener, bound there) and ``$RUNTIME_DIRECTORY``/``$STATE_DIRECTORY``.
Not emulated: ``ProtectHome=`` (a test's interpreter may live under ``/root``), the
system call and address family filters, ``IPAddress*=`` and the ``Protect*`` options of
kernel interfaces: those need systemd itself (``systemd-run``), and the unit's tests check
those lines as text and with ``systemd-analyze security``.

Root only, with util-linux ``unshare`` and ``setpriv`` and overlayfs: :func:`missing` says
which one is not there.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ._readiness import ReadyListener

__all__ = ["ENTRY", "Unit", "missing", "start_unit", "unit_command"]

ENTRY = "labs.unit_sandbox"
NOTIFY_PATH = "/run/systemd/notify"
_API_FILESYSTEMS = ("/proc", "/sys", "/dev")
_OVERLAID = ("/etc", "/var/lib")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Unit:
    """A rendered unit's ``[Service]`` directives, with ``%i`` as ``instance``."""

    def __init__(self, text: str, instance: str = "") -> None:
        self.instance = instance
        self._values: dict[str, list[str]] = {}
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line:
                key, value = line.split("=", 1)
                self._values.setdefault(key.strip(), []).append(
                    value.strip().replace("%i", instance)
                )

    def values(self, key: str) -> list[str]:
        """Every value of ``key``, each split at white space (an empty one resets)."""
        found: list[str] = []
        for value in self._values.get(key, []):
            found = found + value.split() if value else []
        return found

    def has(self, key: str) -> bool:
        return key in self._values

    def flag(self, key: str) -> bool:
        values = self._values.get(key, [])
        return bool(values) and values[-1] in ("yes", "true", "strict", "1")

    def one(self, key: str, default: str = "") -> str:
        values = self._values.get(key, [])
        return values[-1] if values else default

    @property
    def exec_start(self) -> list[str]:
        return shlex.split(self.one("ExecStart"))

    @property
    def runtime_directories(self) -> list[Path]:
        return [Path("/run") / d for d in self.values("RuntimeDirectory")]

    @property
    def state_directories(self) -> list[Path]:
        return [Path("/var/lib") / d for d in self.values("StateDirectory")]

    @property
    def writable(self) -> list[Path]:
        """What ProtectSystem=strict leaves writable (besides the API file systems)."""
        extra = [Path(p.lstrip("-")) for p in self.values("ReadWritePaths")]
        return [*self.runtime_directories, *self.state_directories, *extra]


def missing() -> str | None:
    """Why the sandbox cannot be emulated here (one line), or None."""
    if os.geteuid() != 0:
        return "emulating a unit's sandbox needs root (mount namespaces, overlayfs)"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"emulating a unit's sandbox needs util-linux {tool}"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "emulating a unit's sandbox needs overlayfs (modprobe overlay)"
    return None


def unit_command(unit_file: Path, instance: str, root: Path) -> list[str]:
    """The argv that runs ``unit_file``'s program for ``instance`` (``%i``) under ``root``.

    Run it with ``$NOTIFY_SOCKET`` set to wait for ``READY=1`` as systemd would; the pid
    is the program's own (``unshare`` and the sandbox exec it)."""
    unit = Unit(unit_file.read_text(encoding="utf-8"), instance)
    namespaces = ["--mount", "--propagation", "private"]
    if unit.flag("PrivateNetwork"):
        namespaces.append("--net")
    return [
        "unshare",
        *namespaces,
        "--",
        sys.executable,
        "-m",
        ENTRY,
        str(root),
        str(unit_file),
        instance,
    ]


def start_unit(
    unit_file: Path, instance: str, root: Path, log: Path, timeout: float = 60
) -> subprocess.Popen[bytes]:
    """Start the unit's program for ``instance`` under ``root`` (:func:`unit_command`) and
    wait for its ``READY=1``, as ``systemctl start`` does; its output goes to ``log``.

    A program that exits first, or is not ready within ``timeout``, raises RuntimeError
    naming its status and ``log``."""
    with ReadyListener() as listener, log.open("ab") as out:
        proc = subprocess.Popen(
            unit_command(unit_file, instance, root),
            env={**os.environ, **listener.env()},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        outcome = listener.wait(proc, timeout)
    if outcome != "ready":
        if proc.poll() is None:
            proc.kill()
        status = proc.wait(30)
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(
            f"{unit_file.name} ({instance}) {outcome} with status {status}: see {log}, "
            f"last lines:\n{tail}"
        )
    return proc


def _mount(*arguments: str) -> None:
    done = subprocess.run(["mount", *arguments], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{ENTRY}: mount {' '.join(arguments)}: {' '.join(done.stderr.split())}")


def _mount_points() -> list[str]:
    """The mount points this namespace can reach: a mount under a path that a later
    mount covers (the host's ``/run/netns``, which ``ip netns`` and podman make a mount
    point, under the sandbox's own ``/run``) is hidden, and remounting its path would
    name the covering mount's directory instead."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(point.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\"))
    return [
        point
        for index, point in enumerate(points)
        if not any(_under(point, [later]) for later in points[index + 1 :])
    ]


def _under(path: str, tops: Sequence[str]) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)


def _enter(root: Path, unit: Unit) -> dict[str, str]:
    """Set up the sandbox in this (new, private) mount namespace; the program's env."""
    _mount("--rbind", str(root / "run"), "/run")
    for top in _OVERLAID:
        upper, work = root / top.lstrip("/"), root / ".work" / top.lstrip("/")
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        _mount(
            "-t", "overlay", "overlay", "-o", f"lowerdir={top},upperdir={upper},workdir={work}", top
        )
    modes = (
        (unit.runtime_directories, unit.one("RuntimeDirectoryMode", "0755")),
        (unit.state_directories, unit.one("StateDirectoryMode", "0755")),
    )
    for directories, mode in modes:
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(int(mode, 8))
    env = {"PATH": _PATH, "LANG": "C.UTF-8"}
    if unit.runtime_directories:
        env["RUNTIME_DIRECTORY"] = ":".join(map(str, unit.runtime_directories))
    if unit.state_directories:
        env["STATE_DIRECTORY"] = ":".join(map(str, unit.state_directories))
    listener = os.environ.get("NOTIFY_SOCKET", "")
    if listener.startswith("/"):
        Path(NOTIFY_PATH).parent.mkdir(parents=True, exist_ok=True)
        Path(NOTIFY_PATH).touch()
        _mount("--bind", listener, NOTIFY_PATH)
        env["NOTIFY_SOCKET"] = NOTIFY_PATH
    # Held before ProtectSystem= makes /run read-only: what PrivateTmp= must not hide.
    kept = _hold(_installation(unit)) if unit.flag("PrivateTmp") else []
    if unit.one("ProtectSystem") == "strict":
        writable = [str(p) for p in unit.writable]
        for path in writable:
            if not os.path.isdir(path):  # systemd fails the start (226/NAMESPACE)
                raise SystemExit(f"{ENTRY}: ReadWritePaths={path}: No such file or directory")
            _mount("--bind", path, path)
        for point in _mount_points():
            if not _under(point, [*_API_FILESYSTEMS, *writable]) and os.path.exists(point):
                _mount("-o", "remount,bind,ro", point)
    if unit.flag("PrivateTmp"):
        _private_tmp(kept)
    return env


def _installation(unit: Unit) -> list[Path]:
    """Where the unit's program and this test kit's interpreter are installed: a real
    node has them under /usr or /opt, a test's checkout may lie under /tmp."""
    program = Path(unit.exec_start[0]).parent if unit.exec_start else None
    found = {Path(sys.prefix), Path(sys.base_prefix), Path(__file__).resolve().parents[1]}
    return sorted(found | ({program} if program is not None else set()))


_TMPS = ("/tmp", "/var/tmp")


def _hold(installation: Sequence[Path]) -> list[tuple[Path, Path]]:
    """``(path, held)`` for each part of ``installation`` under /tmp or /var/tmp, bound at
    ``held`` under /run (the root's) so that it can be bound back once /tmp is replaced."""
    kept = [p for p in installation if _under(str(p), _TMPS) and p.is_dir()]
    holding = Path("/run/.unit-sandbox")
    pairs = []
    for index, path in enumerate(kept):
        held = holding / str(index)
        held.mkdir(parents=True, exist_ok=True)
        _mount("--bind", str(path), str(held))
        pairs.append((path, held))
    return pairs


def _private_tmp(kept: Sequence[tuple[Path, Path]]) -> None:
    """A fresh /tmp and /var/tmp; what ``_hold`` kept, bound back read-only at its path."""
    for tmp in _TMPS:
        _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", tmp)
    for path, held in kept:
        path.mkdir(parents=True, exist_ok=True)
        _mount("--bind", str(held), str(path))
        _mount("-o", "remount,bind,ro", str(path))


def _privileges(unit: Unit) -> list[str]:
    """``setpriv`` arguments for the unit's capability bounding set and no_new_privs."""
    arguments = []
    if unit.has("CapabilityBoundingSet"):
        keep = [c.removeprefix("CAP_").lower() for c in unit.values("CapabilityBoundingSet")]
        arguments.append("--bounding-set=" + ",".join(["-all", *(f"+{c}" for c in keep)]))
        arguments.append("--inh-caps=-all")
    if unit.flag("NoNewPrivileges"):
        arguments.append("--no-new-privs")
    return arguments


def main(argv: Sequence[str]) -> int:
    """``python -m labs.unit_sandbox ROOT UNIT_FILE INSTANCE``: inside ``unit_command``'s
    namespaces, set the sandbox up and exec the unit's program."""
    if len(argv) != 3:
        print(f"usage: python -m {ENTRY} ROOT UNIT_FILE INSTANCE", file=sys.stderr)
        return 2
    root, unit_file, instance = Path(argv[0]), Path(argv[1]), argv[2]
    unit = Unit(unit_file.read_text(encoding="utf-8"), instance)
    env = _enter(root, unit)
    os.umask(int(unit.one("UMask", "0022"), 8))
    command = ["setpriv", *_privileges(unit), "--", *unit.exec_start]
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"{ENTRY}: {command[0]}: {exc.strerror}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
