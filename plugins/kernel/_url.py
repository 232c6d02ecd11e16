"""Kernel backends chosen by URL, built lazily (only the chosen backend is imported).

- ``linux:///run/netns/host``: real Linux over netlink; the path is the approved host
  namespace mount (never guessed), e.g. ``linux:///proc/1/ns/net`` on a plain host.
  The only scheme built in: it is what a node runs.
- Any other scheme is an entry point of the ``dra_networkplugins.kernels`` group, named
  by the scheme, whose target takes the URL's path and returns a ``Kernel``. The test kit
  (``dra-networkplugins-testkit``) registers ``kernel+unix:///abs/path/kernel.sock``: a
  kernel served over a Unix socket (the fake kernel server, or a relay to a guest's
  agent). The product never imports the test kit; the kit plugs into it.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from plugins.sdk import RegistrationError

from ._protocol import Kernel

ENTRY_POINT_GROUP = "dra_networkplugins.kernels"
BUILT_IN = "linux"


def _linux(path: str) -> Kernel:
    from plugins.kernel.linux import LinuxKernel

    return LinuxKernel(path)


def _registered(scheme: str) -> Callable[[str], Kernel] | None:
    # Imported and read only for a scheme that is not built in: a node on linux:// never
    # scans the installed distributions' metadata, nor pays ~20 ms importing the reader.
    from importlib.metadata import entry_points

    found = entry_points(group=ENTRY_POINT_GROUP, name=scheme)
    if not found:
        return None
    backend: Callable[[str], Kernel] = next(iter(found)).load()
    return backend


def known_schemes() -> list[str]:
    """Every kernel URL scheme this installation can open."""
    from importlib.metadata import entry_points

    return sorted({BUILT_IN, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})


def open_kernel(url: str) -> Kernel:
    parts = urlsplit(url)
    backend = _linux if parts.scheme == BUILT_IN else _registered(parts.scheme)
    if backend is None:
        raise RegistrationError(
            f"kernel URL {url!r}: unknown scheme; expected one of {known_schemes()} "
            f"(other schemes are entry points of the {ENTRY_POINT_GROUP!r} group)"
        )
    if parts.netloc or not parts.path.startswith("/"):
        raise RegistrationError(f"kernel URL {url!r}: expected {parts.scheme}:///absolute/path")
    return backend(parts.path)
