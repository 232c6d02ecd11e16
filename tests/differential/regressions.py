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

# regression scenario name -> the divergences it reproduces
REGRESSIONS: dict[str, tuple[Signature, ...]] = {}


def regression(
    signature: Signature | tuple[Signature, ...], *kinds: LinkKind
) -> Callable[[Run], Run]:
    """Register the scenario in the corpus, with the divergence(s) it reproduces."""
    signatures = signature if isinstance(signature, tuple) else (signature,)

    def register(fn: Run) -> Run:
        REGRESSIONS[fn.__name__] = signatures
        return scenario(*kinds)(fn)

    return register


@regression(Signature("set_vf spoofchk", "outcome", ("fake EINVAL", "linux EOPNOTSUPP")), "device")
def generated_61_set_vf_spoofchk_without_vfs(w: World) -> None:
    """Spoof checking set on a VF of a PF that has none: EOPNOTSUPP, not EINVAL.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 30).
    """
    replay(w, [{"op": "set_vf", "pf": "enp1s0", "vf": 0, "changes": {"spoofchk": False}}])


@regression(Signature("create ipvlan (name)", "state", ("perm_mac",)), "device", "ipvlan")
def generated_61_ipvlan_has_its_parents_permanent_address(w: World) -> None:
    """An ipvlan reports a permanent address, its parent's address when it was made
    (ipvlan_init copies the address and leaves addr_assign_type NET_ADDR_PERM, so
    register_netdevice copies it to perm_addr); the model reports none.

    Shrunk from a generated run on 6.1.0-57-amd64 (seed 1).
    """
    replay(
        w,
        [
            {
                "op": "create",
                "ns": "host",
                "kind": "ipvlan",
                "name": "ipv0",
                "parent": "enp1s0",
                "mode": "l2",
            },
        ],
    )
