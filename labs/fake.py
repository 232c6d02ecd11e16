"""The fake tier's two labs: the kernel model in this process, or behind its server.

``FakeModelLab`` keeps the model in the test process, so services hosted in-process can
be crashed at any boundary thousands of times a run. ``FakeServerLab`` runs the model in
its own process behind a Unix socket (``kernel+unix://PATH``): real service processes reach it
like a node's services reach the kernel, and it outlives any of them.

Both start from a random state, the same for the same seed (``RIG_SEED``, see
``labs._seed``), and every pod namespace gets an interface of its own, so a
restore bug cannot hide behind the kernel's defaults.
"""

from __future__ import annotations

import functools
import logging
import pickle
import shutil
import tempfile
from pathlib import Path

from fakekernel.client import FakeKernelClient, FakeKernelProcess
from fakekernel.lab import (
    build_model,
    load_lab,
    parse_lab_yaml,
    plant_pod_interface,
    randomize_start_state,
)
from fakekernel.model import FakeKernelModel
from plugins.kernel import NsRef

from ._lab import Lab
from ._seed import start_state_seed

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LAB = REPO / "fakekernel" / "labs" / "default.yaml"
log = logging.getLogger(__name__)


class FakeModelLab(Lab):
    """The fake kernel model in this process (``randomize=False``: the lab file as written)."""

    tier = "fake"

    def __init__(
        self,
        lab: Path = DEFAULT_LAB,
        *,
        start_seed: int | None = None,
        randomize: bool = True,
        model: FakeKernelModel | None = None,
    ) -> None:
        """``start_seed``: the seed of the starting state (None: the rig's, RIG_SEED).
        ``model``: a model the caller already built (it is used as it is)."""
        self.start_seed = start_state_seed() if start_seed is None else start_seed
        self.randomized = randomize and model is None
        if model is not None:
            self.model = model
        else:
            try:
                text = lab.read_text()
            except OSError:
                text = None  # load_lab says why, as a LabError
            seed = self.start_seed if self.randomized else None
            self.model = (
                load_lab(lab) if text is None else pickle.loads(_start_state(str(lab), text, seed))
            )
        if self.randomized:
            log.info("lab %s starts from random state seed %d", lab.name, self.start_seed)

    @property
    def kernel(self) -> FakeKernelModel:
        return self.model

    def furnish_sandbox(self, ns: NsRef) -> None:
        if self.randomized:
            plant_pod_interface(self.model, ns, self.start_seed)


@functools.lru_cache(maxsize=32)
def _start_state(path: str, text: str, seed: int | None) -> bytes:
    """The model of lab file ``path`` (whose content is ``text``: an edited file is a new
    key) built and, with a ``seed``, randomized, as a pickle: each lab unpickles its own
    copy, equal field for field to one built afresh. The rig builds a lab for each of its
    thousands of crash runs, and parsing and validating the YAML, then randomizing, took
    ~5 ms a lab, unpickling 0.14 ms."""
    model = build_model(parse_lab_yaml(text, path), path)  # load_lab's steps, on ``text``
    if seed is not None:
        randomize_start_state(model, seed)
    return pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)


class FakeServerLab(Lab):
    """The fake kernel in a server process, reached over ``kernel+unix://SOCKET``."""

    tier = "fake"

    def __init__(self, lab: Path = DEFAULT_LAB, *, start_seed: int | None = None) -> None:
        self.start_seed = start_state_seed() if start_seed is None else start_seed
        # Unix socket paths are short (107 bytes): the socket lives in a short /tmp dir.
        self.short_dir = Path(tempfile.mkdtemp(prefix="lab-", dir="/tmp"))
        self.socket = self.short_dir / "kernel.sock"
        self.process = FakeKernelProcess(self.socket, lab)
        self.process.start()
        self.client = FakeKernelClient(self.socket)
        randomize_start_state(self.client, self.start_seed)
        log.info("fake lab starts from random state seed %d", self.start_seed)

    @property
    def kernel(self) -> FakeKernelClient:
        return self.client

    @property
    def kernel_url(self) -> str:
        return f"kernel+unix://{self.socket}"

    def furnish_sandbox(self, ns: NsRef) -> None:
        plant_pod_interface(self.client, ns, self.start_seed)

    def close(self) -> None:
        self.client.close()
        self.process.stop()
        shutil.rmtree(self.short_dir, ignore_errors=True)
