"""One target's service on a host: a ``labs.Node`` whose only service is the target,
restartable like its service process, on the host's lab (a new one from ``make_lab``;
default: the fake kernel model)."""

from __future__ import annotations

from pathlib import Path

from labs import Node, ServiceSpec
from plugins.sdk import ConnectRequest, PreparedState
from plugins.sdk.runner import CrashPoints, EndpointRunner, Runner
from plugins.sdk.store import Store

from .target import Host, LabFactory, Target


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

    def connect_request(
        self, prepared: PreparedState | None, op: str = "connect-1"
    ) -> ConnectRequest:
        """Built once per operation id: a retry must send the very same request."""
        if op not in self._requests:
            self._requests[op] = self.target.connect(self.host, prepared, op)
        return self._requests[op]

    def journal_rows(self) -> int:
        if self.store is None:
            return 0
        return len(
            self.store.read(
                lambda r: r.operations(self.endpoint.registration.endpoint.state_namespace)
            )
        )
