"""The kernel seam declared once: each call of the ``Kernel`` protocol as data.

The protocol class (``_protocol.py``) is the table. Each of its methods carries its
signature, its docstring and, through ``@reads`` or ``@mutates``, whether it changes the
kernel and which errno values it answers with and when. ``calls_of(protocol)`` reads
that into ``KernelCall`` records, and everything that used to repeat the boundary by
hand is derived from them:

- ``KernelMethods`` (generated into ``_methods.py`` by ``scripts/gen_kernel_seam.py``):
  a typed method per call that hands its arguments, by name, to one hook;
- ``ForwardingKernel``: a wrapper that forwards every call to an inner kernel, so a
  wrapper (crash points, shared reads, a lab's named namespaces) overrides the hook or
  the one method it changes, and nothing else;
- the fake kernel's wire (its client, and the dispatch the fake kernel server and the
  VM lab's guest agent share): parameter and result types, and which calls exist.

Adding a kernel call is: a method on the protocol, the backends that implement it,
their tests, and a run of the generator (a test fails while ``_methods.py`` is stale).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_type_hints

__all__ = [
    "PROTOCOL_VERSION",
    "KernelCall",
    "calls_of",
    "mutates",
    "reads",
]

# The version of the kernel wire (the fake kernel server's and the guest agent's): a
# client sends it with every request, a server refuses any other. Bumped when a call is
# added, removed or changes its parameters or result.
PROTOCOL_VERSION = 2

F = TypeVar("F", bound=Callable[..., Any])
_DECLARATION = "__kernel_call__"


@dataclass(frozen=True)
class _Declaration:
    mutating: bool
    errors: Mapping[int, str]
    constant: bool


def reads(*, errors: Mapping[int, str] | None = None, constant: bool = False) -> Callable[[F], F]:
    """Declare a protocol method a read: it never changes the kernel. ``errors``: each
    errno it may raise and when (absence is never one: a read answers None or []).
    ``constant``: its answer never changes for the life of the backend."""
    return _declare(_Declaration(False, dict(errors or {}), constant))


def mutates(*, errors: Mapping[int, str]) -> Callable[[F], F]:
    """Declare a protocol method a mutation; ``errors``: each errno it may raise and when.
    A mutation that fails has changed nothing unless its docstring says what stays done."""
    return _declare(_Declaration(True, dict(errors), False))


def _declare(declaration: _Declaration) -> Callable[[F], F]:
    def mark(function: F) -> F:
        setattr(function, _DECLARATION, declaration)
        return function

    return mark


@dataclass(frozen=True)
class KernelCall:
    """One call of a kernel protocol: its name, whether it mutates, the errno values it
    answers with, and (from the protocol's annotations, resolved on first use) its
    parameters' and result's types."""

    name: str
    mutating: bool
    errors: Mapping[int, str]
    constant: bool
    function: Callable[..., Any] = field(repr=False, compare=False)

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        """The protocol method's signature without ``self``, annotations resolved."""
        hints = get_type_hints(self.function)
        sig = inspect.signature(self.function)
        params = [
            p.replace(annotation=hints[p.name]) for p in sig.parameters.values() if p.name != "self"
        ]
        return sig.replace(parameters=params, return_annotation=hints["return"])

    @property
    def params(self) -> dict[str, Any]:
        """Parameter name -> type, in the protocol's order."""
        return {name: p.annotation for name, p in self.signature.parameters.items()}

    @property
    def result(self) -> Any:
        return self.signature.return_annotation

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.function) or ""


def calls_of(protocol: type) -> dict[str, KernelCall]:
    """The declared calls of ``protocol`` and of the protocols it extends, by name, in
    declaration order (base protocols first). A public method without a declaration is
    an error: every call of the seam says whether it mutates."""
    calls: dict[str, KernelCall] = {}
    for cls in reversed(protocol.__mro__):
        for name, member in vars(cls).items():
            if name.startswith("_") or not callable(member):
                continue
            declaration = getattr(member, _DECLARATION, None)
            if declaration is None:
                raise TypeError(
                    f"{cls.__qualname__}.{name} is not declared: decorate it with "
                    "@reads or @mutates (plugins/kernel/_seam.py)"
                )
            calls[name] = KernelCall(
                name,
                declaration.mutating,
                declaration.errors,
                declaration.constant,
                member,
            )
    return calls
