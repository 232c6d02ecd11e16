"""Plan builder: ids, indexed effects, output references, exports, purity, digests."""

from __future__ import annotations

import json
import socket

import pytest

from plugins.sdk import (
    EffectSpec,
    OutputRef,
    Plan,
    PlanError,
    Subplan,
    canonical_json,
    effect,
    new_plan,
)

CREATE = "linux/create-bond/v1"
ATTACH = "linux/attach-member/v1"
UP = "linux/set-link-up/v1"


def bond_plan() -> Plan:
    p = new_plan()
    bond = p.add("create-bond", effect(CREATE, {"name": "bond0"}, outputs=["interface"]))
    for i in range(2):
        p.add_indexed(
            "attach-member",
            i,
            effect(ATTACH, {"member": f"vf{i}"}, inputs={"bond": bond.output("interface")}),
        )
    p.add("activate-bond", effect(UP, inputs={"link": bond.output("interface")}))
    p.export("interface", bond.output("interface"))
    return p.build()


def problems_of(
    builder_steps: list[tuple[str, EffectSpec]], exports: dict[str, OutputRef] | None = None
) -> list[str]:
    p = new_plan()
    for effect_id, spec in builder_steps:
        p.add(effect_id, spec)
    for port, ref in (exports or {}).items():
        p.export(port, ref)
    with pytest.raises(PlanError) as info:
        p.build()
    return info.value.problems


def test_bond_plan_has_the_blueprint_order() -> None:
    plan = bond_plan()
    assert [e.id for e in plan.effects] == [
        "create-bond",
        "attach-member-0",
        "attach-member-1",
        "activate-bond",
    ]
    assert plan.exports == {"interface": (OutputRef("create-bond", "interface"),)}


def test_canonical_json_round_trips_and_digest_is_stable() -> None:
    plan = bond_plan()
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert again.canonical() == plan.canonical()
    assert plan.digest() == bond_plan().digest()
    assert plan.digest().startswith("sha256:")
    assert " " not in plan.canonical()


def test_digest_changes_with_content() -> None:
    p = new_plan()
    p.add("create-bond", effect(CREATE, {"name": "bond1"}, outputs=["interface"]))
    assert p.build().digest() != bond_plan().digest()


def test_duplicate_effect_id_is_rejected() -> None:
    problems = problems_of([("a", effect(UP)), ("a", effect(UP))])
    assert problems == ["effect 'a': duplicate effect id"]


def test_reference_to_a_later_or_unknown_effect_is_rejected() -> None:
    problems = problems_of(
        [
            ("a", effect(UP, inputs={"link": OutputRef("b", "interface")})),
            ("b", effect(CREATE, outputs=["interface"])),
        ]
    )
    assert problems == ["effect 'a' input 'link': b/interface does not name an earlier effect"]


def test_reference_to_an_undeclared_port_is_rejected() -> None:
    p = new_plan()
    bond = p.add("create-bond", effect(CREATE, outputs=["interface"]))
    p.add("up", effect(UP, inputs={"link": bond.output("nope")}))
    with pytest.raises(PlanError, match="effect 'create-bond' declares no port 'nope'"):
        p.build()


def test_export_must_name_a_declared_port() -> None:
    problems = problems_of([("a", effect(UP))], {"interface": OutputRef("a", "interface")})
    assert problems == ["export 'interface': effect 'a' declares no port 'interface'"]


def test_errors_are_kept_until_build_and_all_reported() -> None:
    p = new_plan()
    p.add("Bad Id", effect(UP))
    p.add("ok", effect("not-a-kind"))
    with pytest.raises(PlanError) as info:
        p.build()
    assert info.value.problems == [
        "effect 'Bad Id': invalid effect id",
        "effect 'ok': invalid effect kind 'not-a-kind'",
    ]


def test_empty_plan_is_rejected() -> None:
    with pytest.raises(PlanError, match="plan has no effects"):
        new_plan().build()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (lambda: None, "function is not plain JSON data"),
        (float("nan"), "non-finite number"),
        ({1: "x"}, "non-string key 1"),
        (object(), "object is not plain JSON data"),
        ({1, 2}, "set is not plain JSON data"),
    ],
)
def test_nothing_live_gets_into_a_payload(value: object, fragment: str) -> None:
    problems = problems_of([("a", effect(UP, {"x": value}))])
    assert len(problems) == 1
    assert fragment in problems[0]


def test_a_socket_is_not_payload() -> None:
    with socket.socket() as s:
        problems = problems_of([("a", effect(UP, {"sock": s}))])
    assert problems == ["effect 'a' payload.sock: socket is not plain JSON data"]


def test_subplan_steps_become_effects_with_their_own_boundaries() -> None:
    sub = Subplan(
        steps=(
            ("move", effect("linux/move-link/v1", outputs=["link"])),
            (
                "rename",
                effect(
                    "linux/rename-link/v1",
                    inputs={"link": OutputRef(".move", "link")},
                    outputs=["link"],
                ),
            ),
        ),
        outputs={"interface": ("rename", "link")},
    )
    p = new_plan()
    moved = p.add("move-vf", sub)
    p.export("interface", moved.output("interface"))
    plan = p.build()
    assert [e.id for e in plan.effects] == ["move-vf.move", "move-vf.rename"]
    assert plan.effect("move-vf.rename").inputs == {"link": OutputRef("move-vf.move", "link")}
    assert plan.exports["interface"] == (OutputRef("move-vf.rename", "link"),)


def test_subplan_output_must_name_a_step_port() -> None:
    sub = Subplan(
        steps=(("move", effect("linux/move-link/v1")),), outputs={"interface": ("move", "link")}
    )
    p = new_plan()
    p.add("move-vf", sub)
    with pytest.raises(PlanError, match="subplan 'move-vf' output 'interface'"):
        p.build()


def test_output_ref_parse() -> None:
    assert OutputRef.parse("move-vf.rename/link") == OutputRef("move-vf.rename", "link")
    with pytest.raises(ValueError, match="not EFFECT/PORT"):
        OutputRef.parse("nolink")


CANONICAL_CASES = [
    {"b": [1, 2.5, -0.0, 2**70], "a": '\u00fc\n"\\', "c": {"y": None, "x": True}},
    [[], {}, [{"k": [False]}]],
    0.1,
    "text",
    None,
]


@pytest.mark.parametrize("value", CANONICAL_CASES)
def test_canonical_json_is_what_the_plain_encoder_writes(value: object) -> None:
    from plugins.sdk import _plan

    assert _plan._C_ENCODE is not None  # this interpreter takes the C path
    plain = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == plain


@pytest.mark.parametrize(
    ("value", "error"),
    [({"a": float("nan")}, "Out of range float"), ({"a": object()}, "not JSON serializable")],
)
def test_canonical_json_refuses_what_the_plain_encoder_refuses(value: object, error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        canonical_json(value)


def test_canonical_json_detects_a_circular_value_on_every_call() -> None:
    looped: list[object] = []
    looped.append(looped)
    for _ in range(2):  # markers are fresh per call: the second one is not fooled
        with pytest.raises(ValueError, match="Circular reference"):
            canonical_json(looped)
    assert canonical_json([1, [2]]) == "[1,[2]]"


def test_an_encoder_that_differs_on_the_probe_falls_back_to_the_plain_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from plugins.sdk import _plan

    def wrong(*args: object) -> object:
        return lambda value, level: iter(["{}"])

    monkeypatch.setattr(json.encoder, "c_make_encoder", wrong)
    assert _plan._make_c_encoder() is None
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    assert _plan._make_c_encoder() is None
