"""The toy plugin as a real service process: ``python -m tests.runner.toy_service --config F``.

Its kernel URL is ``toy:///abs/path/toy.json``: the toy resource file.
"""

from __future__ import annotations

import sys
from pathlib import Path

from plugins.sdk import RegistrationError
from plugins.sdk.runner import CrashPoints, EffectRegistry
from plugins.sdk.service import main

from .toy import ToyKernel, toy_effects, toy_registry


def make_effects(kernel_url: str, crash: CrashPoints) -> tuple[EffectRegistry, str]:
    if not kernel_url.startswith("toy://"):
        raise RegistrationError(f"toy service needs a toy:// kernel URL, got {kernel_url!r}")
    return toy_effects(ToyKernel(Path(kernel_url.removeprefix("toy://")), crash)), "boot-1"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], "toy-service", toy_registry, make_effects))
