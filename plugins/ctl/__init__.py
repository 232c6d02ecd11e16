"""``networkplugin-ctl``: inspect and reconcile a node's NetworkPlugin services, and see and
remove the coordinator's applications.

Reads each service's journal from a verified private copy (never in place, never for
writing), scans the kernel for objects carrying our ownership evidence, and undoes
leaks only as journaled cleanups through the SDK's runner. docs/operating.md has the
commands, examples and exit codes. The pieces are public for tools and tests: load a
node config (``NodeConfig``, ``load_node``), take a verified copy of a journal
(``snapshot``), read it (``read_contents``) and compare it with a kernel (``findings``,
``digest``). The coordinator is asked over its socket, never read behind its back.
"""

from ._cli import PROG, console_main, main
from ._contents import Contents, read_contents
from ._errors import CtlError, Exit
from ._journal import Snapshot, snapshot
from ._node import DEFAULT_NODE_CONFIG, NODE_ENV, NodeConfig, Service, load_node
from ._reconcile import Finding, digest, findings
from ._views import operation_details, operation_rows, quarantine_rows

__all__ = [
    "DEFAULT_NODE_CONFIG",
    "NODE_ENV",
    "PROG",
    "Contents",
    "CtlError",
    "Exit",
    "Finding",
    "NodeConfig",
    "Service",
    "Snapshot",
    "console_main",
    "digest",
    "findings",
    "load_node",
    "main",
    "operation_details",
    "operation_rows",
    "quarantine_rows",
    "read_contents",
    "snapshot",
]
