"""Linux's naming facts, once: the interface-name buffer, PCI function addresses, and
the kernel's own rule for interface names. The SDK checks names in requests with them;
the kernel layer and its backends re-export them from ``plugins.kernel``."""

from __future__ import annotations

import re

IFNAMSIZ = 16
"""Linux's interface-name buffer, NUL included: a name is 1 to ``IFNAMSIZ - 1`` bytes."""

PCI_ADDRESS = re.compile(r"\A[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]\Z")
"""A PCI function as the kernel names it (``pci_name``: ``"%04x:%02x:%02x.%d"``).

The domain is printed with a *minimum* width of four hex digits: domains above 0xffff
exist (Intel VMD puts its devices in 0x10000 and up) and are five or more digits, up
to the eight of a 32-bit domain number. The slot is five bits (00-1f), the function
three (0-7); sysfs prints lowercase hex. Anchored with ``\\Z``, not ``$``, so
``match`` refuses a trailing newline.
"""

# isspace() in the kernel's C locale; Python's str.isspace() also counts \x1c-\x1f.
_C_SPACE = frozenset(" \t\n\v\f\r")


def kernel_name_problem(name: str) -> str | None:
    """Why Linux refuses ``name`` as an interface name, or None if it accepts it.

    The kernel's own rule (``dev_valid_name``, net/core/dev.c): 1 to ``IFNAMSIZ - 1``
    bytes, not ``.`` or ``..``, no ``/``, ``:`` or whitespace.
    """
    if not 1 <= len(name.encode()) < IFNAMSIZ:
        return f"{name!r} must be 1..{IFNAMSIZ - 1} bytes"
    if name in (".", ".."):
        return f"{name!r} is reserved"
    if any(c in "/:" or c in _C_SPACE for c in name):
        return f"{name!r} contains '/', ':' or whitespace"
    return None
