"""Maps the kit's packages into its sdist and wheel from where they live.

In the repository they sit at its top, one level up from this folder (the product's
`plugins` beside them); in the sdist they sit at its root, so a wheel built from the sdist
finds them there. An editable install maps nothing: `dev-mode-dirs` puts the repository's
top on sys.path instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGES = ("harness", "labs", "conformance", "fakekernel")


class KitPackages(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        here = Path(self.root)
        top = here if (here / PACKAGES[0]).is_dir() else here.parent
        for name in PACKAGES:
            build_data["force_include"][str(top / name)] = name
