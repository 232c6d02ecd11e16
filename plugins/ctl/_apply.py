"""``reconcile --apply``: each leak's operation undone as an explicit, journaled cleanup.

A leak is undone the way the coordinator would undo it: a ``RemoveNetwork`` (or
``NodeUnprepare``) of the leaked operation's unit, targeting that operation, under an
operation id of its own (``reconcile-<digest>-<target>``), at the unit's accepted
generation and epoch. The runner fences the unit, undoes the recorded plan in reverse
and journals every step; nothing here touches the kernel or the journal itself.

* **The service is running** (it holds its journal's lock): the cleanup goes over its
  socket with its token, exactly as the coordinator's would.
* **The service is down**: the CLI opens the journal as its one writer through the
  SDK's ``Runner`` (the lock keeps the service from starting meanwhile), runs the
  recovery the service would run at start, then the cleanup, and releases the lock.

Either way the journal records the cleanup like any other; ``ops`` and ``show`` show it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from plugins.effects.linux import linux_effects
from plugins.kernel import Kernel
from plugins.sdk import (
    CleanupRequest,
    CleanupResponse,
    Hook,
    NetworkPluginError,
    OperationEnvelope,
    Registration,
)
from plugins.sdk.host import PluginCallError, PluginClient, read_token
from plugins.sdk.runner import Runner
from plugins.sdk.service import artifact_digest
from plugins.sdk.store import StoreLocked

from ._contents import Contents
from ._errors import CtlError, Exit
from ._journal import service_holds_lock
from ._node import Service
from ._reconcile import LEAK, Finding, with_kernel

_CLEANUP_OF = {
    Hook.CONNECT_NETWORK.value: Hook.REMOVE_NETWORK,
    Hook.NODE_PREPARE.value: Hook.NODE_UNPREPARE,
}


@dataclass(frozen=True)
class Cleanup:
    """One cleanup ``--apply`` asks for, and what the runner answered."""

    service: str
    plugin: str
    scope: str
    step: str
    operation: str
    target: str
    hook: str
    via: str  # "socket" or "runner"
    status: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class _Target:
    service: Service
    registration: Registration
    request: CleanupRequest


def _targets(found: Sequence[Finding], contents: Sequence[Contents], receipt: str) -> list[_Target]:
    """One cleanup per leaked operation: removals before the preparations they depend on."""
    by_service = {c.service.name: c for c in contents}
    wanted: dict[tuple[str, str, str], Finding] = {}
    for f in found:
        if f.category == LEAK and f.hook in _CLEANUP_OF:
            wanted.setdefault((f.service, f.partition, f.operation), f)
    targets = []
    for (service_name, partition, operation), f in wanted.items():
        c = by_service[service_name]
        reg = c.service.registration(partition)
        if reg is None:
            continue  # no registration can clean it (the service does not serve it either)
        unit = [
            op
            for op in c.operations
            if (op.partition, op.scope, op.step) == (partition, f.scope, f.step)
        ]
        tag = hashlib.sha256(f"{partition}\0{operation}".encode()).hexdigest()[:8]
        envelope = OperationEnvelope(
            operation_id=f"reconcile-{receipt.removeprefix('sha256:')[:12]}-{tag}",
            hook=_CLEANUP_OF[f.hook],
            scope=f.scope,
            step=f.step,
            generation=max(op.generation for op in unit),
            coordinator_epoch=max(op.epoch for op in unit),
        )
        targets.append(_Target(c.service, reg, CleanupRequest(envelope, operation)))
    targets.sort(key=lambda t: t.request.envelope.hook is Hook.NODE_UNPREPARE)
    return targets


def apply(found: Sequence[Finding], contents: Sequence[Contents], receipt: str) -> list[Cleanup]:
    """Run the cleanups; each service's through its socket, or its runner when it is down."""
    results = []
    targets = _targets(found, contents, receipt)
    for service in {t.service.name: t.service for t in targets}.values():
        mine = [t for t in targets if t.service is service]
        if service_holds_lock(service.config.state_dir):
            results += [_over_socket(t) for t in mine]
        else:
            results += _in_process(service, mine)
    return results


def _result(t: _Target, via: str, response: CleanupResponse) -> Cleanup:
    env = t.request.envelope
    return Cleanup(
        service=t.service.name,
        plugin=t.registration.name,
        scope=env.scope,
        step=env.step,
        operation=env.operation_id,
        target=t.request.target_operation_id,
        hook=env.hook.value,
        via=via,
        status=response.status.value,
        detail=response.detail,
    )


def _over_socket(t: _Target) -> Cleanup:
    socket = t.service.socket(t.registration)
    try:
        token = read_token(t.service.config.token_file)
    except NetworkPluginError as exc:
        raise CtlError(Exit.USAGE, f"{t.service.name}: {exc.message}") from None
    with PluginClient(socket, token, timeout=120) as client:
        call = client.remove_network
        if t.request.envelope.hook is Hook.NODE_UNPREPARE:
            call = client.node_unprepare
        try:
            return _result(t, "socket", call(t.request))
        except PluginCallError as exc:
            if exc.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                raise CtlError(
                    Exit.UNREACHABLE,
                    f"{t.service.name} holds its journal but {socket} does not answer "
                    f"({exc.code}); nothing was cleaned",
                ) from None
            raise CtlError(
                Exit.FINDINGS, f"{t.service.name}: {t.request.envelope.hook.value} refused: {exc}"
            ) from None


def _in_process(service: Service, targets: Sequence[_Target]) -> list[Cleanup]:
    """The service's own runner over its journal and the approved executors (it is down)."""
    config = service.config

    def clean(kernel: Kernel) -> list[Cleanup]:
        try:
            runner = Runner.open(
                config.state_dir,
                service.registrations,
                linux_effects(kernel),
                artifact_digest=artifact_digest(),
                boot_id=config.boot_id or kernel.boot_id(),
                runtime_dir=config.runtime_dir,
            )
        except StoreLocked as exc:
            holder = f"pid {exc.holder_pid}" if exc.holder_pid else "another process"
            raise CtlError(
                Exit.REFUSED,
                f"{service.name}'s journal was taken by {holder} (the service starting, or "
                "another reconcile) while reconcile was about to clean for it; nothing was "
                "cleaned: run reconcile --dry-run again",
            ) from None
        try:
            if runner.store is None:
                raise CtlError(Exit.JOURNAL, f"{service.name}: {runner.unavailable_reason}")
            runner.recover()  # what the service runs before it serves: read-only probes
            return [_in_runner(runner, t) for t in targets]
        finally:
            runner.close()

    return with_kernel(config.kernel, clean)


def _in_runner(runner: Runner, t: _Target) -> Cleanup:
    endpoint = runner.endpoint(t.registration.endpoint.socket_name)
    call = endpoint.remove_network
    if t.request.envelope.hook is Hook.NODE_UNPREPARE:
        call = endpoint.node_unprepare
    try:
        return _result(t, "runner", call(t.request))
    except NetworkPluginError as exc:
        raise CtlError(
            Exit.FINDINGS,
            f"{t.service.name}: {t.request.envelope.hook.value} refused: {exc.message}",
        ) from None
