"""The reusable conformance suite: run it against any logical plugin registration.

    from conformance import CHECKS, Target, run_all
    run_all(my_target, tmp_path)            # every check; failures raise ConformanceError

Or over the wire, against any plugin program a target file describes (no Python needed):

    from conformance import load_wire_target, run_wire
    verdicts = run_wire(load_wire_target("target.yaml"))   # one Verdict per wire check

    python -m conformance --target target.yaml              # the same, from a shell

Each check is written once (``conformance.suite``) against a plugin-under-test driver
(``conformance.driver``), with two drivers: in process (``InProcessDriver``: the SDK's
crash points) and over the wire (``WireDriver``: SIGKILL at the kernel calls the fake
kernel can hold, journal damage on the target's state files). See docs/conformance.md
for what each check proves, what each driver sees, and how to describe a ``Target`` or
a wire target file.
"""

from .checks import CHECKS, ConformanceError, NotApplicable, run_all
from .driver import Boundary, Driver, PluginUnderTest, Refused
from .inprocess import InProcessDriver
from .node import TargetNode
from .suite import SUITE
from .target import Host, LabFactory, Target, fake_lab, plant_foreign, project_targets
from .wire_checks import MODES, WIRE_CHECKS, Verdict, run_check, run_wire
from .wire_driver import WireDriverError, WireLabs, WireSession
from .wire_plugin import WireDriver
from .wire_target import WireTarget, WireTargetError, load_wire_target

__all__ = [
    "CHECKS",
    "MODES",
    "SUITE",
    "WIRE_CHECKS",
    "Boundary",
    "ConformanceError",
    "Driver",
    "Host",
    "InProcessDriver",
    "LabFactory",
    "NotApplicable",
    "PluginUnderTest",
    "Refused",
    "Target",
    "TargetNode",
    "Verdict",
    "WireDriver",
    "WireDriverError",
    "WireLabs",
    "WireSession",
    "WireTarget",
    "WireTargetError",
    "fake_lab",
    "load_wire_target",
    "plant_foreign",
    "project_targets",
    "run_all",
    "run_check",
    "run_wire",
]
