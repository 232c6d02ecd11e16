"""The VM lab's guest agent: the guest's real kernel served over one byte stream.

Under TCG one ``ip`` exec costs about a second in the guest and Python starts slowly,
so the guest runs one long-lived process, this agent, and only kernel calls cross into
it. It speaks the fake kernel server's wire protocol (``fakekernel/server.py``: one JSON
object per line each way, the same method names, parameters and error kinds), so the
host talks to it with ``FakeKernelClient`` unchanged. The server itself is tied to the
model (its parameter types come from ``FakeKernelModel``'s signatures, it listens on a
Unix socket, it can replace its model), so this module serves any ``LabKernel``, taking
the parameter types from the ``LabKernel`` protocol, over a stream it is handed: in the
guest, a virtio-serial port whose host end is a Unix socket of QEMU's.

Besides the kernel and lab methods, the agent answers what only the guest can see:
``release`` (the guest kernel's ``uname -r``), ``sriov`` (a PF's ``sriov_totalvfs`` and
``sriov_numvfs``) and ``set_sriov_numvfs`` (which returns once the VFs' netdevs exist).

The guest's own root namespace is the lab's node (it holds the emulated igb PFs, as a
node holds its NICs), pinned beside the lab's other namespaces under ``/run``; the
kernel the agent serves is a ``labs.netns.NetnsKernel`` over it, so named namespaces and
the snapshot are exactly the netns lab's, computed in the guest.

Run in the guest as ``python -m labs.kernel_agent --port dranp.kernel``; it prints
``READY`` once serving, and exits (and with it the guest) when the host hangs up.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, get_type_hints

from fakekernel.server import ADMIN_METHODS, KERNEL_METHODS, ProtocolError, answer, decode_params

from ._guest import GUEST_METHODS, GUEST_PARAMS, GuestSide
from ._lab import LabKernel

__all__ = ["PORT_NAME", "READY", "GuestSide", "KernelAgent", "main"]

PORT_NAME = "dranp.kernel"  # the virtserialport's name: /dev/virtio-ports/<name> in the guest
READY = "dranp-kernel-agent ready"
SERVED_METHODS = (*KERNEL_METHODS, *ADMIN_METHODS)


@functools.cache
def _param_types(method: str) -> dict[str, Any]:
    function = getattr(LabKernel, method)
    hints = get_type_hints(function)
    params = inspect.signature(function).parameters
    return {name: hints[name] for name in params if name != "self"}


class KernelAgent:
    """Answers the fake kernel protocol's requests with ``kernel`` (any ``LabKernel``)
    and, for the guest-only methods, with ``guest`` (None: they are unknown)."""

    def __init__(self, kernel: LabKernel, guest: GuestSide | None = None) -> None:
        self.kernel = kernel
        self.guest = guest

    def handle(self, line: bytes) -> dict[str, Any]:
        return answer(line, self.call, "kernel agent")

    def call(self, method: str, params: dict[str, Any]) -> Any:
        if method in GUEST_METHODS and self.guest is not None:
            return self._guest_call(method, params)
        if method not in SERVED_METHODS:
            raise ProtocolError(f"unknown method {method!r}")
        function = getattr(self.kernel, method)
        return function(**decode_params(method, params, _param_types(method), function))

    def _guest_call(self, method: str, params: dict[str, Any]) -> Any:
        assert self.guest is not None
        shape = GUEST_PARAMS[method]
        if set(params) != set(shape) or any(
            type(params[name]) is not kind for name, kind in shape.items()
        ):
            wanted = ", ".join(f"{n} ({k.__name__})" for n, k in shape.items()) or "nothing"
            raise ProtocolError(f"{method} takes {wanted}")
        handler: Callable[..., Any] = getattr(self.guest, method)
        return handler(**params)

    def serve(self, incoming: BinaryIO, outgoing_fd: int) -> None:
        """Answer each request line until the stream ends (the host hung up)."""
        for line in incoming:
            if not line.strip():
                continue
            _write_all(outgoing_fd, json.dumps(self.handle(line)).encode() + b"\n")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def guest_kernel(pin_root: Path = Path("/run")) -> tuple[LabKernel, GuestSide]:
    """The guest's root namespace as the lab's node (pinned as ``node``), an empty
    ``wire`` namespace beside it (``NetnsKernel`` watches a namespace die through it)."""
    from plugins.kernel.linux.netns import (
        MS_BIND,
        check_call,
        create_namespace,
        libc,
        namespace_handle,
    )

    from .netns import NetnsKernel

    directory = Path(tempfile.mkdtemp(prefix="dranp-vm-", dir=pin_root))
    node_pin = directory / "node"
    node_pin.touch(mode=0o444)
    check_call(
        libc().mount(b"/proc/self/ns/net", bytes(node_pin), b"none", MS_BIND, None),
        f"mount {node_pin}",
    )
    wire = create_namespace(directory, "wire")
    kernel = NetnsKernel(directory, namespace_handle(node_pin), wire)
    return kernel, GuestSide(str(node_pin))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labs.kernel_agent", description=__doc__)
    parser.add_argument("--port", default=PORT_NAME, help="virtio-serial port name")
    args = parser.parse_args(argv)
    kernel, guest = guest_kernel()
    agent = KernelAgent(kernel, guest)
    fd = os.open(f"/dev/virtio-ports/{args.port}", os.O_RDWR | os.O_CLOEXEC)
    with os.fdopen(os.dup(fd), "rb") as incoming:
        print(READY, flush=True)
        agent.serve(incoming, fd)
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
