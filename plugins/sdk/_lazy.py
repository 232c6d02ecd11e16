"""Package roots whose names are imported on first use.

A root that re-exports from many modules makes every program that imports one name pay
for all of them at start-up (the fake kernel server paid for the SDK's runner and store,
~0.15 s of CPU at each of its starts). Such a root keeps a table of name -> module and
installs the ``__getattr__`` and ``__dir__`` made here; it imports the same names under
``TYPE_CHECKING`` for mypy (tests/unit/test_lazy_roots.py keeps the lists in step).
What it buys (the fake kernel server's start; nothing measurable for the services):
docs/benchmarks.md, "Tricks kept and removed".
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, MutableMapping

__all__ = ["first_use_exports"]


def first_use_exports(
    package: str,
    module_of: Mapping[str, str],
    namespace: MutableMapping[str, object],
    exported: Collection[str],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the root ``package`` (its ``globals()`` as
    ``namespace``), importing ``package.<module_of[name]>`` when ``name`` is first used."""

    def __getattr__(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__, not importlib.import_module: ``-X importtime`` reports this one.
        value = getattr(__import__(f"{package}.{module}", fromlist=[name]), name)
        namespace[name] = value  # the next lookup is a plain module attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exported})

    return __getattr__, __dir__
