"""The toy plugin as a real service process: ``python -m tests.runner.toy_service --config F``.

Its kernel URL is ``toy:///abs/path/toy.json``: the toy resource file. Like the real
services it exposes ``run(argv, crash=...)``, so the test kit's launcher
(``python -m labs.crashing_service tests.runner.toy_service ...``) can arm it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from plugins.sdk import RegistrationError
from plugins.sdk.runner import NO_CRASH, CrashPoints, EffectRegistry
from plugins.sdk.service import main

from .toy import ToyKernel, toy_effects, toy_registry


def make_effects(kernel_url: str, crash: CrashPoints) -> tuple[EffectRegistry, str]:
    if not kernel_url.startswith("toy://"):
        raise RegistrationError(f"toy service needs a toy:// kernel URL, got {kernel_url!r}")
    return toy_effects(ToyKernel(Path(kernel_url.removeprefix("toy://")), crash)), "boot-1"


def run(argv: Sequence[str], *, crash: CrashPoints = NO_CRASH) -> int:
    return main(argv, "toy-service", toy_registry, make_effects, crash=crash)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
