"""The three service entry points: networkplugin-vf, networkplugin-bond, networkplugin-links.

Each is the shared service plumbing (``plugins.sdk.service``) with its own
registrations; all three run the same approved Linux executors on the kernel the
administrator's config names.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from plugins import bond, links, vf
from plugins.effects.linux import linux_effects
from plugins.kernel import CrashingKernel, open_kernel
from plugins.sdk import Registry
from plugins.sdk.runner import CrashPoints, EffectRegistry
from plugins.sdk.service import main


def make_effects(kernel_url: str, crash: CrashPoints) -> tuple[EffectRegistry, str]:
    kernel = open_kernel(kernel_url)
    return linux_effects(CrashingKernel(kernel, crash)), kernel.boot_id()


def _registry(register: Callable[[Registry], None]) -> Callable[[], Registry]:
    def make() -> Registry:
        registry = Registry()
        register(registry)
        return registry

    return make


def vf_main() -> int:
    return main(sys.argv[1:], "networkplugin-vf", _registry(vf.register), make_effects)


def bond_main() -> int:
    return main(sys.argv[1:], "networkplugin-bond", _registry(bond.register), make_effects)


def links_main() -> int:
    return main(sys.argv[1:], "networkplugin-links", _registry(links.register), make_effects)


SERVICES: dict[str, Callable[[], int]] = {
    "networkplugin-vf": vf_main,
    "networkplugin-bond": bond_main,
    "networkplugin-links": links_main,
}
