"""A toy durable resource and a toy plugin: the runner's test bed before real kernels.

The toy "kernel" is a JSON file rewritten atomically on every mutation, so it
survives an in-process crash and a SIGKILL of the service, like a real kernel
does. It counts real mutations per object so a test can prove nothing was
applied twice, and it records foreign objects the runner must never touch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.sdk import (
    AllocationRoot,
    BundleStore,
    ConnectCall,
    DescriptorRef,
    Endpoint,
    FailedPrecondition,
    Plan,
    PrepareCall,
    Registry,
    StepKind,
    effect,
    new_plan,
)
from plugins.sdk.runner import (
    CrashPoints,
    EffectContext,
    EffectRegistry,
    Observation,
    UndoOutcome,
    UndoResult,
)

CONTRACTS = Path(__file__).parent / "contracts"
CREATE = "test/create-object/v1"
SETTING = "test/set-setting/v1"
LINK = "test/link-objects/v1"


class ToyKernel:
    """Objects (with an owner marker) and settings, persisted to one file.

    ``path`` None keeps the state in memory instead: for a test that never crashes the
    process nor shares the kernel with another one, where the file's open, read, write,
    fsync and rename, and the JSON of the whole state, on every call were a third of
    the run's CPU (``test_memory``). Every read still returns a copy of its own, as a
    read of the file does.
    """

    def __init__(self, path: Path | None, crash: CrashPoints | None = None) -> None:
        self.path = path
        self.crash = crash or CrashPoints()
        self._memory: dict[str, Any] | None = None  # the state, when it has no file
        if path is None or not path.exists():
            self._save({"objects": {}, "settings": {}, "mutations": {}})

    def state(self) -> dict[str, Any]:
        return self._own(self._current())  # type: ignore[no-any-return]

    def _current(self) -> dict[str, Any]:
        """The state as it is: the memory's own (changed by ``_mutate`` only: see ``_own``),
        or a fresh parse of the file."""
        if self._memory is not None:
            return self._memory
        assert self.path is not None
        return json.loads(self.path.read_text())  # type: ignore[no-any-return]

    def _own(self, value: Any) -> Any:
        """``value`` of ``_current()`` as the caller's own, as a read of the file gives it."""
        return _copy(value) if self._memory is not None else value

    def observable(self) -> dict[str, Any]:
        """What a user would see: objects and settings, not the mutation counters."""
        s = self.state()
        return {"objects": s["objects"], "settings": s["settings"]}

    def _save(self, state: dict[str, Any]) -> None:
        if self.path is None:
            self._memory = state
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, sort_keys=True))
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        tmp.replace(self.path)

    def _mutate(self, call: str, key: str, fn: Any) -> None:
        before, after = self.crash.kernel_phases(call)
        self.crash.hit(before)
        state = self.state()  # in memory too, a copy: a mutation that raises changes nothing
        fn(state)
        counter = f"{call}:{key}"
        state["mutations"][counter] = state["mutations"].get(counter, 0) + 1
        self._save(state)
        self.crash.hit(after)

    def get(self, name: str) -> dict[str, Any] | None:
        return self._own(self._current()["objects"].get(name))  # type: ignore[no-any-return]

    def create(self, name: str, owner: str, value: Any) -> None:
        def fn(s: dict[str, Any]) -> None:
            if name in s["objects"]:
                raise FileExistsError(17, f"object {name} exists")
            s["objects"][name] = {"owner": owner, "value": value, "links": []}

        self._mutate("create", f"object:{name}", fn)

    def delete(self, name: str) -> None:
        self._mutate("delete", f"object:{name}", lambda s: s["objects"].pop(name))

    def update(self, name: str, **fields: Any) -> None:
        self._mutate("update", f"object:{name}", lambda s: s["objects"][name].update(fields))

    def setting(self, key: str) -> Any:
        return self._own(self._current()["settings"].get(key))

    def set_setting(self, key: str, value: Any) -> None:
        def fn(s: dict[str, Any]) -> None:
            if value is None:
                s["settings"].pop(key, None)
            else:
                s["settings"][key] = value

        self._mutate("set", f"setting:{key}", fn)

    def mutations(self) -> dict[str, int]:
        return self.state()["mutations"]  # type: ignore[no-any-return]

    def evidence(self, prefix: str) -> list[tuple[str, str]]:
        """The toy's node-wide scan: objects whose owner marker starts with ``prefix``."""
        return [
            (obj["owner"], f"object {name}")
            for name, obj in sorted(self._current()["objects"].items())
            if obj["owner"].startswith(prefix)
        ]


def _copy(value: Any) -> Any:
    """A JSON value's own copy (what parsing the file gives each reader)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


class CreateObject:
    kind = CREATE
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["name", "value"],
        "properties": {"name": {"type": "string"}, "value": {}},
        "additionalProperties": False,
    }
    outputs = ("object",)

    def __init__(self, toy: ToyKernel) -> None:
        self.toy = toy

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        obj = self.toy.get(ctx.payload["name"])
        if obj is None:
            return Observation.ABSENT
        if obj["owner"] != ctx.marker:
            return Observation.FOREIGN
        return Observation.OURS if obj["value"] == ctx.payload["value"] else Observation.CHANGED

    def capture(self, ctx: EffectContext) -> Any:
        obj = self.toy.get(ctx.payload["name"])
        if obj is not None and obj["owner"] != ctx.marker:
            raise FailedPrecondition(f"object {ctx.payload['name']} exists and is not ours")
        return {"existed": obj is not None}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        seen = self.probe(ctx, before, None)
        if seen is Observation.FOREIGN:
            raise FailedPrecondition(f"object {ctx.payload['name']} appeared and is not ours")
        if seen is Observation.ABSENT:
            self.toy.create(ctx.payload["name"], ctx.marker, ctx.payload["value"])
        return {"object": {"name": ctx.payload["name"], "owner": ctx.marker}}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        seen = self.probe(ctx, before, outputs)
        if seen in (Observation.ABSENT, Observation.FOREIGN):
            return UndoResult(UndoOutcome.ABSENT, f"no object of ours named {ctx.payload['name']}")
        if seen is Observation.CHANGED:
            return UndoResult(UndoOutcome.QUARANTINED, "object changed by someone else")
        self.toy.delete(ctx.payload["name"])
        return UndoResult(UndoOutcome.UNDONE)


class SetSetting:
    kind = SETTING
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["key", "value"],
        "properties": {"key": {"type": "string"}, "value": {}},
        "additionalProperties": False,
    }
    outputs: tuple[str, ...] = ()

    def __init__(self, toy: ToyKernel) -> None:
        self.toy = toy

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        now = self.toy.setting(ctx.payload["key"])
        if now == ctx.payload["value"]:
            return Observation.OURS
        return (
            Observation.ABSENT if before is None or now == before["value"] else Observation.CHANGED
        )

    def capture(self, ctx: EffectContext) -> Any:
        return {"value": self.toy.setting(ctx.payload["key"])}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        if self.toy.setting(ctx.payload["key"]) != ctx.payload["value"]:
            self.toy.set_setting(ctx.payload["key"], ctx.payload["value"])
        return {}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        now = self.toy.setting(ctx.payload["key"])
        if now == before["value"]:
            return UndoResult(UndoOutcome.ABSENT, "already at its before-image")
        if now != ctx.payload["value"]:
            return UndoResult(
                UndoOutcome.QUARANTINED, f"{ctx.payload['key']} changed externally to {now!r}"
            )
        self.toy.set_setting(ctx.payload["key"], before["value"])
        return UndoResult(UndoOutcome.UNDONE)


class LinkObjects:
    """Record a tag on an object created earlier in the plan (uses a resolved input)."""

    kind = LINK
    payload_schema: Mapping[str, Any] = {
        "type": "object",
        "required": ["tag"],
        "properties": {"tag": {"type": "string"}},
        "additionalProperties": False,
    }
    outputs: tuple[str, ...] = ()

    def __init__(self, toy: ToyKernel) -> None:
        self.toy = toy

    def _target(self, ctx: EffectContext) -> dict[str, Any] | None:
        name = ctx.inputs["object"]["name"]
        obj = self.toy.get(name)
        if obj is None or obj["owner"] != ctx.inputs["object"]["owner"]:
            return None
        return obj

    def probe(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> Observation:
        obj = self._target(ctx)
        return (
            Observation.OURS if obj and ctx.payload["tag"] in obj["links"] else Observation.ABSENT
        )

    def capture(self, ctx: EffectContext) -> Any:
        obj = self._target(ctx)
        if obj is None:
            raise FailedPrecondition("the object to link is gone")
        return {"links": list(obj["links"])}

    def apply(self, ctx: EffectContext, before: Any) -> Mapping[str, Any]:
        obj = self._target(ctx)
        if obj is None:
            raise FailedPrecondition("the object to link is gone")
        if ctx.payload["tag"] not in obj["links"]:
            self.toy.update(ctx.inputs["object"]["name"], links=[*obj["links"], ctx.payload["tag"]])
        return {}

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any] | None
    ) -> UndoResult:
        obj = self._target(ctx)
        if obj is None or ctx.payload["tag"] not in obj["links"]:
            return UndoResult(UndoOutcome.ABSENT)
        self.toy.update(ctx.inputs["object"]["name"], links=before["links"])
        return UndoResult(UndoOutcome.UNDONE)


def toy_effects(toy: ToyKernel) -> EffectRegistry:
    return EffectRegistry(
        [CreateObject(toy), SetSetting(toy), LinkObjects(toy)], evidence=toy.evidence
    )


@dataclass(frozen=True)
class ToyConfig:
    value: int
    mtu: int


class ToyPlugin(AllocationRoot):
    """Prepare reserves a slot; connect realizes five effects over two objects."""

    def describe(self) -> DescriptorRef:
        return DescriptorRef("toy", "v1alpha1", (StepKind.ALLOCATION,), "toy/v1alpha1")

    def node_prepare(self, call: PrepareCall) -> Plan:
        cfg = call.config(ToyConfig)
        root = call.allocation.root_id if call.allocation else "none"
        plan = new_plan()
        slot = plan.add(
            "reserve",
            effect(CREATE, {"name": f"slot-{root}", "value": cfg.value}, outputs=["object"]),
        )
        plan.export("slot", slot.output("object"))
        return plan.build()

    def connect_network(self, call: ConnectCall) -> Plan:
        cfg = call.config(ToyConfig)
        name = call.interface_name("interface")
        plan = new_plan()
        obj = plan.add(
            "create-object", effect(CREATE, {"name": name, "value": cfg.value}, outputs=["object"])
        )
        plan.add("set-mtu", effect(SETTING, {"key": f"{name}.mtu", "value": cfg.mtu}))
        plan.add(
            "create-peer",
            effect(CREATE, {"name": f"{name}-peer", "value": cfg.value}, outputs=["object"]),
        )
        plan.add("link", effect(LINK, {"tag": "peer"}, inputs={"object": obj.output("object")}))
        plan.add("set-state", effect(SETTING, {"key": "shared.state", "value": "up"}))
        plan.export("interface", obj.output("object"))
        return plan.build()


def toy_registry() -> Registry:
    registry = Registry(BundleStore(CONTRACTS))
    registry.register(Endpoint("toy.sock", "toy/v1alpha1", ToyPlugin()))
    return registry
