"""A deterministic fake Linux kernel (networking only) that runs outside the service.

``FakeKernelModel`` implements the ``Kernel`` protocol in memory; ``lab`` builds one
from a YAML host description; ``python -m fakekernel`` serves it on a Unix socket and
``FakeKernelClient`` / ``FakeKernelProcess`` talk to that process.
"""

from .client import FakeKernelClient, FakeKernelProcess, FakeKernelProtocolError
from .lab import DEFAULT_LAB, LabError, build_model, load_lab
from .model import FakeKernelModel, diff

__all__ = [
    "DEFAULT_LAB",
    "FakeKernelClient",
    "FakeKernelModel",
    "FakeKernelProcess",
    "FakeKernelProtocolError",
    "LabError",
    "build_model",
    "diff",
    "load_lab",
]
