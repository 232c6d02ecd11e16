"""The ``Kernel`` protocol on real Linux (rtnetlink through pyroute2's codec).

``LinuxKernel`` is the backend; ``netns`` creates and deletes named network
namespaces for tests and labs.
"""

from .kernel import DEFAULT_NAMESPACE_DIRS, UNKNOWN_NAMESPACE_INODE, LinuxKernel

__all__ = ["DEFAULT_NAMESPACE_DIRS", "UNKNOWN_NAMESPACE_INODE", "LinuxKernel"]
