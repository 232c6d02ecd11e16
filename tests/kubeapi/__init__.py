"""Tests of plugins.coordinator.kubeapi against the test kit's FakeAPIServer, and of the
fake itself with lightkube unmodified; shared builders here (no conftest: fixtures are
per file, each attaching the server's request log to the test's report)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from harness.k8s.apiserver import FakeAPIServer

DRIVER = "dra.networking"
NODE = "node-1"


@contextlib.contextmanager
def served(request: pytest.FixtureRequest) -> Iterator[FakeAPIServer]:
    """A FakeAPIServer for one test; its request log goes in the test's report."""
    with FakeAPIServer() as api:
        try:
            yield api
        finally:
            request.node.add_report_section(
                "teardown", "apiserver requests", api.request_log_text()
            )


def attachment(topology: str = "t1", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "dra.networking/v1alpha1",
        "kind": "NetworkAttachment",
        "topology": topology,
        **extra,
    }


def result(device: str, request: str = "net", driver: str = DRIVER, **extra: Any) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": NODE, "device": device, **extra}


def config(
    parameters: Mapping[str, Any],
    *,
    source: str = "FromClaim",
    driver: str = DRIVER,
    requests: Sequence[str] | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": driver, "parameters": parameters},
    }
    if requests is not None:
        entry["requests"] = list(requests)
    return entry


def claim_doc(
    results: Sequence[Mapping[str, Any]] = (),
    configs: Sequence[Mapping[str, Any]] = (),
    *,
    name: str = "claim-a",
    namespace: str = "pods",
    allocated: bool = True,
    pods: Sequence[str] = ("pod-uid-1",),
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "reservedFor": [
            {"resource": "pods", "name": f"pod-{i}", "uid": u} for i, u in enumerate(pods)
        ]
    }
    if allocated:
        status["allocation"] = {
            "devices": {"results": list(results or [result("vf0")]), "config": list(configs)}
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "vf"}}]}},
        "status": status,
    }
