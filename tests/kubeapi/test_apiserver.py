"""FakeAPIServer, driven by lightkube unmodified (and by plain HTTP where lightkube would
refuse to send the request): the answers a real API server gives."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.resource_v1 import ResourcePool, ResourceSliceSpec
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimStatus, ResourceSlice
from lightkube.types import PatchType

from harness.k8s.apiserver import APPLY, MERGE, FakeAPIServer
from plugins.coordinator.kubeapi import KubeConfigError, make_client
from tests.kubeapi import DRIVER, NODE, claim_doc, result, served

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeAPIServer]:
    with served(request) as server:
        yield server


@pytest.fixture
def client(api: FakeAPIServer) -> Iterator[Client]:
    with make_client(DRIVER, server=api.url, timeout=5) as c:
        yield c


def a_slice(
    name: str, devices: int = 1, attributes: int = 1, node: str = NODE, **labels: str
) -> ResourceSlice:
    return ResourceSlice(
        metadata=ObjectMeta(name=name, labels=labels or None),
        spec=msgspec.convert(
            {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"d{i}",
                        "attributes": {f"a{j}": {"int": j} for j in range(attributes)},
                    }
                    for i in range(devices)
                ],
            },
            type=ResourceSliceSpec,
        ),
    )


def refusal(caught: pytest.ExceptionInfo[ApiError]) -> tuple[int | None, str | None]:
    return caught.value.status.code, caught.value.status.reason


def test_a_missing_object_is_a_not_found_status(client: Client) -> None:
    with pytest.raises(ApiError) as caught:
        client.get(ResourceClaim, "absent", namespace="pods")
    assert refusal(caught) == (404, "NotFound")
    assert caught.value.status.message == 'resourceclaims.resource.k8s.io "absent" not found'


def test_a_claim_reads_back_as_lightkube_types_it(api: FakeAPIServer, client: Client) -> None:
    stored = api.put_claim(claim_doc([result("vf0", shareID="s1")]))
    claim = client.get(ResourceClaim, "claim-a", namespace="pods")
    assert claim.metadata is not None
    assert claim.metadata.uid == stored["metadata"]["uid"]
    assert claim.status is not None
    assert claim.status.allocation is not None
    assert claim.status.allocation.devices is not None
    [found] = claim.status.allocation.devices.results or []
    assert (found.device, found.shareID) == ("vf0", "s1")


def test_slice_limits_are_422_invalid_with_a_message(client: Client, api: FakeAPIServer) -> None:
    with pytest.raises(ApiError) as caught:
        client.create(a_slice("too-many", devices=129))
    assert refusal(caught) == (422, "Invalid")
    assert "spec.devices: Too many: 129: must have at most 128 items" in str(
        caught.value.status.message
    )
    with pytest.raises(ApiError) as caught:
        client.create(a_slice("too-wide", attributes=33))
    assert refusal(caught) == (422, "Invalid")
    assert "must not exceed 32" in str(caught.value.status.message)
    client.create(a_slice("at-the-limits", devices=128, attributes=32))
    assert [s["metadata"]["name"] for s in api.slices()] == ["at-the-limits"]


def test_a_second_create_is_a_conflict(client: Client) -> None:
    client.create(a_slice("s"))
    with pytest.raises(ApiError) as caught:
        client.create(a_slice("s"))
    assert refusal(caught) == (409, "AlreadyExists")


def test_list_selects_by_field_and_label(client: Client) -> None:
    client.create(a_slice("a", node="n1", tier="x"))
    client.create(a_slice("b", node="n2", tier="y"))
    client.create(a_slice("c", node="n2"))

    def names(**selectors: Any) -> list[str]:
        return [
            s.metadata.name
            for s in client.list(ResourceSlice, **selectors)
            if s.metadata and s.metadata.name
        ]

    assert names() == ["a", "b", "c"]
    assert names(fields={"spec.nodeName": "n2", "spec.driver": DRIVER}) == ["b", "c"]
    assert names(fields={"spec.driver": "other"}) == []
    assert names(labels={"tier": "y"}) == ["b"]
    assert names(labels={"tier": None}) == ["a", "b"]  # exists
    with pytest.raises(ApiError) as caught:
        names(fields={"spec.pool.name": "n1"})
    assert refusal(caught) == (400, "BadRequest")


def test_generation_moves_with_the_spec_and_resource_version_with_any_change(
    api: FakeAPIServer, client: Client
) -> None:
    created = client.create(a_slice("s"))
    assert created.metadata is not None
    assert created.metadata.generation == 1
    labelled = client.patch(
        ResourceSlice, "s", {"metadata": {"labels": {"k": "v"}}}, patch_type=PatchType.MERGE
    )
    assert labelled.metadata is not None
    assert labelled.metadata.generation == 1
    assert int(labelled.metadata.resourceVersion or 0) > int(created.metadata.resourceVersion or 0)
    pool = {"spec": {"pool": {"generation": 2}}}
    bumped = client.patch(ResourceSlice, "s", pool, patch_type=PatchType.MERGE)
    assert bumped.metadata is not None
    assert bumped.metadata.generation == 2
    version = api.version
    client.patch(ResourceSlice, "s", pool, patch_type=PatchType.MERGE)
    assert api.version == version  # nothing changed, nothing written


def test_apply_creates_then_conflicts_with_another_manager_unless_forced(client: Client) -> None:
    body = a_slice("s").to_dict()
    created = client.patch(
        ResourceSlice, "s", body, patch_type=PatchType.APPLY, field_manager="one"
    )
    assert created.metadata is not None
    assert created.metadata.managedFields is not None
    assert [(m.manager, m.operation) for m in created.metadata.managedFields] == [("one", "Apply")]
    body["spec"]["pool"]["generation"] = 2
    with pytest.raises(ApiError) as caught:
        client.patch(ResourceSlice, "s", body, patch_type=PatchType.APPLY, field_manager="two")
    assert refusal(caught) == (409, "Conflict")
    assert 'conflict with "one"' in str(caught.value.status.message)
    forced = client.patch(
        ResourceSlice, "s", body, patch_type=PatchType.APPLY, field_manager="two", force=True
    )
    assert forced.spec.pool == ResourcePool(generation=2, name=NODE, resourceSliceCount=1)


def test_delete_then_get_is_not_found(client: Client) -> None:
    client.create(a_slice("s"))
    client.delete(ResourceSlice, "s")
    with pytest.raises(ApiError) as caught:
        client.get(ResourceSlice, "s")
    assert refusal(caught) == (404, "NotFound")


def test_watch_streams_what_happened_after_a_resource_version(client: Client) -> None:
    client.create(a_slice("before"))
    since = client.list(ResourceSlice)
    assert [s.metadata.name for s in since if s.metadata] == ["before"]
    client.create(a_slice("s"))
    client.create(a_slice("elsewhere", node="other"))
    client.patch(
        ResourceSlice, "s", {"metadata": {"labels": {"k": "v"}}}, patch_type=PatchType.MERGE
    )
    client.delete(ResourceSlice, "s")
    events = client.watch(
        ResourceSlice, fields={"spec.nodeName": NODE}, resource_version=since.resourceVersion
    )
    assert [
        (kind, s.metadata.name if s.metadata else None) for kind, s in itertools.islice(events, 3)
    ] == [
        ("ADDED", "s"),
        ("MODIFIED", "s"),
        ("DELETED", "s"),
    ]


def test_a_watch_from_now_lists_then_follows(api: FakeAPIServer, client: Client) -> None:
    client.create(a_slice("existing"))
    seen: list[tuple[str, str]] = []
    first = threading.Event()

    def follow() -> None:
        for kind, obj in client.watch(ResourceSlice):
            assert obj.metadata is not None
            assert obj.metadata.name is not None
            seen.append((kind, obj.metadata.name))
            first.set()
            if len(seen) == 2:
                return

    watcher = threading.Thread(target=follow)
    watcher.start()
    assert first.wait(10)
    client.create(a_slice("new"))
    watcher.join(10)
    assert not watcher.is_alive()
    assert seen == [("ADDED", "existing"), ("ADDED", "new")]


def test_a_watch_ends_at_its_timeout(api: FakeAPIServer) -> None:
    with httpx2.Client(base_url=api.url) as http:
        answer = http.get(SLICES, params={"watch": "true", "timeoutSeconds": "0.2"})
    assert (answer.status_code, answer.text) == (200, "")


def test_status_apply_records_the_field_manager(api: FakeAPIServer, client: Client) -> None:
    uid = api.put_claim(claim_doc([result("vf0")]))["metadata"]["uid"]
    entry = {
        "driver": DRIVER,
        "pool": NODE,
        "device": "vf0",
        "networkData": {"interfaceName": "net1"},
    }
    body = {"metadata": {"name": "claim-a", "uid": uid}, "status": {"devices": [entry]}}
    applied = client.patch(
        ResourceClaimStatus,
        "claim-a",
        body,
        namespace="pods",
        patch_type=PatchType.APPLY,
        field_manager=DRIVER,
    )
    assert applied.metadata is not None
    assert applied.metadata.managedFields is not None
    assert [(m.manager, m.operation, m.subresource) for m in applied.metadata.managedFields] == [
        (DRIVER, "Apply", "status")
    ]
    assert applied.status is not None
    assert applied.status.devices is not None
    assert applied.status.devices[0].networkData is not None
    assert applied.status.devices[0].networkData.interfaceName == "net1"
    # another manager's apply of the same entry conflicts unless forced
    with pytest.raises(ApiError) as caught:
        client.patch(
            ResourceClaimStatus,
            "claim-a",
            body,
            namespace="pods",
            patch_type=PatchType.APPLY,
            field_manager="other",
        )
    assert refusal(caught) == (409, "Conflict")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"driver": DRIVER, "pool": NODE, "device": "vf9"},
            "must be an allocated device in the claim",
        ),
        (
            {"driver": DRIVER, "pool": NODE, "device": "vf0", "networkData": {"ips": ["10.0.0.1"]}},
            "must be a CIDR",
        ),
        (
            {"driver": DRIVER, "pool": NODE, "device": "vf0", "conditions": [{"type": "Ready"}]},
            "Required value: status, reason, lastTransitionTime",
        ),
    ],
)
def test_a_status_entry_the_api_would_refuse_is_422(
    api: FakeAPIServer, client: Client, entry: dict[str, Any], expected: str
) -> None:
    api.put_claim(claim_doc([result("vf0")]))
    body = {"metadata": {"name": "claim-a"}, "status": {"devices": [entry]}}
    with pytest.raises(ApiError) as caught:
        client.patch(
            ResourceClaimStatus,
            "claim-a",
            body,
            namespace="pods",
            patch_type=PatchType.APPLY,
            field_manager=DRIVER,
        )
    assert refusal(caught) == (422, "Invalid")
    assert expected in str(caught.value.status.message)


def test_an_apply_for_another_uid_is_a_conflict(api: FakeAPIServer, client: Client) -> None:
    old = api.put_claim(claim_doc([result("vf0")]))["metadata"]["uid"]
    new = api.swap_claim_uid("pods", "claim-a")
    body = {"metadata": {"name": "claim-a", "uid": old}, "status": {"devices": []}}
    with pytest.raises(ApiError) as caught:
        client.patch(
            ResourceClaimStatus,
            "claim-a",
            body,
            namespace="pods",
            patch_type=PatchType.APPLY,
            field_manager=DRIVER,
        )
    assert refusal(caught) == (409, "Conflict")
    assert f"UID in precondition: {old}, UID in object meta: {new}" in str(
        caught.value.status.message
    )


def test_a_merge_patch_of_status(api: FakeAPIServer, client: Client) -> None:
    api.put_claim(claim_doc([result("vf0")]))
    devices = [{"driver": DRIVER, "pool": NODE, "device": "vf0"}]
    client.patch(
        ResourceClaimStatus,
        "claim-a",
        {"status": {"devices": devices}},
        namespace="pods",
        patch_type=PatchType.MERGE,
    )
    claim = api.claim("pods", "claim-a")
    assert claim is not None
    assert claim["status"]["devices"] == devices


def test_what_is_not_simulated_is_refused(api: FakeAPIServer, client: Client) -> None:
    api.put_claim(claim_doc())
    with pytest.raises(ApiError) as caught:
        client.patch(ResourceSlice, "s", {"spec": {}})  # lightkube's default: strategic merge
    assert refusal(caught) == (415, "UnsupportedMediaType")
    with httpx2.Client(base_url=api.url) as http:
        path = "/apis/resource.k8s.io/v1/namespaces/pods/resourceclaims/claim-a/status"
        no_manager = http.patch(path, content=b"{}", headers={"Content-Type": APPLY})
        assert (no_manager.status_code, no_manager.json()["reason"]) == (400, "BadRequest")
        other_field = http.patch(
            path,
            params={"fieldManager": "m"},
            content=json.dumps({"status": {"reservedFor": []}}).encode(),
            headers={"Content-Type": APPLY},
        )
        assert "only status.devices" in other_field.json()["message"]
        assert http.delete(path.removesuffix("/status")).status_code == 405
        assert http.get("/api/v1/nodes").json()["code"] == 404


def test_unavailable_answers_503_to_everything_and_is_logged(
    api: FakeAPIServer, client: Client
) -> None:
    api.set_unavailable(True)
    with pytest.raises(ApiError) as caught:
        client.list(ResourceSlice, fields={"spec.nodeName": NODE}).__iter__().__next__()
    assert refusal(caught) == (503, "ServiceUnavailable")
    with pytest.raises(ApiError):
        client.patch(ResourceSlice, "s", {}, patch_type=PatchType.MERGE)
    assert [(r.method, r.path, r.status) for r in api.requests] == [
        ("GET", SLICES, 503),
        ("PATCH", f"{SLICES}/s", 503),
    ]
    assert api.requests[0].query == "fieldSelector=spec.nodeName%3Dnode-1"
    assert api.requests[1].content_type == MERGE
    assert (
        api.request_log_text().splitlines()[1]
        == f"PATCH {SLICES}/s?fieldManager={DRIVER} [{MERGE}] -> 503"
    )


def test_a_kubeconfig_file_reaches_the_server(api: FakeAPIServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{api.url}"}}}}]
users: [{{name: node, user: {{token: not-checked}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: node}}}}]
current-context: fake
"""
    )
    with make_client(DRIVER, kubeconfig=kubeconfig) as client:
        assert list(client.list(ResourceSlice)) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kubeconfig": "/nonexistent/kubeconfig"}, "not found"),
        ({"kubeconfig": "k", "server": "http://127.0.0.1:1"}, "not both"),
        ({"server": "127.0.0.1:6443"}, "is not http:// or https://"),
        ({"server": "http://127.0.0.1:1", "timeout": 0}, "must be positive"),
        ({}, "not in a pod"),
    ],
)
def test_bad_connection_settings_are_refused_naming_them(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], message: str
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match=message):
        make_client(DRIVER, **kwargs)
    with pytest.raises(ValueError, match="not a DNS subdomain"):
        make_client("Not_A_Driver", server="http://127.0.0.1:1")
