"""The test kit's kernel URL scheme, ``kernel+unix:///PATH``: a kernel served on a Unix
socket (``python -m fakekernel``, or the relay to a guest's or host's agent).

``plugins.kernel.open_kernel`` finds it through the ``dra_networkplugins.kernels`` entry
point the kit registers (testkit/pyproject.toml), so the product names no test-kit
module. The client is imported only when a URL is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plugins.kernel import Kernel


def unix_socket_kernel(path: str) -> Kernel:
    """The kernel served on the Unix socket ``path``."""
    from .client import FakeKernelClient

    return FakeKernelClient(path)
