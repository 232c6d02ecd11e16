"""The ``Kernel`` protocol on real Linux (rtnetlink through pyroute2's codec).

``LinuxKernel`` is the backend; ``netns`` creates and deletes named network
namespaces for tests and labs.
"""

from .kernel import UNKNOWN_NAMESPACE_INODE, LinuxKernel

__all__ = ["UNKNOWN_NAMESPACE_INODE", "LinuxKernel"]
