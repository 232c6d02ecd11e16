"""The fake lab: the fake kernel server and the three real services on it.

Everything runs as separate processes talking over Unix sockets: the kernel model
outlives any service crash, like a real kernel does, and the services are exactly
the ones a node would run (``python -m plugins.services NAME``).

The node starts from a random state, the same for the same seed (``RIG_SEED``, see
``harness.scenarios``), and every pod namespace gets an interface of its own, so a
restore bug cannot hide behind the kernel's defaults.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from fakekernel.client import FakeKernelClient, FakeKernelProcess
from fakekernel.lab import plant_pod_interface, randomize_start_state
from harness.scenarios import start_state_seed
from harness.services import REPO, ServiceProcess
from plugins.sdk import NamespaceHandle, SandboxHandle
from plugins.sdk.host import PluginClient

DEFAULT_LAB = REPO / "fakekernel" / "labs" / "default.yaml"
SERVICES = {
    "networkplugin-vf": ("sriov.sock",),
    "networkplugin-bond": ("bond.sock",),
    "networkplugin-links": ("vlan.sock", "ipvlan.sock", "macvlan.sock"),
}
log = logging.getLogger(__name__)


class FakeLab:
    def __init__(
        self, root: Path | None = None, lab: Path = DEFAULT_LAB, *, start_seed: int | None = None
    ) -> None:
        """``start_seed``: the seed of the starting state (None: the rig's, RIG_SEED)."""
        self.start_seed = start_state_seed() if start_seed is None else start_seed
        # Unix socket paths are short (107 bytes): sockets live in a short /tmp dir.
        self._short = Path(tempfile.mkdtemp(prefix="lab-", dir="/tmp"))
        self.root = root or self._short
        self.kernel_socket = self._short / "kernel.sock"
        self.kernel_process = FakeKernelProcess(self.kernel_socket, lab)
        self.kernel: FakeKernelClient | None = None
        self.services: dict[str, ServiceProcess] = {}
        for name, sockets in SERVICES.items():
            self.services[name] = ServiceProcess(
                name,
                ["plugins.services", name],
                self.root / name,
                self._short / f"{name}.sock.d",
                f"fake://{self.kernel_socket}",
                sockets,
            )

    def __enter__(self) -> FakeLab:
        self.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        self.kernel_process.start()
        self.kernel = FakeKernelClient(self.kernel_socket)
        randomize_start_state(self.kernel, self.start_seed)
        log.info("fake lab starts from random state seed %d", self.start_seed)
        for service in self.services.values():
            service.start()

    def close(self) -> None:
        for service in self.services.values():
            service.kill()
        if self.kernel is not None:
            self.kernel.close()
        self.kernel_process.stop()
        shutil.rmtree(self._short, ignore_errors=True)

    def service_of(self, plugin: str) -> ServiceProcess:
        return next(s for s in self.services.values() if f"{plugin}.sock" in s.sockets)

    def clients(self) -> dict[str, PluginClient]:
        """One authenticated client per logical plugin, by plugin name."""
        return {
            sock.removesuffix(".sock"): service.client(sock)
            for service in self.services.values()
            for sock in service.sockets
        }

    def sandbox(self, name: str) -> SandboxHandle:
        assert self.kernel is not None
        ns = self.kernel.add_namespace(name)
        plant_pod_interface(self.kernel, ns, self.start_seed)
        return SandboxHandle(name, NamespaceHandle(ns.path, ns.device, ns.inode, ns.boot_id))
