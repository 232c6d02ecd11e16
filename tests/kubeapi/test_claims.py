"""ClaimResolver: the claim the kubelet named, allocated for us, and its topology."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client

from harness.k8s.apiserver import FakeAPIServer
from plugins.coordinator import ClaimDevice, ClaimProblem, ClaimSourceUnavailable
from plugins.coordinator.kubeapi import (
    AllocatedResult,
    ApiUnavailable,
    ClaimError,
    ClaimResolver,
    make_client,
    parse_attachment_config,
)
from tests.kubeapi import DRIVER, NODE, attachment, claim_doc, config, result, served


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeAPIServer]:
    with served(request) as server:
        yield server


@pytest.fixture
def client(api: FakeAPIServer) -> Iterator[Client]:
    with make_client(DRIVER, server=api.url, timeout=5) as c:
        yield c


def put(api: FakeAPIServer, doc: dict[str, Any]) -> str:
    return str(api.put_claim(doc)["metadata"]["uid"])


def test_a_claim_resolves_to_our_results_and_its_topology(
    api: FakeAPIServer, client: Client
) -> None:
    doc = claim_doc(
        [
            result("vf0", shareID="7f3c", adminAccess=True),
            result("gpu0", request="gpu", driver="gpu.example.com"),
            result("vf1", request="net2"),
        ],
        [config(attachment("sriov-pair"), source="FromClass"), config(attachment("sriov-pair"))],
        pods=("pod-a", "pod-b"),
    )
    uid = put(api, doc)
    claim = ClaimResolver(client, DRIVER).resolve("pods", "claim-a", uid)
    assert claim.topology == "sriov-pair"
    assert claim.results == (
        AllocatedResult("net", NODE, "vf0", "7f3c", True),
        AllocatedResult("net2", NODE, "vf1"),
    )
    assert claim.pods == ("pod-a", "pod-b")
    kube = claim.kube_claim()
    assert kube.devices == (
        ClaimDevice("net", NODE, "vf0", "7f3c"),
        ClaimDevice("net2", NODE, "vf1"),
    )
    assert (kube.uid, kube.topology, kube.pods) == (uid, "sriov-pair", ("pod-a", "pod-b"))
    assert [(r.method, r.path) for r in api.requests] == [
        ("GET", "/apis/resource.k8s.io/v1/namespaces/pods/resourceclaims/claim-a")
    ]


def test_a_replaced_claim_is_refused_naming_both_uids(api: FakeAPIServer, client: Client) -> None:
    uid = put(api, claim_doc(configs=[config(attachment())]))
    new_uid = api.swap_claim_uid("pods", "claim-a")
    with pytest.raises(ClaimError, match=f"was replaced: expected uid {uid}, found {new_uid}"):
        ClaimResolver(client, DRIVER).resolve("pods", "claim-a", uid)


def test_a_deleted_claim_is_a_claim_error(api: FakeAPIServer, client: Client) -> None:
    uid = put(api, claim_doc(configs=[config(attachment())]))
    api.delete_claim("pods", "claim-a")
    with pytest.raises(ClaimError, match="no longer exists"):
        ClaimResolver(client, DRIVER).resolve("pods", "claim-a", uid)


def _bad_claims() -> list[Any]:
    cfg = config(attachment())
    return [
        pytest.param(claim_doc(allocated=False), "is not allocated", id="no-allocation"),
        pytest.param(
            claim_doc([result("gpu0", driver="gpu.example.com")], [cfg]),
            "has no device allocated by driver 'dra.networking'",
            id="no-result-for-us",
        ),
        pytest.param(claim_doc(configs=[]), "no NetworkAttachment config", id="no-config"),
        pytest.param(
            claim_doc(configs=[config(attachment(), driver="other.example.com")]),
            "no NetworkAttachment config",
            id="config-of-another-driver-only",
        ),
        pytest.param(
            claim_doc(configs=[config(attachment(), requests=["other"])]),
            "applies to request 'net'",
            id="config-for-another-request",
        ),
        pytest.param(
            claim_doc(configs=[config(attachment(mtu=9000))]),
            r"unknown keys \['mtu'\]",
            id="unknown-key",
        ),
        pytest.param(
            claim_doc(configs=[config({**attachment(), "kind": "NetworkTopology"})]),
            "kind is 'NetworkTopology', expected 'NetworkAttachment'",
            id="wrong-kind",
        ),
        pytest.param(
            claim_doc(configs=[config({**attachment(), "apiVersion": "dra.networking/v1"})]),
            "apiVersion is 'dra.networking/v1', expected 'dra.networking/v1alpha1'",
            id="wrong-api-version",
        ),
        pytest.param(
            claim_doc(
                configs=[
                    config({"apiVersion": "dra.networking/v1alpha1", "kind": "NetworkAttachment"})
                ]
            ),
            "topology is missing",
            id="missing-topology",
        ),
        pytest.param(
            claim_doc(configs=[config(attachment(topology=7))]),  # type: ignore[arg-type]
            "topology must be a non-empty string, got 7",
            id="non-string-topology",
        ),
        pytest.param(
            claim_doc(
                configs=[config(attachment("t1"), source="FromClass"), config(attachment("t2"))]
            ),
            r"configs name different topologies: 't1' by .*config\[0\] \(FromClass\); 't2'",
            id="two-topologies",
        ),
    ]


@pytest.mark.parametrize(("doc", "message"), _bad_claims())
def test_each_claim_problem_is_a_claim_error_naming_it(
    api: FakeAPIServer, client: Client, doc: dict[str, Any], message: str
) -> None:
    uid = put(api, doc)
    with pytest.raises(ClaimError, match=message) as caught:
        ClaimResolver(client, DRIVER).resolve("pods", "claim-a", uid)
    assert "pods/claim-a" in str(caught.value)
    # the coordinator's PodNetworks sees a ClaimProblem: not retryable
    assert isinstance(caught.value, ClaimProblem)
    assert not caught.value.retryable


def test_a_config_for_a_subrequests_parent_applies(api: FakeAPIServer, client: Client) -> None:
    doc = claim_doc(
        [result("vf0", request="net/fast")],
        [config(attachment("fast"), requests=["net"]), config(attachment("x"), requests=["gpu"])],
    )
    claim = ClaimResolver(client, DRIVER).resolve("pods", "claim-a", put(api, doc))
    assert claim.topology == "fast"


def test_an_unavailable_api_server_is_retryable(api: FakeAPIServer, client: Client) -> None:
    uid = put(api, claim_doc(configs=[config(attachment())]))
    api.set_unavailable(True)
    with pytest.raises(ApiUnavailable, match="503") as caught:
        ClaimResolver(client, DRIVER).resolve("pods", "claim-a", uid)
    assert isinstance(caught.value, ClaimSourceUnavailable)
    assert caught.value.retryable
    api.set_unavailable(False)
    assert ClaimResolver(client, DRIVER).resolve("pods", "claim-a", uid).topology == "t1"


def test_an_unreachable_api_server_is_retryable(request: pytest.FixtureRequest) -> None:
    with served(request) as api:
        url = api.url
    with (
        make_client(DRIVER, server=url, timeout=2) as client,
        pytest.raises(ApiUnavailable, match="unreachable"),
    ):
        ClaimResolver(client, DRIVER).resolve("pods", "claim-a", "uid")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (["not", "an", "object"], "parameters must be an object, got list"),
        ({**attachment(), "topology": ""}, "non-empty string"),
        ({}, "apiVersion is None"),
    ],
)
def test_parse_attachment_config_names_the_problem(parameters: object, message: str) -> None:
    with pytest.raises(ClaimError, match=message):
        parse_attachment_config(parameters, "here")
    assert parse_attachment_config(attachment("ok"), "here") == "ok"
