"""``networkplugin-ctl``: inspect and reconcile a node's NetworkPlugin services.

Reads each service's journal from a verified private copy (never in place, never for
writing), scans the kernel for objects carrying our ownership evidence, and undoes
leaks only as journaled cleanups through the SDK's runner. docs/operating.md has the
commands, examples and exit codes.
"""

from ._cli import PROG, console_main, main
from ._errors import CtlError, Exit
from ._node import DEFAULT_NODE_CONFIG, Service, load_node

__all__ = [
    "DEFAULT_NODE_CONFIG",
    "PROG",
    "CtlError",
    "Exit",
    "Service",
    "console_main",
    "load_node",
    "main",
]
