"""A machine's real kernel reached by a command that runs the kernel agent on it.

The SR-IOV lab's hosts are machines of their own (a NIC host, or the emulated one, a
QEMU guest with sshd), reached over SSH exactly as a real lab's are. ``HostLab`` runs
``command`` (``ssh ... python -m labs.kernel_agent --stdio``: the agent installed on
the host with the services) with its stdin and stdout on one end of a socket pair, and
serves the other end as every ``AgentLab`` does: the rig's sessions, lent PFs and VFs
and the before/after checks work on a host as they do in the VM lab's guest. The
agent's stderr (its ``READY`` line, its errors) is logged and its tail is in every
error. On ``close()`` the agent sees the end of its stdin, closes its sessions and
removes its namespace pins: the host is left as it was.

``remote`` (a ``labs.RemoteHost``: how to run a command on the host, and its Python)
lets a session's services run on the host itself (``on_host(session)``: their own
``linux://`` kernel code, see ``labs.remote_services``); None: the host runs none for
the rig.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._agent_lab import AgentLab
from ._console import AgentUnavailable, Console, reap
from ._lab import Lab
from ._seed import start_state_seed
from .kernel_agent import READY
from .remote_services import OnHost, RemoteHost

__all__ = ["HostLab"]

READY_DEADLINE_S = 120.0  # an SSH login and the agent's imports on a slow host
EXIT_DEADLINE_S = 60.0


class HostLab(AgentLab):
    """The kernel of the host ``name``, served by the agent ``command`` starts there.

    ``pfs``: the host's SR-IOV PF netdevs and ``lacking`` what they cannot do (each
    capability its inventory does not promise -> why), from its inventory. Raises
    ``AgentUnavailable`` (naming the host, with the agent's stderr tail) when the agent
    is not ready by ``ready_deadline_s``.
    """

    tier = "sriov"

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        pfs: Sequence[str],
        *,
        lacking: Mapping[str, str] | None = None,
        start_seed: int | None = None,
        ready_deadline_s: float = READY_DEADLINE_S,
        remote: RemoteHost | None = None,
    ) -> None:
        self.name = name
        self.remote = remote
        self.pfs = tuple(pfs)
        self.lacking = dict(lacking or {})
        self.start_seed = start_state_seed() if start_seed is None else start_seed
        # Unix socket paths are short (107 bytes): the lab's files live in a short /tmp dir.
        self.directory = Path(tempfile.mkdtemp(prefix="hostlab-", dir="/tmp"))
        self.agent_log = self.directory / "agent.log"
        self._console = Console(self.agent_log, READY, f"the agent on {name}")
        ours, theirs = socket.socketpair()
        started = time.monotonic()
        try:
            self.process = subprocess.Popen(
                list(command),
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                stderr=subprocess.PIPE,
                start_new_session=True,  # ssh and what it starts: one group, killed together
            )
        except OSError as exc:
            ours.close()
            raise AgentUnavailable(f"{name}: cannot run {command[0]}: {exc}") from exc
        finally:
            theirs.close()
        try:
            assert self.process.stderr is not None
            self._console.follow(self.process.stderr)
            self._console.wait_marked(self.process, started + ready_deadline_s)
            self._serve(ours)
            self.ready_seconds = time.monotonic() - started
        except BaseException as exc:
            ours.close()
            self.close()
            if isinstance(exc, AgentUnavailable | TimeoutError | OSError):
                raise AgentUnavailable(
                    f"{name}: the kernel agent did not start: {exc}\n"
                    f"its stderr ({self.agent_log}), last lines:\n{self._console.tail()}"
                ) from exc
            raise

    def on_host(self, session: Lab) -> OnHost:
        """``session`` (of this lab) with its services run on the host, ``linux://`` on
        its node namespace, instead of on this machine through the relay."""
        if self.remote is None:
            raise ValueError(f"{self.name}: this lab was given no way to run services there")
        return OnHost(session, self.remote)

    def close(self) -> None:
        """Close the sessions and hang up; the agent exits and the command with it
        (killed at a deadline). Idempotent."""
        served = True  # if closing raises, the relay is closed all the same: wait for it
        try:
            served = self._close_agent()
        finally:
            reap(getattr(self, "process", None), self._console, EXIT_DEADLINE_S if served else 0)
            shutil.rmtree(self.directory, ignore_errors=True)
