"""The one place where failures of the Linux backend become ``KernelError``.

Every public method of ``LinuxKernel`` runs under ``kernel_errors``: a netlink
error answer (``NetlinkError``, raised by our transport with the shape of pyroute2's,
which the backend no longer imports: _decode.py says why) and a failed system call
(``OSError``) both leave as a
``KernelError`` carrying the same errno the kernel gave. Nothing else in the
package converts errors, so the errno a caller sees is always the kernel's.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from .._types import KernelError

P = ParamSpec("P")
R = TypeVar("R")


class NetlinkError(Exception):
    """An error answer of the kernel: its errno (``code``) and a message (the extack's
    when it sent one). Inside the package only: ``kernel_errors`` turns it into
    ``KernelError``."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(code, message or os.strerror(code))
        self.code = code


@contextmanager
def kernel_errors(what: str) -> Iterator[None]:
    """Translate NetlinkError/OSError raised inside the block into KernelError."""
    try:
        yield
    except KernelError:
        raise
    except NetlinkError as exc:
        code = int(exc.code)
        detail = exc.args[1] if len(exc.args) > 1 and exc.args[1] else os.strerror(code)
        raise KernelError(code, f"{what}: {detail}") from exc
    except OSError as exc:
        code = exc.errno if exc.errno is not None else errno.EIO
        detail = exc.strerror or str(exc) or os.strerror(code)
        where = f" ({exc.filename})" if exc.filename else ""
        raise KernelError(code, f"{what}: {detail}{where}") from exc


def translated(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a public method so that it raises only KernelError (see kernel_errors)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with kernel_errors(fn.__name__):
            return fn(*args, **kwargs)

    return wrapper


def netlink_error(code: int, message: str) -> NetlinkError:
    """An error the kernel would answer, raised before a request is sent (same errno)."""
    return NetlinkError(code, message)
