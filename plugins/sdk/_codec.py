"""The one dataclass <-> JSON codec for values the project persists or sends.

Key case rule: a dataclass becomes an object whose keys are its **field names as
written** (snake_case, ``root_id``), never camelCased. Journal rows (requests,
responses, receipts), the semantic digest and the fake kernel's server protocol are
all written this way, so none of them may change it: a digest over a renamed key
would no longer match the journals already on disk. (Plugin configs and effect
descriptions are camelCase documents with their own schemas; they are not dataclass
dumps.)

A field added to a dataclass after a release is declared with :func:`added_field`: it
is left out of the JSON while it holds its default, so every value that does not use it
encodes to the very bytes the release wrote (digests and golden journals stay equal),
and the release's decoder, which refuses unknown keys, still reads it. The decoder
gives a missing field its default.

``to_json_value`` turns dataclasses, mappings, lists/tuples and enums (by value) into
plain JSON values and refuses anything else. ``from_json_value`` walks a type
annotation (dataclasses, ``X | None``, ``list``, ``tuple``, ``dict``/``Mapping``,
``Literal``, enums and scalars) to rebuild typed values, refusing anything that does
not fit, so a format mismatch fails loudly instead of producing wrong values.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import functools
import types
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")

__all__ = ["JSONCodecError", "added_field", "from_json_value", "to_json_value"]


class JSONCodecError(ValueError):
    """A value cannot be encoded, or JSON does not fit the type asked for; names where."""


_PLAIN = frozenset({str, int, float, bool, type(None)})
_DATACLASS, _ENUM, _MAPPING, _SEQUENCE, _SCALAR, _UNKNOWN = range(6)


_ADDED = "dra-networkplugins/added-field"


def added_field(default: T) -> T:
    """A dataclass field added after a release, left out of the JSON at ``default``."""
    result: T = dataclasses.field(default=default, metadata={_ADDED: True})
    return result


_ENCODINGS: dict[type, tuple[int, tuple[str, ...], dict[str, Any]]] = {}


def _encoding(tp: type) -> tuple[int, tuple[str, ...], dict[str, Any]]:
    """How ``to_json_value`` encodes an instance of ``tp`` (and a dataclass's field names).

    Decided once per type: the checks (``is_dataclass``, ``fields``, the ABC's
    ``isinstance``) were most of the codec's time, and every operation encodes its
    request's dataclasses again. The order of the checks is the encoder's.
    """
    if dataclasses.is_dataclass(tp):
        fields = dataclasses.fields(tp)
        added = {f.name: f.default for f in fields if f.metadata.get(_ADDED)}
        return _DATACLASS, tuple(f.name for f in fields), added
    if issubclass(tp, enum.Enum):
        return _ENUM, (), {}
    if issubclass(tp, Mapping):
        return _MAPPING, (), {}
    if issubclass(tp, list | tuple):
        return _SEQUENCE, (), {}
    if issubclass(tp, str | int | float | bool):
        return _SCALAR, (), {}
    return _UNKNOWN, (), {}


def to_json_value(value: object) -> Any:
    """Plain JSON (dict, list, str, int, float, bool, None) for a value of the project."""
    tp = type(value)
    if tp in _PLAIN:  # neither an enum, nor a dataclass, nor a container
        return value
    if isinstance(value, type):  # a class, even a dataclass, is no value to encode
        raise JSONCodecError(f"cannot encode {tp.__name__} as JSON")
    how, names, added = _ENCODINGS.get(tp) or _ENCODINGS.setdefault(tp, _encoding(tp))
    if how == _DATACLASS:
        if added:
            encoded = {}
            for name in names:
                field = getattr(value, name)
                if name not in added or field != added[name]:
                    encoded[name] = to_json_value(field)
            return encoded
        return {name: to_json_value(getattr(value, name)) for name in names}
    if how == _ENUM:
        return value.value  # type: ignore[attr-defined]
    if how == _MAPPING:
        return {str(k): to_json_value(v) for k, v in value.items()}  # type: ignore[attr-defined]
    if how == _SEQUENCE:
        return [to_json_value(v) for v in value]  # type: ignore[attr-defined]
    if how == _SCALAR:
        return value
    raise JSONCodecError(f"cannot encode {tp.__name__} as JSON")


def from_json_value(tp: type[T] | Any, value: Any) -> T:
    """``value`` (plain JSON) as an instance of ``tp``: a class or an alias like
    ``list[Link]``; the inverse of :func:`to_json_value`."""
    result: T = _decode(tp, value, "$")
    return result


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _decode(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:
        return value
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _decode_union(get_args(tp), value, where)
    if origin is Literal:
        if value not in get_args(tp):
            raise JSONCodecError(f"{where}: {value!r} is not one of {get_args(tp)}")
        return value
    if origin is list:
        (item,) = get_args(tp)
        return [
            _decode(item, v, f"{where}[{i}]") for i, v in enumerate(_expect(list, value, where))
        ]
    if origin is tuple:
        return _decode_tuple(get_args(tp), _expect(list, value, where), where)
    if origin in (dict, collections.abc.Mapping):
        k_tp, v_tp = get_args(tp)
        items = _expect(dict, value, where).items()
        return {_decode(k_tp, k, where): _decode(v_tp, v, f"{where}.{k}") for k, v in items}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise JSONCodecError(f"{where}: {value!r} is not a {tp.__name__}") from None
    if tp is type(None):
        if value is not None:
            raise JSONCodecError(f"{where}: expected null, got {value!r}")
        return None
    if tp in (str, int, float, bool):
        # bool is an int in Python; JSON keeps them apart and so do we (an int is a float)
        fits = isinstance(value, tp) or (tp is float and isinstance(value, int))
        if not fits or (isinstance(value, bool) and tp is not bool):
            raise JSONCodecError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise JSONCodecError(f"{where}: unsupported annotation {tp!r}")


def _decode_union(args: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _decode(arg, value, where)
        except JSONCodecError as e:
            errors.append(str(e))
    raise JSONCodecError("; ".join(errors) or f"{where}: no alternative fits {value!r}")


def _decode_tuple(args: tuple[Any, ...], value: list[Any], where: str) -> tuple[Any, ...]:
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if len(args) != len(value):
        raise JSONCodecError(f"{where}: expected {len(args)} items, got {len(value)}")
    return tuple(
        _decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
    )


def _decode_dataclass(cls: type, value: Any, where: str) -> Any:
    data = _expect(dict, value, where)
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = set(data) - names
    if unknown:
        raise JSONCodecError(f"{where}: unknown fields {sorted(unknown)} for {cls.__name__}")
    kwargs = {k: _decode(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise JSONCodecError(f"{where}: {e}") from None


def _expect(kind: type[T], value: Any, where: str) -> T:
    if not isinstance(value, kind):
        raise JSONCodecError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value
