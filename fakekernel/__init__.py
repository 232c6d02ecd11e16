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
    from plugins.kernel import Kernel

    from ._errors import LabError
    from ._protocol import LAB_CALLS, LabKernel
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
}

# Hidden from mypy, which would otherwise accept any name imported from here; the
# TYPE_CHECKING imports above type them.
if not TYPE_CHECKING:
    __getattr__, __dir__ = first_use_exports(__name__, _MODULE_OF, globals(), __all__)


def unix_socket_kernel(path: str) -> Kernel:
    """The ``kernel+unix:///PATH`` backend of ``plugins.kernel.open_kernel``: a kernel
    served on the Unix socket PATH (``python -m fakekernel``, or the relay to a guest's
    agent). Registered by the test kit's ``dra_networkplugins.kernels`` entry point, so
    the product names no test-kit module."""
    from .client import FakeKernelClient

    return FakeKernelClient(path)
