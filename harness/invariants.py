"""The rig's invariants, checked after every crash run.

- nothing of ours leaked: no link carries our ownership marker, no VF is outside the
  host namespace, and the kernel equals its first snapshot, both while the pod still
  lives (if it did at the snapshot: its own interfaces are foreign and untouched) and
  once the pod's namespace is gone; the labs start from random states, so this proves
  every before-image was restored, admin state and VF settings included, and nothing
  foreign was touched;
- no double ownership: the node authority holds no claim after cleanup;
- the journals agree: every operation the coordinator recorded is, in the plugin's
  journal, in the state the coordinator believes;
- every coordinator call is closed (succeeded, cleaned or abandoned): none is left
  requested, failed, pending or quarantined.
"""

from __future__ import annotations

from typing import Any, Protocol

from fakekernel.model import diff
from plugins.coordinator import CLOSED_CALL_STATES, CoordinatorJournal
from plugins.kernel import Link, NsRef
from plugins.sdk import OperationState
from plugins.sdk.host import PluginCallError

MARKER = "dranp:"


class InspectableKernel(Protocol):
    """The fake kernel, in-process or behind its server: what the invariants read."""

    def namespaces(self) -> list[NsRef]: ...

    def list_links(self, ns: NsRef) -> list[Link]: ...

    def host_namespace(self) -> NsRef: ...

    def delete_namespace(self, name: str) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...


def leaks(model: InspectableKernel) -> list[str]:
    found = []
    host = model.host_namespace().key
    for ns in model.namespaces():
        for link in model.list_links(ns):
            if link.alias and link.alias.startswith(MARKER):
                found.append(f"{link.name} in {ns.path} still carries our marker")
            if link.vf_of is not None and ns.key != host:
                found.append(f"VF {link.pci_address} is still in {ns.path} as {link.name}")
    return found


def journal_disagreements(journal: CoordinatorJournal, clients: dict[str, Any]) -> list[str]:
    problems = []
    for call in journal.calls():
        try:
            seen = clients[call.plugin].inspect(call.operation_id, "")
        except PluginCallError as exc:
            problems.append(f"{call.operation_id}: plugin journal unreadable: {exc}")
            continue
        if not seen.found:
            if call.state not in ("failed", "requested", "abandoned"):
                problems.append(
                    f"{call.operation_id}: coordinator says {call.state}, plugin has no record"
                )
            continue
        if seen.state is not OperationState.CLEANED:
            problems.append(
                f"{call.operation_id}: coordinator says {call.state}, plugin says {seen.state}"
            )
        elif call.hook in ("RemoveNetwork", "NodeUnprepare") and call.state != "cleaned":
            problems.append(
                f"{call.operation_id}: plugin cleaned it, coordinator says {call.state}"
            )
    return problems


def open_calls(journal: CoordinatorJournal) -> list[str]:
    """Calls the coordinator still owes an outcome, a retry, a cleanup or an operator."""
    return [
        f"{c.operation_id}: coordinator call left {c.state}"
        for c in journal.calls()
        if c.state not in CLOSED_CALL_STATES
    ]


def violations(
    before: dict[str, Any],
    model: InspectableKernel,
    journal: CoordinatorJournal,
    clients: dict[str, Any],
    sandbox: str = "pod-a",
) -> list[str]:
    """Everything wrong with the node after a run that ended with full cleanup."""
    found = leaks(model)
    found += [f"claim still held: {c.resource} by {c.holder}" for c in journal.claims()]
    found += journal_disagreements(journal, clients)
    found += open_calls(journal)
    found += kernel_differences(before, model, sandbox)
    return found


def kernel_differences(before: dict[str, Any], model: InspectableKernel, sandbox: str) -> list[str]:
    """How the kernel differs from ``before``: with the pod alive (when ``before`` has it),
    then once its namespace is gone (nothing of ours may depend on the pod going away)."""
    found: list[str] = []
    if any(ns["name"] == sandbox for ns in before["namespaces"]):
        found += [f"kernel differs: {line}" for line in diff(before, model.snapshot())]
    if any(ns.path.endswith(f"/{sandbox}") for ns in model.namespaces()):
        model.delete_namespace(sandbox)
    gone = diff(without_namespace(before, sandbox), model.snapshot())
    found += [f"kernel differs: {line}" for line in gone if f"kernel differs: {line}" not in found]
    return found


def without_namespace(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    """``snapshot`` as it would be once namespace ``name`` is deleted: its links die, with
    their veth peers and the links stacked on them, wherever those are. (Devices would go
    home; a rig snapshot never has one in the pod.)"""
    paths = {ns["path"] for ns in snapshot["namespaces"] if ns["name"] == name}
    if not paths:
        return snapshot
    links = snapshot["links"]
    dying = {lk["id"] for lk in links if lk["ns"] in paths}
    while True:
        more = {
            lk["id"]
            for lk in links
            if lk["id"] not in dying and (lk["peer"] in dying or lk["parent"] in dying)
        }
        if not more:
            break
        dying |= more
    return {
        **snapshot,
        "namespaces": [ns for ns in snapshot["namespaces"] if ns["path"] not in paths],
        "links": [lk for lk in links if lk["id"] not in dying],
    }
