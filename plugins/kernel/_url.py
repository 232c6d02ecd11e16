"""Kernel backends chosen by URL, built lazily (only the chosen backend is imported).

- ``fake:///abs/path/kernel.sock``: the fake kernel server (``python -m fakekernel``).
- ``linux:///run/netns/host``: real Linux over netlink; the path is the approved host
  namespace mount (never guessed), e.g. ``linux:///proc/1/ns/net`` on a plain host.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from plugins.sdk import RegistrationError

from ._protocol import Kernel


def _fake(path: str) -> Kernel:
    from fakekernel.client import FakeKernelClient

    return FakeKernelClient(path)


def _linux(path: str) -> Kernel:
    from plugins.kernel.linux import LinuxKernel

    return LinuxKernel(path)


BACKENDS: dict[str, Callable[[str], Kernel]] = {"fake": _fake, "linux": _linux}


def open_kernel(url: str) -> Kernel:
    parts = urlsplit(url)
    backend = BACKENDS.get(parts.scheme)
    if backend is None:
        raise RegistrationError(
            f"kernel URL {url!r}: unknown scheme; expected one of {sorted(BACKENDS)}"
        )
    if parts.netloc or not parts.path.startswith("/"):
        raise RegistrationError(f"kernel URL {url!r}: expected {parts.scheme}:///absolute/path")
    return backend(parts.path)
