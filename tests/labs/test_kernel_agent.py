"""The VM lab's guest agent answers the fake kernel protocol for any LabKernel; checked
here over the kernel model, so it runs on every machine (the vm tier runs it in a guest)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from fakekernel.lab import load_lab
from labs import DEFAULT_LAB
from labs.kernel_agent import KernelAgent
from plugins.kernel import PROTOCOL_VERSION
from plugins.sdk import to_json_value


def ask(agent: KernelAgent, method: str, **params: Any) -> dict[str, Any]:
    line = json.dumps({"v": PROTOCOL_VERSION, "id": 7, "method": method, "params": params}).encode()
    return agent.handle(line)


def test_a_kernel_call_answers_with_its_result() -> None:
    model = load_lab(DEFAULT_LAB)
    reply = ask(KernelAgent(model), "boot_id")
    assert reply == {"id": 7, "result": model.boot_id()}


def test_a_kernel_refusal_travels_with_its_errno() -> None:
    model = load_lab(DEFAULT_LAB)
    reply = ask(KernelAgent(model), "namespace", name="no-such-pod")
    assert reply["error"]["kind"] == "kernel"
    assert reply["error"]["errno"] == 2  # ENOENT, as the model (and Linux) answer


def test_requests_the_protocol_cannot_carry_are_named() -> None:
    agent = KernelAgent(load_lab(DEFAULT_LAB))
    unknown = ask(agent, "reboot")["error"]
    assert (unknown["kind"], unknown["message"]) == ("protocol", "unknown method 'reboot'")
    extra = ask(agent, "boot_id", now=True)["error"]
    assert extra["message"] == "boot_id: unknown parameters ['now']"
    missing = ask(agent, "namespace")["error"]
    assert missing["kind"] == "protocol"
    assert "missing a required argument" in missing["message"]
    garbage = agent.handle(b"{not json")["error"]
    assert garbage["kind"] == "protocol"
    assert garbage["message"].startswith("not JSON")


def test_guest_only_methods_are_unknown_without_a_guest() -> None:
    reply = ask(KernelAgent(load_lab(DEFAULT_LAB)), "release")
    assert reply["error"]["message"] == "unknown method 'release'"


def test_a_move_with_an_alias_is_decoded_from_the_protocols_hints() -> None:
    model = load_lab(DEFAULT_LAB)
    agent = KernelAgent(model)
    host, pod = model.host_namespace(), model.add_namespace("pod")
    vf = model.get_link(host, name="enp3s0f0v0")
    assert vf is not None
    reply = ask(
        agent,
        "move_link",
        ns=to_json_value(host),
        ifindex=vf.ifindex,
        target=to_json_value(pod),
        new_name="net1",
        alias="dranp:1234:x",
    )
    assert (reply["result"]["name"], reply["result"]["alias"]) == ("net1", "dranp:1234:x")


def test_the_end_of_the_stream_is_said_in_the_agents_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A stream that ends (the host hung up) ends the agent with a line on its log, so a
    quiet end is told from a crash by more than a missing traceback."""
    requests = b"".join(
        json.dumps({"v": PROTOCOL_VERSION, "id": i, "method": "boot_id", "params": {}}).encode()
        + b"\n"
        for i in range(2)
    )
    answers = tmp_path / "answers"
    with answers.open("wb") as out:
        KernelAgent(load_lab(DEFAULT_LAB)).serve(io.BytesIO(requests + b"\n"), out.fileno())
    assert [json.loads(line)["id"] for line in answers.read_bytes().splitlines()] == [0, 1]
    assert capfd.readouterr().err == "kernel agent: end of the request stream after 2 requests\n"
