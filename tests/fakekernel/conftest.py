from __future__ import annotations

import pytest

from fakekernel import FakeKernelModel
from plugins.kernel import NsRef

from .helpers import hardware


@pytest.fixture
def m() -> FakeKernelModel:
    model = FakeKernelModel()
    hardware(model)
    return model


@pytest.fixture
def host(m: FakeKernelModel) -> NsRef:
    return m.host_namespace()


@pytest.fixture
def pod(m: FakeKernelModel) -> NsRef:
    return m.add_namespace("pod")
