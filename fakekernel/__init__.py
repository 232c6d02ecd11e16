"""A deterministic fake Linux kernel (networking only) that runs outside the service.

``FakeKernelModel`` implements the ``Kernel`` protocol in memory; ``lab`` builds one
from a YAML host description; ``python -m fakekernel`` serves it on a Unix socket and
``FakeKernelClient`` / ``FakeKernelProcess`` talk to that process.

Each name is imported from its module on first use: a service on ``kernel+unix://`` needs
the client only, the server needs the model only; neither pays for the other at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.sdk import first_use_exports

if TYPE_CHECKING:
    from ._errors import LabError
    from ._protocol import LAB_CALLS, LabKernel
    from ._url import unix_socket_kernel
    from .client import FakeKernelClient, FakeKernelProcess, FakeKernelProtocolError
    from .lab import DEFAULT_LAB, build_model, load_lab
    from .model import FakeKernelModel, diff

__all__ = [
    "DEFAULT_LAB",
    "LAB_CALLS",
    "FakeKernelClient",
    "FakeKernelModel",
    "FakeKernelProcess",
    "FakeKernelProtocolError",
    "LabError",
    "LabKernel",
    "build_model",
    "diff",
    "load_lab",
    "unix_socket_kernel",
]

_MODULE_OF = {
    "DEFAULT_LAB": "lab",
    "FakeKernelClient": "client",
    "FakeKernelModel": "model",
    "FakeKernelProcess": "client",
    "FakeKernelProtocolError": "client",
    "LAB_CALLS": "_protocol",
    "LabError": "_errors",
    "LabKernel": "_protocol",
    "build_model": "lab",
    "diff": "model",
    "load_lab": "lab",
    "unix_socket_kernel": "_url",
}

# Hidden from mypy, which would otherwise accept any name imported from here; the
# TYPE_CHECKING imports above type them.
if not TYPE_CHECKING:
    __getattr__, __dir__ = first_use_exports(__name__, _MODULE_OF, globals(), __all__)
