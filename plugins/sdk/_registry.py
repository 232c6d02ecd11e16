"""Registration of logical plugins: one endpoint (socket) per logical identity.

A ``Registry`` collects endpoints and validates them as a set in ``seal()``:
one invalid registration fails all of them, so a host never serves a partially
configured set as if it were complete.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ._config import ConfigValidator
from ._contracts import Bundle, BundleStore, pinned_bundles
from ._descriptor import Descriptor, DescriptorRef
from ._errors import RegistrationError
from ._handler import Handler

_SOCKET = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\.sock$")
_STATE_NAMESPACE = re.compile(r"^[a-z0-9-]+/v[0-9]+(alpha[0-9]+|beta[0-9]+)?$")
_HOOKS = ("describe", "node_prepare", "connect_network", "remove_network", "node_unprepare")


@dataclass(frozen=True)
class Endpoint:
    socket_name: str
    state_namespace: str
    handler: Handler


@dataclass(frozen=True)
class Registration:
    """A validated endpoint with its complete, pinned descriptor."""

    endpoint: Endpoint
    descriptor: Descriptor
    validator: ConfigValidator
    bundle: Bundle | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.descriptor.name

    @property
    def contract_digest(self) -> str:
        return self.descriptor.contract_digest


class Registry:
    def __init__(self, bundles: BundleStore | None = None) -> None:
        self._bundles = bundles
        self._endpoints: list[Endpoint] = []
        self._sealed: tuple[Registration, ...] | None = None

    @classmethod
    def of(cls, *registers: Callable[[Registry], None]) -> Registry:
        """A registry filled by each plugin package's ``register`` function, in order."""
        registry = cls()
        for register in registers:
            register(registry)
        return registry

    def register(self, endpoint: Endpoint) -> None:
        if self._sealed is not None:
            raise RegistrationError("registry is sealed; register every endpoint before serving")
        self._endpoints.append(endpoint)

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(self._endpoints)

    def seal(self) -> tuple[Registration, ...]:
        """Validate every registration and the set as a whole; raise listing all problems."""
        if self._sealed is not None:
            return self._sealed
        problems: list[str] = []
        registrations: list[Registration] = []
        if not self._endpoints:
            problems.append("no endpoints registered")
        bundles = self._bundles
        if bundles is None:
            try:
                bundles = pinned_bundles()
            except RegistrationError as exc:
                raise RegistrationError(str(exc)) from exc
        for ep in self._endpoints:
            reg = _validate_endpoint(ep, bundles, problems)
            if reg is not None:
                registrations.append(reg)
        _check_unique(problems, "socket name", (r.endpoint.socket_name for r in registrations))
        _check_unique(
            problems, "state namespace", (r.endpoint.state_namespace for r in registrations)
        )
        _check_unique(problems, "plugin name", (r.name for r in registrations))
        if problems:
            raise RegistrationError("invalid registrations: " + "; ".join(problems))
        self._sealed = tuple(registrations)
        return self._sealed


def _validate_endpoint(
    ep: Endpoint, bundles: BundleStore, problems: list[str]
) -> Registration | None:
    who = f"endpoint {ep.socket_name!r}"
    missing = [h for h in _HOOKS if not callable(getattr(ep.handler, h, None))]
    if missing:
        problems.append(f"{who}: handler {type(ep.handler).__name__} lacks {', '.join(missing)}")
        return None
    if not _SOCKET.match(ep.socket_name):
        problems.append(f"{who}: socket name must look like 'name.sock'")
    try:
        ref = ep.handler.describe()
    except Exception as exc:  # a broken describe() is a registration error, whatever it raised
        problems.append(f"{who}: describe() failed: {exc!r}")
        return None
    if not isinstance(ref, DescriptorRef):
        problems.append(f"{who}: describe() returned {type(ref).__name__}, not a DescriptorRef")
        return None
    who = f"plugin {ref.name!r} ({ep.socket_name})"
    if not _STATE_NAMESPACE.match(ep.state_namespace) or not ep.state_namespace.startswith(
        ref.name + "/"
    ):
        problems.append(
            f"{who}: state namespace {ep.state_namespace!r} must be '{ref.name}/<version>'"
        )
    try:
        bundle = bundles.load(ref.config_schema_id)
    except RegistrationError as exc:
        problems.append(f"{who}: {exc}")
        return None
    mismatch = _mismatch(ref, bundle)
    if mismatch:
        problems.append(
            f"{who}: descriptor does not match bundle {ref.config_schema_id}: {mismatch}"
        )
        return None
    return Registration(ep, bundle.descriptor, bundle.validator, bundle)


def _mismatch(ref: DescriptorRef, bundle: Bundle) -> str:
    full = bundle.descriptor
    diffs = [
        f"{field} {mine!r} != {pinned!r}"
        for field, mine, pinned in (
            ("name", ref.name, full.name),
            ("contractVersion", ref.contract_version, full.contract_version),
            ("stepKinds", tuple(ref.step_kinds), full.step_kinds),
        )
        if mine != pinned
    ]
    return ", ".join(diffs)


def _check_unique(problems: list[str], what: str, values: Iterable[str]) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            problems.append(f"duplicate {what} {v!r}")
        seen.add(v)


RegisterFunc = Callable[[Registry], None]
