"""The three service entry points: networkplugin-vf, networkplugin-bond, networkplugin-links.

Each is the shared service plumbing (``plugins.sdk.service``) with its own
registrations; all three run the same approved Linux executors on the kernel the
administrator's config names. They never read crash points from the environment:
production runs ``NO_CRASH``. The test kit's launcher (``labs.crashing_service``)
calls ``run`` with crash points of its own.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from functools import partial

from plugins.effects.linux import linux_effects
from plugins.kernel import CrashingKernel, open_kernel
from plugins.sdk import Registry
from plugins.sdk.runner import NO_CRASH, CrashPoints, EffectRegistry
from plugins.sdk.service import EXIT_REFUSED, main


def make_effects(kernel_url: str, crash: CrashPoints) -> tuple[EffectRegistry, str]:
    kernel = open_kernel(kernel_url)
    # Without crash points there is nothing to name around each call: no wrapper at all.
    wrapped = kernel if crash is NO_CRASH else CrashingKernel(kernel, crash)
    # LinuxKernel counts its stuck calls (docs/observability.md); a kernel that keeps no
    # count (a remote tier's client) has none. Asked of the kernel itself, not its wrapper.
    stuck_calls = getattr(kernel, "stuck_calls", None)
    return linux_effects(wrapped, stuck_calls=stuck_calls), kernel.boot_id()


def _register(package: str) -> Callable[[Registry], None]:
    """``plugins.<package>.register``, imported when called: a service imports only its own."""

    def register(registry: Registry) -> None:
        importlib.import_module(f"plugins.{package}").register(registry)

    register.__qualname__ = register.__name__ = f"{package}.register"
    return register


SERVICES: dict[str, Callable[[Registry], None]] = {
    "networkplugin-vf": _register("vf"),
    "networkplugin-bond": _register("bond"),
    "networkplugin-links": _register("links"),
}
"""Each service by its program name: what it registers (the one table; the test kit's
``labs.PROJECT_SERVICES`` is built from it)."""


def run(argv: Sequence[str], *, crash: CrashPoints = NO_CRASH) -> int:
    """``NAME --config FILE [--log-level L]``: run the named service until it is stopped."""
    name, *rest = argv or [""]
    register = SERVICES.get(name)
    if register is None:
        print(
            f"usage: python -m plugins.services {{{','.join(SERVICES)}}} --config FILE",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    return main(rest, name, partial(Registry.of, register), make_effects, crash=crash)


def vf_main() -> int:
    return run(["networkplugin-vf", *sys.argv[1:]])


def bond_main() -> int:
    return run(["networkplugin-bond", *sys.argv[1:]])


def links_main() -> int:
    return run(["networkplugin-links", *sys.argv[1:]])
