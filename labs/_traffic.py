"""Traffic on a NIC lab's machine: addresses and ping, run by the kernel agent there.

The netlink state a plugin leaves (a bond of two VFs, its active slave, a VLAN on it)
says what the kernel was asked; only packets show that the data path works. The
agent on the machine (``labs.kernel_agent``: the VM lab's guest, an SR-IOV host over
SSH) answers these beside the ``Kernel`` protocol, so a test adds an address inside a
pod's namespace and pings a peer port from there without one SSH exec per command
(about a second each under TCG).

A ping runs in the background (``ping -O`` in the namespace, through ``nsenter``) while
the test changes the machine, e.g. takes the bond's active member down; the agent
reads its output as it comes, so ``await_replies`` returns as soon as the count is
reached (or at its deadline, with what there is): a condition, not a sleep.
"""

from __future__ import annotations

import errno
import os
import re
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from plugins.kernel import NsRef, kernel_error

__all__ = [
    "TRAFFIC_METHODS",
    "TRAFFIC_PARAMS",
    "PingStatus",
    "TrafficCalls",
    "TrafficSide",
    "traffic_missing",
]

TRAFFIC_PARAMS: dict[str, dict[str, type]] = {
    "add_address": {"ns": str, "name": str, "address": str},
    "start_ping": {"ns": str, "address": str, "interval_s": float},
    "await_replies": {"ping": str, "count": int, "timeout_s": float},
    "stop_ping": {"ping": str},
    "describe": {"ns": str},
}
TRAFFIC_METHODS = tuple(TRAFFIC_PARAMS)
STOP_DEADLINE_S = 10.0
_REPLY = re.compile(rb"bytes from .*icmp_seq=(\d+)")
_NO_ANSWER = re.compile(rb"no answer yet for icmp_seq=(\d+)")


@dataclass
class PingStatus:
    """What one ping has seen so far: the sequence numbers answered and those that went
    unanswered (``ping -O`` says so when the next request leaves)."""

    replied: list[int] = field(default_factory=list)
    missed: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"replied": self.replied, "missed": self.missed}


@dataclass
class _Ping:
    process: subprocess.Popen[bytes]
    status: PingStatus = field(default_factory=PingStatus)
    pending: bytes = b""

    def read(self, timeout: float) -> bool:
        """Take in what ping printed, waiting up to ``timeout`` for it; False at EOF."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
        if not ready:
            return True
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            if found := _REPLY.search(line):
                self.status.replied.append(int(found.group(1)))
            elif found := _NO_ANSWER.search(line):
                self.status.missed.append(int(found.group(1)))
        return True


TOOLS = ("nsenter", "ping")


def traffic_missing() -> str | None:
    """Why this machine cannot run pings in a namespace, in one line (None: it can)."""
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not absent:
        return None
    return (
        f"the traffic checks need {' and '.join(absent)} (util-linux, iputils-ping) on the "
        "machine; scripts/install-vm-lab installs them here, a lab host needs them installed"
    )


class TrafficSide:
    """The agent's side: addresses and background pings in the machine's namespaces
    (each named by the path that pins it, as the agent's ``NsRef``\\ s are)."""

    def __init__(self) -> None:
        self.pings: dict[str, _Ping] = {}
        self._started = 0

    def add_address(self, ns: str, name: str, address: str) -> None:
        """Add ``address`` (``192.0.2.1/24``) to the link ``name`` in the namespace ``ns``."""
        import ipaddress

        from pyroute2 import IPRoute
        from pyroute2.netlink.exceptions import NetlinkError

        from ._guest import _route_in

        try:
            interface = ipaddress.ip_interface(address)
        except ValueError:
            raise kernel_error(errno.EINVAL, f"not an address/prefix: {address!r}") from None
        with _route_in(ns, IPRoute) as route:
            found = route.link_lookup(ifname=name)
            if not found:
                raise kernel_error(errno.ENODEV, f"no link {name!r} to address")
            try:
                route.addr(
                    "add",
                    index=found[0],
                    address=str(interface.ip),
                    prefixlen=interface.network.prefixlen,
                )
            except NetlinkError as exc:
                raise kernel_error(exc.code, f"{name}: address {address}") from None

    def start_ping(self, ns: str, address: str, interval_s: float) -> str:
        """Ping ``address`` from the namespace ``ns`` every ``interval_s`` until stopped;
        answers the ping's id."""
        if (absent := traffic_missing()) is not None:
            raise kernel_error(errno.ENOENT, absent)
        if not os.path.exists(ns):
            raise kernel_error(errno.ENOENT, f"no namespace pinned at {ns}")
        argv = ["nsenter", f"--net={ns}", "ping", "-n", "-O", "-i", f"{interval_s:g}", address]
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self._started += 1
        name = f"ping{self._started}"
        self.pings[name] = _Ping(process)
        return name

    def await_replies(self, ping: str, count: int, timeout_s: float) -> dict[str, Any]:
        """The ping's status once ``count`` replies in all have come, or at the deadline."""
        running = self._ping(ping)
        deadline = time.monotonic() + timeout_s
        while len(running.status.replied) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not running.read(remaining):
                break
        return running.status.as_dict()

    def stop_ping(self, ping: str) -> dict[str, Any]:
        """Stop the ping (SIGINT, as a person would) and answer what it saw."""
        running = self.pings.pop(ping, None)
        if running is None:
            raise kernel_error(errno.ENOENT, f"no ping {ping!r} running")
        _stop(running.process)
        deadline = time.monotonic() + STOP_DEADLINE_S
        try:
            # To its end of output (it has exited); a pipe some other process still
            # holds open ends at the deadline.
            while (left := deadline - time.monotonic()) > 0 and running.read(left):
                pass
        finally:
            _close(running.process)
        return running.status.as_dict()

    def describe(self, ns: str) -> str:
        """What a person debugging the data path looks at first, in the namespace ``ns``:
        links with their operational state, addresses, neighbours."""
        lines = []
        for argv in (["ip", "-br", "link"], ["ip", "-br", "addr"], ["ip", "neigh"]):
            done = subprocess.run(
                ["nsenter", f"--net={ns}", *argv],
                capture_output=True,
                text=True,
                check=False,
                timeout=STOP_DEADLINE_S,
            )
            lines += [f"$ {' '.join(argv)}", (done.stdout + done.stderr).rstrip()]
        return "\n".join(lines)

    def close(self) -> None:
        """Stop every ping still running (the host hung up)."""
        for running in self.pings.values():
            _stop(running.process)
            _close(running.process)
        self.pings.clear()

    def _ping(self, ping: str) -> _Ping:
        running = self.pings.get(ping)
        if running is None:
            raise kernel_error(errno.ENOENT, f"no ping {ping!r} running")
        return running


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _close(process: subprocess.Popen[bytes]) -> None:
    if process.stdout is not None:
        process.stdout.close()


class TrafficCalls:
    """The host's side, mixed into the agent's client (``_call`` is its request)."""

    def _call(self, method: str, **params: Any) -> Any:
        raise NotImplementedError

    def add_address(self, ns: NsRef, name: str, address: str) -> None:
        """``ip addr add ADDRESS dev NAME`` in ``ns``, on the machine."""
        self._call("add_address", ns=ns.path, name=name, address=address)

    def start_ping(self, ns: NsRef, address: str, interval_s: float = 0.1) -> str:
        """A background ``ping -O ADDRESS`` from ``ns``; its id."""
        return str(
            self._call("start_ping", ns=ns.path, address=address, interval_s=float(interval_s))
        )

    def await_replies(self, ping: str, count: int, timeout_s: float) -> PingStatus:
        """The ping's replies and misses once ``count`` replies have come (or at the deadline)."""
        answer = self._call(
            "await_replies", ping=ping, count=int(count), timeout_s=float(timeout_s)
        )
        return _status(answer)

    def stop_ping(self, ping: str) -> PingStatus:
        """Stop the ping; what it saw in all."""
        return _status(self._call("stop_ping", ping=ping))

    def describe(self, ns: NsRef) -> str:
        """``ip -br link``, ``ip -br addr`` and ``ip neigh`` in ``ns``, for a failure's message."""
        return str(self._call("describe", ns=ns.path))


def _status(answer: dict[str, Any]) -> PingStatus:
    return PingStatus([int(s) for s in answer["replied"]], [int(s) for s in answer["missed"]])
