"""A Kernel whose reads can be shared for a while: one dump per namespace at recovery.

``ReadSharingKernel(kernel)`` passes every call straight through, except on a thread
inside ``with k.shared_reads():``. There, each read (each call the seam declares
``@reads``) asks the kernel once per distinct argument and answers the same question
again from that first answer. Recovery probes every uncertain effect, and
the probes of one namespace all open it and dump its links: with 1,000 operations in
flight that was 2,000 round trips where one dump per namespace says the same.

Why sharing is sound there: recovery only observes (it never mutates the kernel, and
the service admits no call until it is done), so nothing of ours changes between the
first read and the last. A change by someone else in between is one the probe could
as well have missed by reading a moment earlier; a probe's answer is an observation
at one instant, recorded as a note, never acted on by recovery itself.

A hook (``Runner._create`` for NodePrepare and ConnectNetwork, ``Runner._cleanup`` for
RemoveNetwork and NodeUnprepare, once it holds its unit) runs in a block too, for a
narrower reason: between a mutation of ours and the next, an effect's apply asks again
what its capture just read, and the next effect's capture or undo asks again what the
previous one just read, with nothing but our own journal commit in between; that second
answer is the same observation a moment later. Every mutation forgets everything
first, so what follows a change of ours reads the kernel again, with two exceptions:
the namespaces opened stay shared (the protocol's mutations change links and VF tables,
never which namespace a path names), and a mutation's answer that is a PCI device (the
backend reads the link back after the change) answers the next ``find_device`` of that
function, the same observation.

Outside a ``shared_reads()`` block (inspection) nothing is remembered. A mutation
inside one forgets everything first and passes through.
Errors are not remembered: a read that failed is asked again. Only the thread that
opened the block shares; other threads (a GetInfo, the health service) never see it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable, Iterator
from typing import Any

from ._forwarding import ForwardingKernel
from ._protocol import Kernel
from ._seam import KernelCall
from ._types import Link

# Reads a mutation of ours cannot change the answer of (it keeps them shared).
_NAMESPACE_READS = frozenset({"open_namespace", "host_namespace"})


class ReadSharingKernel(ForwardingKernel):
    """``kernel``'s calls, with reads shared inside ``shared_reads()`` (module docstring)."""

    def __init__(self, kernel: Kernel) -> None:
        super().__init__(kernel)
        self._local = threading.local()

    @contextlib.contextmanager
    def shared_reads(self) -> Iterator[None]:
        """On this thread, until the block ends: each distinct read asks the kernel once."""
        outer = getattr(self._local, "answers", None)
        if outer is not None:  # nested: the outer block's answers stay in use
            yield
            return
        self._local.answers = {}
        try:
            yield
        finally:
            self._local.answers = None

    def _kernel_call(self, call: KernelCall, arguments: dict[str, Any]) -> Any:
        answers: dict[tuple[Hashable, ...], Any] | None = getattr(self._local, "answers", None)
        if answers is None:
            return super()._kernel_call(call, arguments)
        if call.mutating:
            # What a namespace's handle opens is no link's doing: every mutation of the
            # protocol changes links and VF tables, never which namespace a path names.
            kept = {key: answers[key] for key in answers if key[0] in _NAMESPACE_READS}
            answers.clear()
            answers.update(kept)
            changed = super()._kernel_call(call, arguments)
            if isinstance(changed, Link) and changed.pci_address:
                # The mutation's answer is the kernel's report of the device right after
                # our change (read back by the backend): the next effect's lookup of it
                # by PCI function would ask the same a moment later.
                answers[("find_device", changed.pci_address)] = changed
            return changed
        key = (call.name, *arguments.values())  # every parameter, in the protocol's order
        if key not in answers:
            answers[key] = super()._kernel_call(call, arguments)
        answer = answers[key]
        # A copy of a list each time: a caller may sort or filter its list without
        # touching the next caller's.
        return list(answer) if isinstance(answer, list) else answer
