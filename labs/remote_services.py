"""The services on the machine that holds the kernel: run over SSH, on ``linux://``.

On the sriov tier the rig's service processes otherwise run on the rig's machine and
reach the host's kernel through its agent (``kernel+unix://`` on the relay): the
services' own netlink code never runs there. ``OnHost(session, host)`` is a lab session
of a host's agent whose services run on the host itself, from the venv provisioning
installed (the product, and the test kit's crash launcher), each on a config the rig
writes: ``kernel: linux://<the session's node namespace>``, its journal and sockets
under a directory of the run's own (``/run/dranp-rig-XXXXXXXX``). The rig reaches their
sockets through one SSH connection forwarding each to a local socket (OpenSSH
``-L local.sock:remote.sock``), which carries every other command too (a control
master), so a restart costs a channel, not a key exchange.

A ``RemoteServiceProcess`` is a ``ServiceProcess`` to the rig (``ProcessRig`` drives it
unchanged): ``start(crash_at=point)`` starts the service through
``labs.crashing_service`` armed at ``point`` (the same variables as on the rig's
machine, set in the remote command), so the real process kills itself there with
SIGKILL, in the middle of its own netlink calls; ``kill()`` is ``kill -9`` of its pid on
the host; ``wait_exit()`` answers as ``Popen.wait`` does (a negative signal number), read
from the remote shell's status. The invariants still read the host's kernel through its
agent (the session's snapshot), and the journals through the services' own sockets.
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fakekernel import LabKernel
from plugins.coordinator import Inventory
from plugins.kernel import NsRef
from plugins.sdk.runner import ENV_ARM, ENV_MODE, CrashPoint

from ._lab import Lab
from ._process import ServiceProcess
from ._services import ProcessServices, ServiceSpec

__all__ = ["OnHost", "RemoteHost", "RemoteServiceProcess", "RemoteServices"]

REMOTE_PREFIX = "/run/dranp-rig-"  # root-only tmpfs; gone with the host's boot at worst
FORWARD_DEADLINE_S = 120.0  # an SSH login under TCG: seconds of key exchange
COMMAND_TIMEOUT_S = 120.0  # one command over the master's connection
# A service's start on the host: Python's imports and the journal's recovery under TCG
# take seconds; a loaded CI machine makes it slower.
START_TIMEOUT_S = 240.0
EXIT_DEADLINE_S = 60.0
SHELL_SIGNAL_BASE = 128  # a shell's $? for a child killed by signal n is 128 + n


@dataclass(frozen=True)
class RemoteHost:
    """How to run commands on a lab's host: ``ssh`` (the argv that runs a command line
    there, the line appended: as root, or ``sudo`` in ``root_prefix``), and ``python``
    (its interpreter holding the product and the test kit)."""

    name: str
    ssh: tuple[str, ...]
    python: str
    root_prefix: tuple[str, ...] = field(default=())

    def as_root(self, line: str) -> str:
        """``line`` (a shell command line) run as root on the host."""
        if not self.root_prefix:
            return line
        return shlex.join([*self.root_prefix, "sh", "-c", line])


class Connection:
    """One SSH connection to ``host`` (a control master at ``directory/ssh.ctl``) that
    forwards each ``forwards`` local socket (local path -> remote path) and runs every
    command of the node's services."""

    def __init__(self, host: RemoteHost, directory: Path, forwards: dict[Path, str]) -> None:
        self.host = host
        self.control = directory / "ssh.ctl"
        self.log = directory / "ssh.log"
        spec = [arg for local, remote in forwards.items() for arg in ("-L", f"{local}:{remote}")]
        head, tail = host.ssh[:1], host.ssh[1:]
        with self.log.open("ab") as log:
            self.master = subprocess.Popen(
                [
                    *head,
                    *("-M", "-S", str(self.control), "-N"),
                    *("-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes"),
                    *("-o", "ServerAliveInterval=30"),
                    *spec,
                    *tail,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_up(time.monotonic() + FORWARD_DEADLINE_S)
        except BaseException:
            self.close()
            raise

    def _wait_up(self, deadline: float) -> None:
        """Up once the master answers ``-O check`` (it listens on its control socket
        after the login and the forwards are made); its exit ends the wait at once."""
        while True:
            if self.master.poll() is not None:
                raise RuntimeError(
                    f"{self.host.name}: ssh exited {self.master.returncode} before its "
                    f"forwards were up: {self.log.read_text()[-2000:]}"
                )
            if self.control.is_socket():
                checked = subprocess.run(
                    self._argv("-O", "check"), capture_output=True, check=False, timeout=30
                )
                if checked.returncode == 0:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.host.name}: the SSH forwards were not up in time")
            # Waiting on the master (not a sleep) paces the checks and notices it dying.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.master.wait(timeout=0.2)

    def _argv(self, *options: str) -> list[str]:
        head, tail = self.host.ssh[:1], self.host.ssh[1:]
        return [*head, "-S", str(self.control), *options, *tail]

    def command(self, line: str) -> list[str]:
        """The argv running the shell command ``line`` on the host as root, over the
        master's connection."""
        return [*self._argv(), self.host.as_root(line)]

    def run(self, line: str, stdin: str | None = None) -> str:
        """``line`` on the host as root; its stdout (a failure raises, with stderr)."""
        done = subprocess.run(
            self.command(line),
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=COMMAND_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{self.host.name}: {line!r} exited {done.returncode}: {done.stderr.strip()}"
            )
        return done.stdout

    def close(self) -> None:
        if self.master.poll() is None:
            self.master.terminate()
            try:
                self.master.wait(timeout=EXIT_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait()


class RemoteServiceProcess(ServiceProcess):
    """One service program on the host (see the module), driven as a ``ServiceProcess``:
    ``socket_dir`` is where its sockets are forwarded to on this machine, ``remote``
    its directory on the host (config, token, journal, sockets, pid)."""

    publishes_metrics = False  # its textfile would be on the host: the rig reads this machine's

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        root: Path,
        socket_dir: Path,
        kernel_url: str,
        sockets: Sequence[str],
        *,
        remote: str,
    ) -> None:
        super().__init__(name, command, root, socket_dir, kernel_url, sockets)
        self.remote = remote
        self.remote_socket_dir = f"{remote}/sockets"
        self.connection: Connection | None = None  # set by RemoteServices once connected
        # The config the host's process reads: the rig's, with the host's paths.
        self.remote_config = {
            "socketDir": self.remote_socket_dir,
            "stateDir": f"{remote}/state",
            "tokenFile": f"{remote}/token",
            "kernel": kernel_url,
            "shutdownGraceSeconds": 5,
            "allowVolatileStateDir": True,  # the run's directory is on /run
        }

    def install_script(self) -> str:
        """Shell lines writing this service's token and config on the host (0600)."""
        lines = [f"mkdir -p {shlex.quote(self.remote)}"]
        for name, text in (
            ("token", self.token),
            ("service.yaml", yaml.safe_dump(self.remote_config)),
        ):
            marker = f"END_{secrets.token_hex(8)}"  # no line of the file can end the here-doc
            lines += [f"cat > {shlex.quote(f'{self.remote}/{name}')} <<'{marker}'", text, marker]
        return "\n".join(lines)

    def start(
        self,
        crash_at: CrashPoint | None = None,
        trace: Path | None = None,
        timeout: float = START_TIMEOUT_S,
        *,
        wait_ready: bool = True,
    ) -> None:
        """Start the program on the host (armed at ``crash_at``: through the launcher);
        wait until every socket, forwarded here, reports ready (or only answers)."""
        if trace is not None:
            raise ValueError("a service on the host records no trace here: trace it in-process")
        assert self.connection is not None, f"{self.name} is not connected to its host"
        host = self.connection.host
        env = [f"{ENV_ARM}={crash_at}", f"{ENV_MODE}=sigkill"] if crash_at is not None else []
        program = self.command if crash_at is None else ["labs.crashing_service", *self.command]
        argv = [
            "env",
            *env,
            host.python,
            "-m",
            *program,
            "--config",
            f"{self.remote}/service.yaml",
            "--log-level",
            self.log_level,
        ]
        # The shell waits for the program and exits with its status (128 + n for a
        # signal n), which ssh passes on; its pid (env execs the program: one pid) is
        # where kill() aims. The program alone is in the background, not a subshell.
        line = (
            f"cd / || exit 1; {shlex.join(argv)} < /dev/null & "
            f"echo $! > {shlex.quote(self.pid_file)}; wait $!; exit $?"
        )
        deadline = time.monotonic() + timeout
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.connection.command(line),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for socket in self.sockets:
            with self.client(socket) as client:
                left = max(deadline - time.monotonic(), 0.001)
                self._wait_serving(client, left, wait_ready=wait_ready)

    @property
    def pid_file(self) -> str:
        return f"{self.remote}/pid"

    def wait_exit(self, timeout: float = EXIT_DEADLINE_S) -> int:
        """How the program ended, as ``Popen.wait`` says it: its status, or minus the
        signal that killed it (read from the remote shell's ``128 + n``)."""
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if SHELL_SIGNAL_BASE < code < SHELL_SIGNAL_BASE + 65:
            return -(code - SHELL_SIGNAL_BASE)
        return code

    def _signal(self, signum: signal.Signals) -> None:
        assert self.connection is not None
        pid = f"$(cat {shlex.quote(self.pid_file)})"
        # Exits 0 when the process is gone already (it exited, or killed itself armed).
        self.connection.run(f"kill -{signum.value} {pid} 2>/dev/null; true")

    def stop(self, timeout: float = EXIT_DEADLINE_S) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def kill(self) -> None:
        """SIGKILL the program on the host; return once its shell reported its end."""
        if self.proc is not None and self.proc.poll() is None:
            self._signal(signal.SIGKILL)
            self.proc.wait(EXIT_DEADLINE_S)


class RemoteServices(ProcessServices):
    """Every service as its real program on ``host`` (see the module), on the lab's
    ``kernel_url`` (a ``linux://`` URL of the host)."""

    def __init__(
        self, lab: Lab, root: Path, specs: Sequence[ServiceSpec], socket_dir: Path, host: RemoteHost
    ) -> None:
        url = lab.kernel_url
        if url is None or not url.startswith("linux://"):
            raise ValueError(f"services on {host.name} need a linux:// kernel URL, not {url}")
        self.specs = tuple(specs)
        self.socket_dir = socket_dir
        self.host = host
        self.remote_root = f"{REMOTE_PREFIX}{secrets.token_hex(4)}"
        self.processes: dict[str, ServiceProcess] = {}
        remote: dict[str, RemoteServiceProcess] = {}
        for spec in self.specs:
            local_sockets = socket_dir / f"{spec.name}.sock.d"
            local_sockets.mkdir(parents=True, exist_ok=True)
            remote[spec.name] = RemoteServiceProcess(
                spec.name,
                spec.command,
                root / spec.name,
                local_sockets,
                url,
                spec.sockets,
                remote=f"{self.remote_root}/{spec.name}",
            )
        self.processes.update(remote)
        forwards = {
            process.socket_dir / sock: f"{process.remote_socket_dir}/{sock}"
            for process in remote.values()
            for sock in process.sockets
        }
        # The control socket's path is short (107 bytes): beside the node's sockets.
        self.connection = Connection(host, socket_dir, forwards)
        try:
            script = "\n".join(
                ["set -e", "umask 077", *(p.install_script() for p in remote.values())]
            )
            self.connection.run("sh -s", stdin=script + "\n")
            for process in remote.values():
                process.connection = self.connection
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kill every service on the host, remove the run's directory there, hang up."""
        try:
            for process in self.processes.values():
                with contextlib.suppress(Exception):  # one dead service must not keep the rest
                    process.kill()
            self.connection.run(f"rm -rf {shlex.quote(self.remote_root)}")
        finally:
            self.connection.close()


class OnHost(Lab):
    """``session`` (a lab on a host's kernel: a session of its agent) whose services run on the host
    (``RemoteServices``) on its node namespace, ``linux://``; everything else is the
    session's: its kernel (through the agent), its inventory, its close."""

    def __init__(self, session: Lab, host: RemoteHost) -> None:
        self.session = session
        self.host = host
        self.tier = session.tier
        self.start_seed = session.start_seed

    @property
    def kernel(self) -> LabKernel:
        return self.session.kernel

    @property
    def kernel_url(self) -> str:
        """The session's node namespace on the host, as its pin names it there."""
        return f"linux://{self.session.kernel.host_namespace().path}"

    def inventory(self) -> Inventory | None:
        return self.session.inventory()

    def furnish_sandbox(self, ns: NsRef) -> None:
        self.session.furnish_sandbox(ns)

    def process_services(
        self, root: Path, specs: Sequence[ServiceSpec], socket_dir: Path
    ) -> ProcessServices:
        return RemoteServices(self, root, specs, socket_dir, self.host)

    def close(self) -> None:
        self.session.close()
