"""CEL device selectors.

Selectors are evaluated with ``cel-python`` (``celpy``). A device is visible to CEL as
the map ``device``, shaped like a DRA device::

    device.name                                  # the published device name
    device.attributes["dra.networking"].type     # "vf" | "pf"
    device.attributes["dra.networking"].pfName   # string, int and bool attributes
    device.capacity["dra.networking"].macvlans   # whole-number capacity, as int

Every expression is parsed once (cached by its text). A syntax error, a result that is
not a bool, or an evaluation error (for example a missing attribute without a ``has()``
guard) raises :class:`SelectorError` naming the step or policy and, when evaluating,
the device: as with DRA, a selector that errors on a device fails the allocation
rather than silently skipping the device.

Which devices exist is ``_inventory``'s; which of them serve a step is ``_allocate``'s.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from plugins.sdk import InvalidArgument

from ._cel_table import install as install_cel_parser

__all__ = [
    "CompiledSelector",
    "SelectorError",
    "SelectorSubject",
    "cel_device",
    "compile_selector",
]

_ACTIVATION = re.compile(r" \(in activation .*", re.DOTALL)


class SelectorError(InvalidArgument):
    """A selector that cannot be used: syntax, a non-bool result, or an evaluation error."""

    def __init__(
        self,
        owner: str,
        expression: str,
        reason: str,
        *,
        step: str | None = None,
        policy: str | None = None,
        device: str | None = None,
    ) -> None:
        on = f" on device {device!r}" if device else ""
        prefix = f"{owner}: " if owner else ""
        super().__init__(
            f"{prefix}selector {expression!r}{on}: {reason}",
            details={"step": step or "", "policy": policy or "", "device": device or ""},
        )
        self.owner = owner
        self.expression = expression
        self.reason = reason
        self.step = step
        self.policy = policy
        self.device = device


class SelectorSubject(Protocol):
    """What a selector is evaluated on: an inventory device or a published one."""

    @property
    def name(self) -> str: ...

    @property
    def cel(self) -> Any:
        """The device as the CEL map ``device`` (see :func:`cel_device`)."""


def cel_device(
    name: str,
    attributes: Mapping[str, Mapping[str, str | int | bool]],
    capacity: Mapping[str, Mapping[str, int]],
) -> Any:
    """The CEL value of one device: ``{name, attributes: {domain: ...}, capacity: {...}}``."""
    return json_to_cel(
        {
            "name": name,
            "attributes": {d: dict(a) for d, a in attributes.items()},
            "capacity": {d: dict(c) for d, c in capacity.items()},
        }
    )


@functools.cache
def _environment() -> Any:
    # Created on first use: celpy.Environment() raises the interpreter's recursion limit.
    install_cel_parser()  # celpy's parser, its tables computed ahead of time (_cel_table)
    return celpy.Environment()


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    env = _environment()
    return env.program(env.compile(expression))


def _describe_parse_error(exc: Exception) -> str:
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    where = f" at line {line} column {column}" if line is not None else ""
    first = str(exc).strip().splitlines()
    return f"syntax error{where}" + (f": {first[0]}" if first else "")


def _describe_eval_error(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else type(exc).__name__
    return _ACTIVATION.sub("", text)


@dataclass(frozen=True)
class CompiledSelector:
    expression: str
    owner: str
    step: str | None = None
    policy: str | None = None
    _runner: Any = field(default=None, repr=False, compare=False)

    def matches(self, device: SelectorSubject) -> bool:
        """Evaluate on one device; raise :class:`SelectorError` unless the result is a bool."""
        try:
            result = self._runner.evaluate({"device": device.cel})
        except CELEvalError as exc:
            raise self._error(f"evaluation failed: {_describe_eval_error(exc)}", device) from None
        except Exception as exc:  # celpy surfaces some failures as plain Python errors
            reason = f"evaluation failed: {type(exc).__name__}: {_describe_eval_error(exc)}"
            raise self._error(reason, device) from None
        if isinstance(result, CELEvalError):
            raise self._error(f"evaluation failed: {_describe_eval_error(result)}", device)
        if not isinstance(result, celtypes.BoolType):
            got = type(result).__name__.removesuffix("Type").lower()
            raise self._error(f"must evaluate to a bool, got {got} {result!s}", device)
        return bool(result)

    def _error(self, reason: str, device: SelectorSubject) -> SelectorError:
        return SelectorError(
            self.owner,
            self.expression,
            reason,
            step=self.step,
            policy=self.policy,
            device=device.name,
        )


def compile_selector(
    expression: str, *, step: str | None = None, policy: str | None = None
) -> CompiledSelector:
    """Parse ``expression`` once (cached); raise :class:`SelectorError` on a syntax error."""
    owner = f"step {step!r}" if step else f"policy {policy!r}" if policy else ""
    try:
        runner = _program(expression)
    except Exception as exc:  # CELParseError, and lark errors it does not wrap
        raise SelectorError(
            owner, expression, _describe_parse_error(exc), step=step, policy=policy
        ) from None
    return CompiledSelector(expression, owner, step, policy, runner)
