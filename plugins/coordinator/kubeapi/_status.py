"""Claim status write-back (KEP-4817): what each of our devices became in the pod.

One server-side apply of the ``status`` subresource per report, field manager = the
driver, forced: the ``status.devices`` entries we apply are ours alone (the list is a
map keyed by driver, pool, device and shareID), and an apply that leaves an entry out
removes it, which is how :meth:`ClaimStatusWriter.clear` works: it applies an empty list.

Before writing, the claim is read: a claim replaced under the same name (another uid)
or gone is not ours to write, and a device we report must be one the claim allocated to
us (the API server refuses others). The read also keeps each condition's
``lastTransitionTime`` when its status has not changed, as ``metav1.Condition`` asks.
The apply itself carries the uid, so a claim replaced between the read and the write is
refused by the server rather than written.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from lightkube import Client
from lightkube.models.resource_v1 import ResourceClaimStatus as ClaimStatusModel
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimStatus
from lightkube.types import PatchType

from plugins.coordinator import DeviceNetwork
from plugins.sdk import InvalidArgument

from ._claims import ClaimError
from ._client import ApiRefused, api_call

__all__ = ["CONDITION_NETWORK_READY", "CONDITION_READY", "ClaimStatusWriter", "DeviceStatus"]

CONDITION_READY: Final = "Ready"
CONDITION_NETWORK_READY: Final = "NetworkReady"
# metav1.Condition's reason: CamelCase, what a machine matches on.
_REASON: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_MAX_REASON: Final = 1024
_MAX_MESSAGE: Final = 32768
_MAX_INTERFACE_NAME: Final = 256
_MAX_HARDWARE_ADDRESS: Final = 128


@dataclass(frozen=True)
class DeviceStatus:
    """What one allocated device is now, in the pod."""

    pool: str
    device: str
    share_id: str = ""
    ready: bool = True
    network_ready: bool = True
    reason: str = ""
    """Why a condition is False (CamelCase); the default reasons say the state."""
    message: str = ""
    interface_name: str = ""
    ips: tuple[str, ...] = ()
    """Addresses in CIDR notation (``10.0.0.5/24``), as KEP-4817 asks."""
    hardware_address: str = ""

    @classmethod
    def connected(cls, network: DeviceNetwork) -> DeviceStatus:
        """A device the coordinator connected (``plugins.coordinator.DeviceNetwork``)."""
        return cls(
            network.pool,
            network.device,
            network.share_id,
            interface_name=network.interface_name,
            ips=tuple(network.ips),
            hardware_address=network.hardware_address,
        )

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.pool, self.device, self.share_id)

    def problems(self) -> list[str]:
        found = []
        if self.reason and (len(self.reason) > _MAX_REASON or not _REASON.fullmatch(self.reason)):
            found.append(f"reason {self.reason!r} is not a CamelCase word of at most {_MAX_REASON}")
        if len(self.message) > _MAX_MESSAGE:
            found.append(f"message is {len(self.message)} characters; at most {_MAX_MESSAGE}")
        if len(self.interface_name) > _MAX_INTERFACE_NAME:
            found.append(f"interface name longer than {_MAX_INTERFACE_NAME}")
        if len(self.hardware_address) > _MAX_HARDWARE_ADDRESS:
            found.append(f"hardware address longer than {_MAX_HARDWARE_ADDRESS}")
        for ip in self.ips:
            if "/" not in ip:
                found.append(f"ip {ip!r} is not in CIDR notation (address/prefix)")
                continue
            try:
                ipaddress.ip_interface(ip)
            except ValueError:
                found.append(f"ip {ip!r} is not an address/prefix")
        return found


class ClaimStatusWriter:
    """Reports our devices in a claim's status (RBAC: ``get`` on ``resourceclaims``,
    ``patch`` on ``resourceclaims/status``)."""

    def __init__(
        self, client: Client, driver: str, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self._client = client
        self._driver = driver
        self._clock = clock or (lambda: datetime.now(UTC))

    def report(self, namespace: str, name: str, uid: str, devices: Sequence[DeviceStatus]) -> None:
        """Make our ``status.devices`` entries of the claim exactly ``devices``.

        Bad input (a malformed field, a device twice) is refused naming it, nothing
        written; a claim replaced, gone or not allocating a device is a ``ClaimError``."""
        ref = f"ResourceClaim {namespace}/{name} (uid {uid})"
        _check(ref, devices)
        claim = self._read(ref, namespace, name, uid)
        if claim is None:
            raise ClaimError(f"{ref} no longer exists; its status cannot be written")
        status = claim.status or ClaimStatusModel()
        allocated = {
            (r.pool, r.device, r.shareID or "")
            for r in (
                (status.allocation.devices.results or [])
                if status.allocation and status.allocation.devices
                else []
            )
            if r.driver == self._driver
        }
        missing = [d for d in devices if d.key not in allocated]
        if missing:
            named = ", ".join(_device_ref(d.key) for d in missing)
            raise ClaimError(f"{ref} did not allocate {named} to driver {self._driver!r}")
        previous = _previous_conditions(status, self._driver)
        now = self._clock()
        entries = [self._entry(d, previous.get(d.key, {}), now) for d in devices]
        self._apply(ref, namespace, name, uid, entries)

    def clear(self, namespace: str, name: str, uid: str) -> None:
        """Remove our entries from the claim's status. A claim gone, or replaced by
        another (whose entries are not this claim's), is left alone."""
        ref = f"ResourceClaim {namespace}/{name} (uid {uid})"
        try:
            claim = self._read(ref, namespace, name, uid)
        except ClaimError:
            return  # replaced: the new claim's status is the new claim's business
        if claim is None:
            return
        self._apply(ref, namespace, name, uid, [])

    def _read(self, ref: str, namespace: str, name: str, uid: str) -> ResourceClaim | None:
        try:
            with api_call(f"get {ref}"):
                claim = self._client.get(ResourceClaim, name, namespace=namespace)
        except ApiRefused as e:
            if e.code == 404:
                return None
            raise
        found = claim.metadata.uid if claim.metadata else None
        if found != uid:
            raise ClaimError(f"{ref} was replaced: expected uid {uid}, found {found}")
        return claim

    def _apply(
        self, ref: str, namespace: str, name: str, uid: str, entries: list[dict[str, Any]]
    ) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": {"devices": entries},
        }
        try:
            with api_call(f"apply status of {ref}"):
                self._client.patch(
                    ResourceClaimStatus,
                    name,
                    body,
                    namespace=namespace,
                    patch_type=PatchType.APPLY,
                    field_manager=self._driver,
                    force=True,
                )
        except ApiRefused as e:
            if e.code == 404:
                raise ClaimError(f"{ref} no longer exists; its status cannot be written") from e
            if e.code in (409, 422) and "uid" in e.server_message.lower():
                raise ClaimError(f"{ref} was replaced while its status was written") from e
            raise

    def _entry(
        self, device: DeviceStatus, previous: dict[str, tuple[str, str]], now: datetime
    ) -> dict[str, Any]:
        conditions = [
            _condition(
                CONDITION_READY,
                device.ready,
                device.reason or ("DeviceReady" if device.ready else "DeviceNotReady"),
                device.message,
                previous,
                now,
            ),
            _condition(
                CONDITION_NETWORK_READY,
                device.network_ready,
                device.reason or ("NetworkReady" if device.network_ready else "NetworkNotReady"),
                device.message,
                previous,
                now,
            ),
        ]
        entry: dict[str, Any] = {
            "driver": self._driver,
            "pool": device.pool,
            "device": device.device,
            "conditions": conditions,
        }
        if device.share_id:
            entry["shareID"] = device.share_id
        network: dict[str, Any] = {}
        if device.interface_name:
            network["interfaceName"] = device.interface_name
        if device.ips:
            network["ips"] = list(device.ips)
        if device.hardware_address:
            network["hardwareAddress"] = device.hardware_address
        if network:
            entry["networkData"] = network
        return entry


def _check(ref: str, devices: Sequence[DeviceStatus]) -> None:
    problems = []
    seen: set[tuple[str, str, str]] = set()
    for d in devices:
        if d.key in seen:
            problems.append(f"{_device_ref(d.key)} is reported twice")
        seen.add(d.key)
        problems.extend(f"{_device_ref(d.key)}: {p}" for p in d.problems())
    if problems:
        raise InvalidArgument(f"status for {ref} refused: " + "; ".join(problems))


def _device_ref(key: tuple[str, str, str]) -> str:
    pool, device, share = key
    return f"device {pool}/{device}" + (f" (share {share})" if share else "")


def _condition(
    kind: str,
    true: bool,
    reason: str,
    message: str,
    previous: dict[str, tuple[str, str]],
    now: datetime,
) -> dict[str, str]:
    status = "True" if true else "False"
    before = previous.get(kind)
    since = before[1] if before and before[0] == status else _timestamp(now)
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


def _timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC, whole seconds: ``metav1.Time``'s wire form."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _previous_conditions(
    status: ClaimStatusModel, driver: str
) -> dict[tuple[str, str, str], dict[str, tuple[str, str]]]:
    """Device key -> condition type -> (status, lastTransitionTime) as the claim has them."""
    found: dict[tuple[str, str, str], dict[str, tuple[str, str]]] = {}
    for entry in status.devices or []:
        if entry.driver != driver:
            continue
        key = (entry.pool, entry.device, entry.shareID or "")
        found[key] = {
            c.type: (c.status, _timestamp(c.lastTransitionTime)) for c in entry.conditions or []
        }
    return found
