"""Mutants of the model: the fake kernel as it was before a behaviour of issue 30's list
was modelled, one behaviour each.

They serve two purposes (docs/generated-differential.md, "Mutants"):

* they show that the generated sessions reach each behaviour: on the fake tier a session
  of a mutant against the model finds a divergence and shrinks it
  (``test_generated.py``), so a session that agrees with Linux is evidence that the
  model has the behaviour, not that the generator never went there;
* ``scripts/fidelity-session --mutant NAME`` runs the mutant against the guest's real
  kernel: what it finds, shrunk, is the behaviour's regression scenario from a generated
  run (``regressions.py``), which the model as it is must pass.

A mutant changes one model instance only (its NIC profile, or calls wrapped on its
kernel), so a mutant and the model can run side by side in one process.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from plugins.kernel import KernelError, Link, LinkChanges, LinkSpec, NsRef

from .world import FakeWorld, vm_like_model


class ModelRelease(Protocol):
    """What the model of a guest takes from its kernel release (``GuestBaseline`` has it)."""

    @property
    def live_rename(self) -> bool: ...

    @property
    def vf_probe_answered(self) -> bool: ...


@dataclass(frozen=True)
class Release:
    """A release's traits given directly (the fake tier: 6.1's)."""

    live_rename: bool = False
    vf_probe_answered: bool = False


class Wrapped:
    """A kernel with some of its calls replaced; every other attribute is the inner one's."""

    def __init__(self, inner: Any, **calls: Callable[..., Any]) -> None:
        self._inner = inner
        for name, call in calls.items():
            setattr(self, name, call)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass(frozen=True)
class Mutant:
    name: str
    behaviour: str  # in the words
    nic: Mapping[str, Any] = field(default_factory=dict)  # overrides of the PFs' profile
    wrap: Callable[[Any], Wrapped] | None = None  # the model's calls it replaces

    def world(self, release: ModelRelease) -> FakeWorld:
        model = vm_like_model(
            live_rename=release.live_rename,
            vf_probe_answered=release.vf_probe_answered,
            nic=self.nic,
        )
        world = FakeWorld(live_rename=release.live_rename, model=model)
        if self.wrap is not None:
            world.kernel = self.wrap(model)
        return world


def _chosen(name: str | None) -> bool:
    return name is not None and (name == "" or "%" in name)


def _refuse_chosen_names(model: Any) -> Wrapped:
    """The model before f81b742: a template, no name or a rename to a template EINVAL."""

    def refused(name: str | None) -> KernelError:
        return KernelError(errno.EINVAL, f"mutant: no kernel-chosen name ({name!r})")

    def create_link(ns: NsRef, spec: LinkSpec) -> Link:
        if _chosen(spec.name):
            raise refused(spec.name)
        result: Link = model.create_link(ns, spec)
        return result

    def set_link(ns: NsRef, ifindex: int, changes: LinkChanges) -> Link:
        if changes.name is not None and "%" in changes.name:
            raise refused(changes.name)
        result: Link = model.set_link(ns, ifindex, changes)
        return result

    def move_link(ns: NsRef, ifindex: int, target: NsRef, **kw: Any) -> Link:
        if kw.get("new_name") is not None and "%" in kw["new_name"]:
            raise refused(kw["new_name"])
        result: Link = model.move_link(ns, ifindex, target, **kw)
        return result

    return Wrapped(model, create_link=create_link, set_link=set_link, move_link=move_link)


def _loopback_without_a_valid_address(model: Any) -> Wrapped:
    """The model before f81b742: enslaving ``lo`` past its up check was EADDRNOTAVAIL,
    also into a bond that has slaves (Linux: EINVAL, another device type)."""

    def set_link(ns: NsRef, ifindex: int, changes: LinkChanges) -> Link:
        try:
            result: Link = model.set_link(ns, ifindex, changes)
        except KernelError as exc:
            found = model.get_link(ns, ifindex=ifindex)
            is_lo = found is not None and found.name == "lo"
            # the model's refusal of lo's type (into a bond with slaves, or an empty
            # 802.3ad one), not any EINVAL (a master that is not there is one too)
            types = "type differs" in str(exc) or "requires Ethernet" in str(exc)
            if changes.master and exc.errno == errno.EINVAL and is_lo and types:
                raise KernelError(errno.EADDRNOTAVAIL, "mutant: lo has no address") from exc
            raise
        return result

    return Wrapped(model, set_link=set_link)


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            "kernel_chosen_names",
            "a name template, no name at all, a rename to a template: Linux picks the "
            "next free index; the model refused with EINVAL",
            wrap=_refuse_chosen_names,
        ),
        Mutant(
            "no_vf_mailbox",
            "igbvf asks its PF through a mailbox: VLAN filters, carrier and the MAC in "
            "the PF's VF table wait for the PF to answer; the model did not wait",
            nic={"vf_mailbox": False},
        ),
        Mutant(
            "loopback_enslave",
            "enslaving lo into a bond with slaves is EINVAL; the model answered EADDRNOTAVAIL",
            wrap=_loopback_without_a_valid_address,
        ),
    )
}
