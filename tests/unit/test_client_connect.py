"""PluginClient waits for a server that is slow to finish the HTTP/2 handshake.

A loaded machine's server can take longer than 100 ms between accepting a connection
and sending its SETTINGS frame; the client's connect attempt must outlast that (seen:
``connection attempt timed out before receiving SETTINGS frame`` in
``test_conformance[vlan-getinfo-identity]`` on a busy 2-core machine, while the
client's connect timeout was 100 ms). A proxy in front of a real host holds each new
connection for a while before relaying it, standing in for that server.
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from conformance import project_targets
from conformance.node import TargetNode
from plugins.sdk.host import Host, PluginClient

TOKEN = "slow-handshake-token"
# Ten times the connect timeout the client had; far below the one it has now (20 s).
HANDSHAKE_DELAY_S = 1.0


class SlowProxy:
    """Accepts on ``path``; relays each connection to ``upstream`` ``delay`` s later."""

    def __init__(self, path: Path, upstream: Path, delay: float) -> None:
        self.upstream = upstream
        self.delay = delay
        self.closing = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        self.threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                client, _ = self.listener.accept()
                self._spawn(self._relay, client)

    def _relay(self, client: socket.socket) -> None:
        # The slow server: nothing, SETTINGS included, reaches the client for a while.
        if self.closing.wait(self.delay):
            client.close()
            return
        with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.connect(str(self.upstream))
            upward = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            upward.start()
            self._pump(server, client)
            upward.join()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.closing.set()
        with contextlib.suppress(OSError):  # wakes the accept (close alone does not)
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for thread in self.threads:
            thread.join()


@contextlib.contextmanager
def slow_host(delay: float) -> Iterator[Path]:
    """A real host serving the vlan plugin, reached through a proxy ``delay`` s slow."""
    target = next(t for t in project_targets() if t.name == "vlan")
    with tempfile.TemporaryDirectory(prefix="np-", dir="/tmp") as short:  # sun_path is short
        root = Path(short)
        node = TargetNode(target, root / "node")
        host = Host(root / "sock", TOKEN)
        try:
            host.start(node.runner.endpoints())
            proxy = SlowProxy(root / "slow.sock", host.socket_paths[target.socket], delay)
            try:
                yield root / "slow.sock"
            finally:
                proxy.close()
        finally:
            host.stop(5)
            node.close()


def test_a_call_waits_for_a_handshake_that_takes_a_second() -> None:
    with slow_host(HANDSHAKE_DELAY_S) as path, PluginClient(path, TOKEN) as client:
        # Not wait_for_ready: a connect attempt that gave up would fail this call at once.
        info = client.get_info()
    assert (info.plugin_name, info.ready) == ("vlan", True)
