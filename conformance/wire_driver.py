"""Drive a plugin the way a node does: start it as a program, call it over its socket,
crash it, and look only at the kernel.

A ``WireSession`` is one check's world: a fresh lab (a fake kernel server, or a netns
lab), the sandbox namespace, a short run directory (``{run}``: Unix socket paths are
short), a fresh token, and the plugin's process, started with the target's command.
Everything the checks learn about the plugin comes from gRPC answers and the kernel's
snapshot; the plugin's journal, its language and its code are its own business.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from fakekernel.lab import randomize_start_state
from fakekernel.model import diff
from labs import DEFAULT_LAB, FakeServerLab, Lab, NetnsLab
from plugins.sdk import SandboxHandle
from plugins.sdk.host import PluginCallError, PluginClient

from .target import foreign_link
from .wire_target import WireTarget, placeholder_values

STOP_DEADLINE_S = 15.0
LOG_TAIL_BYTES = 2000


class WireDriverError(RuntimeError):
    """The suite could not run the plugin at all (it did not start, or would not stop):
    a failure of the check that tried, with the plugin's own output."""


class WireLabs:
    """The labs of one run's checks, each fresh. ``fake://``: one fake kernel server for
    the run, its model reloaded from the lab file and given the seed's start state again
    for every check (as if the node rebooted; starting a server costs seconds);
    ``linux://``: a new netns lab per check, the previous one closed first (checks run
    one after another). A context manager; ``close`` ends them."""

    def __init__(self, target: WireTarget) -> None:
        self.target = target
        self.server: FakeServerLab | None = None
        self.netns: NetnsLab | None = None

    def fresh(self) -> Lab:
        if self.target.kernel_url == "linux://":
            if self.netns is not None:
                self.netns.close()
                self.netns = None
            self.netns = NetnsLab(randomize=True)
            return self.netns
        lab = self.target.lab or DEFAULT_LAB
        if self.server is None:
            self.server = FakeServerLab(lab)
        else:
            self.server.client.load_lab(path=lab)
            randomize_start_state(self.server.client, self.server.start_seed)
        return self.server

    def __enter__(self) -> WireLabs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.netns is not None:
            self.netns.close()
            self.netns = None
        if self.server is not None:
            self.server.close()
            self.server = None


def _dies_with_us(argv: list[str]) -> list[str]:
    """``argv`` under ``setpriv --pdeathsig KILL`` where util-linux has it: a suite that is
    itself killed (a timeout, a crashed worker) takes the plugin with it instead of
    leaving it serving. The signal follows the thread that started the plugin, which is
    the check's own and outlives it. ``setpriv`` execs, so the pid stays the plugin's."""
    setpriv = shutil.which("setpriv")
    return argv if setpriv is None else [setpriv, "--pdeathsig", "KILL", "--", *argv]


class PluginProcess:
    """The plugin's program: started by the target's command, stopped, killed, restarted."""

    def __init__(self, target: WireTarget, values: dict[str, str], log_path: Path) -> None:
        self.target = target
        self.values = values
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _argv(self, argv: tuple[str, ...], pid: int | None = None) -> list[str]:
        values = dict(self.values) | ({"pid": str(pid)} if pid is not None else {})
        return [self.target.expand(arg, values) for arg in argv]

    def start(self) -> None:
        with self.log_path.open("ab") as out:
            out.write(f"--- start {self.starts + 1}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                _dies_with_us(self._argv(self.target.commands.start)),
                cwd=self.target.directory,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a kill of the plugin is never a kill of the suite
            )
        self.starts += 1

    def tail(self) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-LOG_TAIL_BYTES:].decode(errors="replace")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _end(self, command: tuple[str, ...] | None, sig: signal.Signals, what: str) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            self.process = None
            return
        if command is None:
            process.send_signal(sig)
        else:
            done = subprocess.run(
                self._argv(command, process.pid),
                cwd=self.target.directory,
                capture_output=True,
                text=True,
                timeout=STOP_DEADLINE_S,
                check=False,
            )
            if done.returncode != 0:
                process.kill()
                process.wait(STOP_DEADLINE_S)
                self.process = None
                raise WireDriverError(
                    f"{self.target.name}'s {what} command exited {done.returncode}: "
                    f"{done.stderr.strip()[-LOG_TAIL_BYTES:]}"
                )
        try:
            process.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_DEADLINE_S)
            raise WireDriverError(
                f"{self.target.name} did not end within {STOP_DEADLINE_S}s of its {what}"
            ) from None
        finally:
            self.process = None

    def stop(self) -> None:
        """A clean shutdown: the stop command, or SIGTERM."""
        self._end(self.target.commands.stop, signal.SIGTERM, "stop")

    def kill(self) -> None:
        """A crash: the kill command, or SIGKILL. Nothing of the plugin's memory survives."""
        self._end(self.target.commands.kill, signal.SIGKILL, "kill")


class WireSession:
    """One check's host (a fresh lab of ``labs``) and plugin (a context manager; ``close``
    kills the plugin; the lab is the run's to close)."""

    def __init__(self, target: WireTarget, labs: WireLabs) -> None:
        self.target = target
        self.run = Path(tempfile.mkdtemp(prefix="wire-", dir="/tmp"))
        self.lab: Lab | None = None
        self.process: PluginProcess | None = None
        self._clients: list[PluginClient] = []
        try:
            self.lab = labs.fresh()
            self.sandbox: SandboxHandle = self.lab.sandbox(target.sandbox)
            kernel_url = self.lab.kernel_url
            assert kernel_url is not None, "a wire lab is reached by URL"
            self.values = placeholder_values(target, self.run, kernel_url)
            self.socket = Path(self.values["socket"])
            self.token = self._mint_token(Path(self.values["tokenFile"]))
            self.process = PluginProcess(target, self.values, self.run / "plugin.log")
            self.start()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _mint_token(path: Path) -> str:
        """A fresh token, as a coordinator mints one at registration; never over a file
        that is already there (it may be a real registration's)."""
        token = secrets.token_urlsafe(24)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise WireDriverError(
                f"token file {path} exists; the suite writes a fresh one per check and "
                "overwrites none (put it under {run})"
            ) from None
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token

    def __enter__(self) -> WireSession:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the plugin's process --------------------------------------------------------------

    def start(self, *, ready: bool = True) -> None:
        """Start the plugin and wait, with a deadline, until GetInfo says it is ready
        (``ready=False``: until it answers GetInfo at all, e.g. over a damaged journal)."""
        assert self.process is not None
        self.process.start()
        deadline = time.monotonic() + self.target.start_timeout_s
        with PluginClient(self.socket, self.token) as client:
            while True:
                if not self.process.running():
                    raise WireDriverError(
                        f"{self.target.name} exited while starting:\n{self.process.tail()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WireDriverError(
                        f"{self.target.name} not ready within {self.target.start_timeout_s}s:\n"
                        f"{self.process.tail()}"
                    )
                try:
                    if ready:
                        client.wait_ready(min(1.0, remaining))
                    else:
                        client.wait_answering(min(1.0, remaining))
                    return
                except PluginCallError as exc:
                    if exc.code != "DEADLINE_EXCEEDED":
                        raise WireDriverError(
                            f"{self.target.name} answered GetInfo with {exc}"
                        ) from exc

    def stop(self) -> None:
        assert self.process is not None
        self.process.stop()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()

    def restart_after_kill(self) -> None:
        """SIGKILL (or the kill command), then start again: recovery is the plugin's."""
        self.kill()
        self.start()

    # -- the wire --------------------------------------------------------------------------

    def client(self, token: str | None = None) -> PluginClient:
        """A client of the plugin's socket (closed with the session)."""
        client = PluginClient(self.socket, self.token if token is None else token)
        self._clients.append(client)
        return client

    # -- the kernel ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        assert self.lab is not None
        return self.lab.kernel.snapshot()

    def changes_since(self, baseline: dict[str, Any]) -> list[Any]:
        return list(diff(baseline, self.snapshot()))

    def plant_foreign(self, name: str) -> None:
        """An administrator's link with exactly the name the plugin is about to use."""
        assert self.lab is not None
        kernel = self.lab.kernel
        foreign_link(kernel, kernel.open_namespace(self.sandbox.namespace), name)

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        try:
            if self.process is not None:
                self.process.kill()
        finally:
            shutil.rmtree(self.run, ignore_errors=True)
