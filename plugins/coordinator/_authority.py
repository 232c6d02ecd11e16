"""The node authority: cross-service ownership of physical resources and domains.

Plugins run in different services with different journals; only the node authority
can tell that the VF service and the link service are about to act on the same
physical interface. Resource and domain keys are resolved before any mutation,
claimed durably for the preparation's lifetime (shared-parent references
included), and locked for the mutation boundary in one deterministic order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from plugins.sdk import Aborted
from plugins.sdk.store import Txn

from ._journal import CoordinatorJournal


@dataclass(frozen=True)
class ResourceClaim:
    """``exclusive``: one holder. ``shared``: many holders of one compatibility group."""

    resource: str
    mode: str
    group: str = ""


class NodeAuthority:
    def __init__(self, journal: CoordinatorJournal) -> None:
        self._journal = journal
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def claim(self, holder: str, claims: Sequence[ResourceClaim]) -> None:
        """Durably claim every resource for ``holder``, all or nothing."""

        def claim_all(t: Txn) -> None:  # a refusal raises: the whole write is rolled back
            for c in sorted(claims, key=lambda c: c.resource):
                for row in t.select("claims", {"resource": c.resource}):
                    other, mode, group = row["holder"], row["mode"], row["grp"]
                    if other == holder:
                        continue
                    if c.mode == "exclusive" or mode == "exclusive":
                        raise Aborted(
                            f"{c.resource} is held by {other} ({mode}); {holder} cannot claim it {c.mode}"
                        )
                    if group != c.group:
                        raise Aborted(
                            f"{c.resource} is shared by {other} as {group}; {c.group} cannot coexist on it "
                            "until those allocations are released and cleaned"
                        )
                t.put(
                    "claims",
                    {"resource": c.resource, "holder": holder, "mode": c.mode, "grp": c.group},
                    key=["resource", "holder"],
                )

        self._journal.write(claim_all)

    def release(self, holder: str) -> None:
        """Only after the holder's cleanup receipts say CLEANED."""
        self._journal.write(lambda t: t.delete("claims", {"holder": holder}))

    @contextmanager
    def mutating(self, resources: Sequence[str]) -> Iterator[None]:
        """Short mutation locks, acquired in sorted order so two callers never deadlock."""
        with ExitStack() as stack:
            for resource in sorted(set(resources)):
                with self._guard:
                    lock = self._locks.setdefault(resource, threading.Lock())
                stack.enter_context(lock)
            yield
