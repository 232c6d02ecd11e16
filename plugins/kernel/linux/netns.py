"""Named network namespaces for tests and labs, like ``ip netns add/del``.

A named namespace is a bind mount of a namespace file onto an empty file in a
directory the caller chooses (never a default such as /var/run/netns). The new
namespace is made by a throwaway thread that calls ``unshare(CLONE_NEWNET)`` and
bind-mounts its own ``/proc/thread-self/ns/net``; the thread then ends, so no
thread that runs other code ever leaves its namespace (see ``_nsfs``).

Unlike ``ip netns add`` this does not turn the directory into a shared mount
point, so the mounts do not propagate into mount namespaces created earlier;
use a directory that the consumers of the namespace can see.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from plugins.sdk import NamespaceHandle

from .._types import kernel_error
from ._errors import kernel_errors
from ._nsfs import (
    CLONE_NEWNET,
    THREAD_NETNS,
    check_call,
    libc,
    read_boot_id,
    run_in_netns,
    run_on_throwaway_thread,
)

# The low-level pieces are public too: benchmarks and labs enter namespaces the same way.
__all__ = [
    "CLONE_NEWNET",
    "THREAD_NETNS",
    "check_call",
    "create_namespace",
    "delete_namespace",
    "libc",
    "namespace_handle",
    "run_in_netns",
]

MS_BIND = 0x1000
MNT_DETACH = 0x2


def namespace_handle(path: str | os.PathLike[str]) -> NamespaceHandle:
    """The handle of the namespace mounted at ``path``: (path, st_dev, st_ino, boot id)."""
    with kernel_errors("namespace_handle"):
        st = os.stat(path)
        return NamespaceHandle(os.fspath(path), st.st_dev, st.st_ino, read_boot_id())


def create_namespace(directory: str | os.PathLike[str], name: str) -> NamespaceHandle:
    """Create a new network namespace mounted at ``directory/name``.

    EEXIST if that name is taken, EINVAL for a name that is not one path component.
    """
    with kernel_errors("create_namespace"):
        if not name or "/" in name or name in (".", ".."):
            raise kernel_error(errno.EINVAL, f"invalid namespace name {name!r}")
        Path(directory).mkdir(mode=0o755, parents=True, exist_ok=True)
        path = os.path.join(os.fspath(directory), name)
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))
        try:
            run_on_throwaway_thread(lambda: _unshare_and_mount(path), name="netns-create")
        except BaseException:
            os.unlink(path)
            raise
        return namespace_handle(path)


def _unshare_and_mount(path: str) -> None:
    lib = libc()
    check_call(lib.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    source = THREAD_NETNS.encode()  # this thread's new namespace
    check_call(lib.mount(source, path.encode(), b"none", MS_BIND, None), f"mount {path}")


def delete_namespace(path: str | os.PathLike[str], *, missing_ok: bool = False) -> None:
    """Unmount and remove a named namespace (``ip netns del``).

    The namespace itself dies when nothing else holds it (processes, open
    descriptors, sockets); its virtual links die with it, devices return to the
    initial namespace.
    """
    with kernel_errors("delete_namespace"):
        target = os.fspath(path)
        if missing_ok and not os.path.lexists(target):
            return
        if libc().umount2(target.encode(), MNT_DETACH) != 0:
            code = ctypes.get_errno()
            if code != errno.EINVAL:  # EINVAL: not mounted (a failed create); still unlink
                raise OSError(code, os.strerror(code), target)
        os.unlink(target)
