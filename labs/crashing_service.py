"""A service program with crash points armed from the environment: the test kit's launcher.

``python -m labs.crashing_service MODULE [ARGS...] --config FILE`` imports the
service program ``MODULE`` (``plugins.services``, ``tests.runner.toy_service``) and
calls its ``run(ARGS..., crash=CrashPoints.from_environment())``: the same service
main a deployment runs, except that ``NETWORKPLUGIN_CRASH_AT`` / ``_MODE`` make it
``SIGKILL`` itself at a named point and ``NETWORKPLUGIN_CRASH_TRACE`` appends every
point it reaches to a file. The service programs themselves never read those
variables, so nothing in production can arm a crash.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from plugins.sdk.runner import CrashPoints

USAGE = "usage: python -m labs.crashing_service MODULE [ARGS...] --config FILE"


class ServiceProgram(Protocol):
    """What a service module offers the launcher: its main, with crash points injected."""

    def run(self, argv: Sequence[str], *, crash: CrashPoints) -> int: ...


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    module = importlib.import_module(argv[0])
    if not callable(getattr(module, "run", None)):
        print(f"{argv[0]} has no run(argv, *, crash): not a service program", file=sys.stderr)
        return 2
    return cast(ServiceProgram, module).run(argv[1:], crash=CrashPoints.from_environment())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
