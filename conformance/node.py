"""One target's service on a host: a ``labs.Node`` whose only service is the target,
restartable like its service process, on the host's lab (a new one from ``make_lab``;
default: the fake kernel model)."""

from __future__ import annotations

from pathlib import Path

from labs import Node, ServiceSpec
from plugins.sdk import CleanupRequest, ConnectRequest, Hook, PreparedState, PrepareRequest
from plugins.sdk.runner import CrashPoints, EndpointRunner, Runner
from plugins.sdk.store import Store

from .target import Host, LabFactory, Target, envelope


class TargetNode(Node):
    def __init__(
        self,
        target: Target,
        root: Path,
        host: Host | None = None,
        crash: CrashPoints | None = None,
        make_lab: LabFactory | None = None,
    ) -> None:
        self.target = target
        self.host = host or Host.create(make_lab)
        try:
            target.setup(self.host)
        except BaseException:
            self.host.lab.close()
            raise
        self.spec = ServiceSpec(
            target.name, target.registry, target.effects, sockets=(target.socket,)
        )
        self._requests: dict[str, ConnectRequest] = {}
        self._prepares: dict[str, PrepareRequest] = {}
        self.prepared: PreparedState | None = None
        """What the last ``prepare()`` answered (None: none yet, or an Operation-only target)."""
        super().__init__(
            self.host.lab,
            root,
            services=(self.spec,),
            crash=crash,
            coordinator=False,
            pod=None,  # the host made the pod
        )

    @property
    def state_dir(self) -> Path:
        return self.services.state_dir(self.spec.name)

    @property
    def runner(self) -> Runner:
        return self.services.runners[self.spec.name]

    @property
    def store(self) -> Store | None:
        return self.runner.store

    @property
    def endpoint(self) -> EndpointRunner:
        return self.endpoints[self.target.socket.removesuffix(".sock")]

    @property
    def notes(self) -> list[str]:
        return self.services.recovery_notes

    def start(self, crash: CrashPoints | None = None) -> None:
        """Start the service again after ``stop()`` (recovery runs first)."""
        self.services.start(crash)

    def stop(self) -> None:
        """A clean shutdown of the service (the kernel keeps its state)."""
        self.services.close()

    def crash(self, crash: CrashPoints | None = None) -> None:
        """Abandon every in-memory object; the kernel (model) keeps what happened."""
        self.crash_services(crash)

    def prepare_request(self, op: str = "prepare-1") -> PrepareRequest:
        """Built once per operation id, like ``connect_request``."""
        if self.target.prepare is None:
            raise TypeError(f"{self.target.name} is Operation-only: it has no NodePrepare")
        if op not in self._prepares:
            self._prepares[op] = self.target.prepare(self.host, op)
        return self._prepares[op]

    def prepare(self, op: str = "prepare-1") -> PreparedState | None:
        """NodePrepare of the target's claim; None (and no call) for an Operation-only one."""
        if self.target.prepare is None:
            return None
        self.prepared = self.endpoint.node_prepare(self.prepare_request(op)).prepared_state
        return self.prepared

    def connect_request(
        self, prepared: PreparedState | None, op: str = "connect-1"
    ) -> ConnectRequest:
        """Built once per operation id: a retry must send the very same request."""
        if op not in self._requests:
            self._requests[op] = self.target.connect(self.host, prepared, op)
        return self._requests[op]

    # The cleanups name the scope and step the target's own requests named (``connect-1``
    # for the attachment, ``prepare-1`` for the claim): a target chooses its ids, as a
    # coordinator does, and a removal under ids of the suite's own would clean nothing.

    def remove(self, op: str = "remove-1") -> CleanupRequest:
        """RemoveNetwork of the attachment of ``connect-1`` (its request is built, with
        the node's ``prepared``, if no call sent it yet)."""
        connected = self.connect_request(self.prepared, "connect-1").envelope
        return CleanupRequest(envelope(Hook.REMOVE_NETWORK, op, connected.scope, connected.step))

    def unprepare(self, op: str = "unprepare-1") -> CleanupRequest:
        """NodeUnprepare of the claim of ``prepare-1``."""
        prepared = self.prepare_request("prepare-1").envelope
        return CleanupRequest(envelope(Hook.NODE_UNPREPARE, op, prepared.scope, prepared.step))

    def journal_rows(self) -> int:
        if self.store is None:
            return 0
        return len(
            self.store.read(
                lambda r: r.operations(self.endpoint.registration.endpoint.state_namespace)
            )
        )
