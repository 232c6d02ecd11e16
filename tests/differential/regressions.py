"""Regression scenarios shrunk from generated differential runs (generated_shrink).

Each one is a minimal sequence of generated steps after which the fake and a real
kernel diverged, kept in the corpus with the divergence's signature (what
test_generated_session matches a new divergence against) and, in its docstring, the
kernel release and seed it came from. They declare "device" (they came from the VM
lab and may use its PFs), so they run in the vm tier, like the corpus's SR-IOV
scenarios; one the model still gets wrong is listed in known_divergences.py.
"""

from __future__ import annotations

from collections.abc import Callable

from plugins.kernel import LinkKind

from .generated import Signature, replay
from .scenarios import Run, scenario
from .world import World

# regression scenario name -> the divergence it reproduces
REGRESSIONS: dict[str, Signature] = {}


def regression(signature: Signature, *kinds: LinkKind) -> Callable[[Run], Run]:
    def register(fn: Run) -> Run:
        REGRESSIONS[fn.__name__] = signature
        return scenario(*kinds)(fn)

    return register


__all__ = ["REGRESSIONS", "World", "regression", "replay"]
