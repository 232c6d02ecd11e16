"""Serving gRPC on a Unix socket without ever touching a socket that is not ours.

Every authenticated socket of the node (the plugin services' endpoints, the
coordinator program's) is bound by these functions:

- the directory is created 0700; an existing one must be ours with no group/other bits;
- a socket left at the public path is removed only if nothing answers on it;
- the server binds a staging name in a directory of its own (created 0700 inside the
  socket directory), the socket is chmod 0600 and hard-linked to its public name, and
  the staging name and directory are removed. Nobody else can reach the socket before
  it is 0600 (its directory is ours, 0700), so the process's umask is never changed:
  that is process-wide, and a file another thread created meanwhile would get it. gRPC
  unlinks whatever sits at the address it binds, and again at shutdown: binding the
  staging name means gRPC never touches the public path, so a socket that appeared
  there since the stale check is not replaced, and a successor's socket at the same
  path is not removed when this server stops;
- at stop only the file this server linked (by inode) is removed.

The bearer-token check every such server makes first is here too, in constant time.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import socket
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import grpc

from plugins.sdk._errors import RegistrationError

__all__ = [
    "MAX_SOCKET_PATH",
    "STAGING_EXTRA",
    "bearer_token_matches",
    "bind_linked_socket",
    "check_socket_paths",
    "clear_stale_socket",
    "prepare_socket_dir",
    "remove_own_socket",
    "socket_path_fits",
]

logger = logging.getLogger("plugins.sdk.host")

_PROBE_TIMEOUT_S: Final = 1.0

MAX_SOCKET_PATH: Final = 107
"""Bytes of a Unix socket's path: AF_UNIX's sun_path is 108 with the terminating NUL."""
STAGING_EXTRA: Final = 10
"""Bytes the staging directory adds to a socket path (".<8 hex>/"): sun_path must hold it."""


def socket_path_fits(path: Path) -> bool:
    """True if ``path`` can be bound through its staging name (``bind_linked_socket``)."""
    return len(os.fsencode(path)) + STAGING_EXTRA <= MAX_SOCKET_PATH


def check_socket_paths(directory: Path, names: Iterable[str]) -> None:
    """Refuse, naming the first, a socket of ``names`` whose path in ``directory`` is too
    long to bind. Creates nothing: a program calls it before its journal or any file."""
    for name in names:
        path = directory / name
        if not socket_path_fits(path):
            raise RegistrationError(
                f"socket directory {directory}: socket path {path} is "
                f"{len(os.fsencode(path))} bytes; at most {MAX_SOCKET_PATH - STAGING_EXTRA} "
                f"fit (a Unix socket path holds {MAX_SOCKET_PATH}, and binding adds "
                f"{STAGING_EXTRA} for a staging name)"
            )


def bearer_token_matches(context: grpc.ServicerContext, token: bytes) -> bool:
    """True if the call carries exactly one ``authorization: Bearer <token>``."""
    values = [v for k, v in context.invocation_metadata() if k.lower() == "authorization"]
    if len(values) != 1:
        return False
    value = values[0]
    raw = value.encode("utf-8", "replace") if isinstance(value, str) else value
    scheme, sep, credential = raw.partition(b" ")
    if not sep or scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(credential, token)


def prepare_socket_dir(d: Path) -> None:
    """Create ``d`` 0700, or check that the existing ``d`` is ours and private."""
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(d, 0o700)  # mkdir's mode is filtered through the umask
        st = os.lstat(d)
    except OSError as exc:
        raise RegistrationError(f"socket directory {d}: cannot create: {exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RegistrationError(f"socket directory {d}: exists and is not a directory")
    if st.st_uid != os.geteuid():
        raise RegistrationError(
            f"socket directory {d}: owned by uid {st.st_uid}, not the service uid "
            f"{os.geteuid()}; refusing to serve from it"
        )
    if st.st_mode & 0o077:
        raise RegistrationError(
            f"socket directory {d}: mode {stat.S_IMODE(st.st_mode):04o} gives group/other "
            "access; it must be 0700"
        )


def clear_stale_socket(path: Path, *, serving: str = "service") -> None:
    """Remove a socket left at ``path`` by a process that is gone; refuse a live one.

    ``serving`` names what would be answering, for the refusal: "another service is
    serving PATH".
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise RegistrationError(f"{path} exists and is not a socket; refusing to replace it")
    if _answers(path):
        raise RegistrationError(f"another {serving} is serving {path}")
    logger.info("removing stale socket %s", path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def bind_linked_socket(server: grpc.Server, path: Path, *, serving: str = "service") -> int:
    """Bind ``server`` (not yet started) to ``path`` through a staging name; its inode.

    The socket is 0600. A file that appeared at ``path`` meanwhile is never replaced:
    "PATH appeared while starting; another <serving> may be serving it". The process's
    umask is left as it is (the module's docstring says why that is safe).
    """
    # os.urandom, as secrets.token_hex would use: secrets imports random (~2 ms of CPU at
    # each service start) for nothing else.
    staging_dir = path.parent / f".{os.urandom(4).hex()}"
    staging = staging_dir / path.name
    os.mkdir(staging_dir, 0o700)  # the umask can only narrow it
    try:
        server.add_insecure_port(f"unix:{staging}")
        os.chmod(staging, 0o600)
        try:
            os.link(staging, path)
        except FileExistsError:
            raise RegistrationError(
                f"{path} appeared while starting; another {serving} may be serving it"
            ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)
        # Not over the error that brought us here: an empty dot directory left behind
        # is harmless, and the next start makes a directory of its own.
        with contextlib.suppress(OSError):
            os.rmdir(staging_dir)
    return os.lstat(path).st_ino


def remove_own_socket(path: Path, inode: int | None) -> None:
    """Unlink ``path`` if it is still the socket this server linked (``inode``)."""
    with contextlib.suppress(FileNotFoundError):
        if inode is not None and os.lstat(path).st_ino == inode:
            os.unlink(path)


def _answers(path: Path) -> bool:
    """True if a process accepts connections on the Unix socket at ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_TIMEOUT_S)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except TimeoutError:
        return True  # a full backlog still means someone is listening
    except OSError as exc:
        raise RegistrationError(f"cannot tell whether {path} is in use: {exc}") from None
    finally:
        probe.close()
    return True
