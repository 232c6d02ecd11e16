"""One target's runner on a fake host, restartable like its service process."""

from __future__ import annotations

from pathlib import Path

from plugins.kernel import CrashingKernel
from plugins.sdk import ConnectRequest, PreparedState
from plugins.sdk.runner import CrashPoints, EndpointRunner, Runner
from plugins.sdk.store import JournalUnavailable, Store

from .target import Host, Target


class TargetNode:
    def __init__(
        self, target: Target, root: Path, host: Host | None = None, crash: CrashPoints | None = None
    ) -> None:
        self.target = target
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.host = host or Host.create()
        target.setup(self.host)
        self._requests: dict[str, ConnectRequest] = {}
        self.start(crash)

    def start(self, crash: CrashPoints | None = None) -> None:
        self.crash_points = crash or CrashPoints()
        try:
            self.store: Store | None = Store.open(self.root / "state")
            reason = ""
        except JournalUnavailable as exc:
            self.store, reason = None, str(exc)
        self.runner = Runner(
            self.store,
            self.target.registry().seal(),
            self.target.effects(CrashingKernel(self.host.model, self.crash_points)),
            artifact_digest="sha256:conformance",
            boot_id=self.host.model.boot_id(),
            crash=self.crash_points,
            unavailable_reason=reason,
        )
        self.notes = self.runner.recover()
        self.endpoint: EndpointRunner = self.runner.endpoint(self.target.socket)

    def crash(self, crash: CrashPoints | None = None) -> None:
        """Abandon every in-memory object; the kernel (model) keeps what happened."""
        if self.store is not None:
            self.store.abandon()
        self.start(crash)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

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
