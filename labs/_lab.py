"""A lab: where a node's kernel is, and what it looked like before anything of ours ran.

Every tier implements ``Lab`` (the fake model in this process, the fake kernel server,
the netns, vm and sriov labs): the rest of the kit (``Node``) and every suite built on
it (the rig, the conformance suite, the end-to-end tests, the benchmarks) see only this.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fakekernel import LabKernel
from plugins.coordinator import Inventory
from plugins.kernel import NsRef
from plugins.sdk import NamespaceHandle, SandboxHandle

if TYPE_CHECKING:
    from ._services import ProcessServices, ServiceSpec

SANDBOX = "pod-a"


class Lab(ABC):
    """A kernel backend and its starting state.

    ``kernel`` is the lab's own view (for setting scenes and checking invariants);
    services reach the same kernel either through it (in this process) or through
    ``kernel_url`` (service processes; None when the kernel lives only in this process).
    """

    tier: str
    start_seed: int

    @property
    @abstractmethod
    def kernel(self) -> LabKernel: ...

    @property
    def kernel_url(self) -> str | None:
        return None

    def inventory(self) -> Inventory | None:
        """What device discovery would publish on this lab's node (a ``DeviceInventory``),
        or None: the node is the project's example node, ``topologies/inventory.yaml``
        (the fake labs' default host; the netns lab's parents). A lab whose devices have
        names or PCI addresses of their own (a vm session lending the guest's VFs)
        describes them here, and the allocators take it instead of the file."""
        return None

    def boot_id(self) -> str:
        return self.kernel.boot_id()

    def snapshot(self) -> dict[str, Any]:
        return self.kernel.snapshot()

    def sandbox(self, name: str = SANDBOX) -> SandboxHandle:
        """The pod's namespace (created on first use, with an interface of the pod's own)."""
        ns = next((n for n in self.kernel.namespaces() if n.path.endswith(f"/{name}")), None)
        if ns is None:
            ns = self.kernel.add_namespace(name)
            self.furnish_sandbox(ns)
        return SandboxHandle(name, NamespaceHandle(ns.path, ns.device, ns.inode, ns.boot_id))

    def process_services(
        self, root: Path, specs: Sequence[ServiceSpec], socket_dir: Path
    ) -> ProcessServices:
        """A node's services as real programs (``Node(processes=True)``): by default on
        this machine, on ``kernel_url``. A lab whose services run on the machine holding
        the kernel runs them there (``labs.remote_services.OnHost``)."""
        from ._services import ProcessServices

        return ProcessServices(self, root, specs, socket_dir)

    def furnish_sandbox(self, ns: NsRef) -> None:  # noqa: B027 - a hook; most labs add nothing
        """What a new pod namespace holds before anything of ours runs (default: nothing)."""

    def close(self) -> None:  # noqa: B027 - a hook; a lab in memory has nothing to release
        """Release what the lab started (processes, namespaces); idempotent."""
