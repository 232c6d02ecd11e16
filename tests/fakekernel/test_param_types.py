"""Every method the kernel wire serves has parameter types its server can resolve.

The fake kernel server and the VM lab's agent decode a call's arguments from the served
methods' type hints (``get_type_hints``), the first time each method is called. A name
the annotations use but the module imports only for type checking is a NameError there,
on the first call only: a vm:// differential run found one (``open_namespace: internal
error: NameError``), which no fake-tier test had called through the agent.
"""

from __future__ import annotations

import inspect

import pytest

from fakekernel import FakeKernelModel
from fakekernel.server import _param_types as server_param_types
from labs import LabKernel
from labs.kernel_agent import _param_types as agent_param_types


def served(cls: type) -> list[str]:
    return sorted(
        name
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    )


@pytest.mark.parametrize("method", served(LabKernel))
def test_the_agents_methods_resolve_their_parameter_types(method: str) -> None:
    assert isinstance(agent_param_types(method), dict)


@pytest.mark.parametrize("method", served(FakeKernelModel))
def test_the_fake_servers_methods_resolve_their_parameter_types(method: str) -> None:
    assert isinstance(server_param_types(method), dict)
