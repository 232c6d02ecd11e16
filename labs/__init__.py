"""The test kit: labs (where a node's kernel is) and nodes (a lab, services, a crash plan).

One abstraction for every tier. A suite (the rig, the conformance suite, end-to-end
tests, benchmarks, a plugin author's own tests) builds a ``Node`` from a ``Lab``:

    with Node(FakeModelLab(), tmp_path) as node:          # services in this process
        node.coordinator.prepare(...)
        node.crash_services()                             # abandon, recover from journals

    with Node(FakeServerLab(), tmp_path, processes=True) as node:   # real programs
        node.processes.crash(service="networkplugin-links")          # SIGKILL, restart
"""

from fakekernel import LabKernel

from ._agent_lab import AgentLab, AgentRootKernel, AgentSession
from ._console import AgentUnavailable
from ._lab import SANDBOX, Lab
from ._node import Node
from ._process import METRICS_DIR_ENV, ServiceProcess
from ._readiness import ReadyListener
from ._seed import DEFAULT_SEED, SEED_ENV, start_state_seed
from ._services import (
    PROJECT_SERVICES,
    CoordinatorProcess,
    InProcessServices,
    LocalClient,
    ProcessServices,
    ServiceSpec,
    project_descriptors,
    service_of,
)
from ._traffic import PingStatus, TrafficSide, traffic_missing
from .emulated_host import EmulatedHost
from .fake import DEFAULT_LAB, FakeModelLab, FakeServerLab
from .host import HostLab
from .netns import NetnsLab
from .remote_services import OnHost, RemoteHost, RemoteServiceProcess, RemoteServices
from .vm import VmLab

__all__ = [
    "DEFAULT_LAB",
    "DEFAULT_SEED",
    "METRICS_DIR_ENV",
    "PROJECT_SERVICES",
    "SANDBOX",
    "SEED_ENV",
    "AgentLab",
    "AgentRootKernel",
    "AgentSession",
    "AgentUnavailable",
    "CoordinatorProcess",
    "EmulatedHost",
    "FakeModelLab",
    "FakeServerLab",
    "HostLab",
    "InProcessServices",
    "Lab",
    "LabKernel",
    "LocalClient",
    "NetnsLab",
    "Node",
    "OnHost",
    "PingStatus",
    "ProcessServices",
    "ReadyListener",
    "RemoteHost",
    "RemoteServiceProcess",
    "RemoteServices",
    "ServiceProcess",
    "ServiceSpec",
    "TrafficSide",
    "VmLab",
    "project_descriptors",
    "service_of",
    "start_state_seed",
    "traffic_missing",
]
