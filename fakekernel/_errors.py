"""The fake kernel's own error (apart from the kernel's errnos): a lab that is invalid.

A module of its own so that the client raises it without importing the lab loader and
the whole model behind it (a service on ``kernel+unix://`` only needs the client).
"""

from __future__ import annotations

__all__ = ["LabError"]


class LabError(ValueError):
    """The lab description is invalid; the message says where and why."""
