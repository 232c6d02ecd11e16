"""One generic JSON converter for the kernel interface's frozen dataclasses.

``encode`` turns dataclasses (and tuples) into plain JSON values; ``decode`` walks
a type annotation (dataclasses, ``X | None``, ``list``, ``tuple``, ``dict``,
``Literal`` and scalars) to rebuild typed values, rejecting anything that does
not fit so a protocol mismatch fails loudly instead of producing wrong values.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")


class CodecError(ValueError):
    pass


def encode(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise CodecError(f"cannot encode {type(value).__name__}")


def decode(tp: type[T], value: Any) -> T:
    """``value`` as an instance of ``tp`` (a class or a generic alias like ``list[Link]``)."""
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
            raise CodecError(f"{where}: {value!r} is not one of {get_args(tp)}")
        return value
    if origin is list:
        (item,) = get_args(tp)
        return [
            _decode(item, v, f"{where}[{i}]") for i, v in enumerate(_expect(list, value, where))
        ]
    if origin is tuple:
        return _decode_tuple(get_args(tp), _expect(list, value, where), where)
    if origin is dict:
        k_tp, v_tp = get_args(tp)
        items = _expect(dict, value, where).items()
        return {_decode(k_tp, k, where): _decode(v_tp, v, f"{where}.{k}") for k, v in items}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, value, where)
    if tp is type(None):
        if value is not None:
            raise CodecError(f"{where}: expected null, got {value!r}")
        return None
    if tp in (str, int, float, bool):
        # bool is an int in Python; JSON keeps them apart and so do we (an int is a float)
        fits = isinstance(value, tp) or (tp is float and isinstance(value, int))
        if not fits or (isinstance(value, bool) and tp is not bool):
            raise CodecError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise CodecError(f"{where}: unsupported annotation {tp!r}")


def _decode_union(args: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None and type(None) in args:
        return None
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _decode(arg, value, where)
        except CodecError as e:
            errors.append(str(e))
    raise CodecError("; ".join(errors) or f"{where}: no alternative fits {value!r}")


def _decode_tuple(args: tuple[Any, ...], value: list[Any], where: str) -> tuple[Any, ...]:
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if len(args) != len(value):
        raise CodecError(f"{where}: expected {len(args)} items, got {len(value)}")
    return tuple(
        _decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
    )


def _decode_dataclass(cls: type, value: Any, where: str) -> Any:
    data = _expect(dict, value, where)
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = set(data) - names
    if unknown:
        raise CodecError(f"{where}: unknown fields {sorted(unknown)} for {cls.__name__}")
    kwargs = {k: _decode(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise CodecError(f"{where}: {e}") from None


def _expect(kind: type[T], value: Any, where: str) -> T:
    if not isinstance(value, kind):
        raise CodecError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value
