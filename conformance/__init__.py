"""The reusable conformance suite: run it against any logical plugin registration.

    from conformance import CHECKS, Target, run_all
    run_all(my_target, tmp_path)            # every check; failures raise ConformanceError

See docs/conformance.md for what each check proves and how to describe a ``Target``.
"""

from .checks import CHECKS, ConformanceError, NotApplicable, run_all
from .node import TargetNode
from .target import Host, LabFactory, Target, fake_lab, plant_foreign, project_targets

__all__ = [
    "CHECKS",
    "ConformanceError",
    "Host",
    "LabFactory",
    "NotApplicable",
    "Target",
    "TargetNode",
    "fake_lab",
    "plant_foreign",
    "project_targets",
    "run_all",
]
