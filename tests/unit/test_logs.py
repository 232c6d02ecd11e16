"""Structured logs: one line per hook and per effect transition, JSON on request.

A real toy service process is run with ``--log-format json`` (and once with the
config's ``logFormat``), driven through the four hooks and one refusal, and stopped;
every line it wrote must be one JSON object, and the lines must say what happened with
the ids an operator searches by.
"""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest
import yaml

from plugins.sdk.host import PluginCallError
from plugins.sdk.telemetry import BackgroundHandler, JsonFormatter, log_event

from ..runner import node as n
from ..runner.test_journal_loss_service import ToyDeployment

HOOKS = ("NodePrepare", "ConnectNetwork", "RemoveNetwork", "NodeUnprepare")
DEADLINE_S = 60.0


def run_service(lab: ToyDeployment, *flags: str) -> list[str]:
    """Start the toy service at INFO, drive every hook and one refusal, stop it: its lines."""
    command = [sys.executable, "-m", *lab.service.command, "--config", str(lab.service.config)]
    proc = subprocess.Popen(
        [*command, "--log-level", "INFO", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with lab.client() as client:
            client.wait_ready(DEADLINE_S)
            client.node_prepare(n.prepare())
            client.connect_network(n.connect())
            with pytest.raises(PluginCallError):  # its attachment is still there: refused
                client.node_unprepare(n.unprepare(op="op-early"))
            client.remove_network(n.remove())
            client.node_unprepare(n.unprepare())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=DEADLINE_S)
    return err.splitlines()


def as_json(lines: Sequence[str]) -> list[dict[str, Any]]:
    records = []
    for line in lines:
        record = json.loads(line)  # every line: one JSON object, nothing else
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= record.keys(), line
        records.append(record)
    return records


def hook_lines(records: list[dict[str, Any]], hook: str) -> list[dict[str, Any]]:
    return [r for r in records if r["message"].startswith(f"hook {hook} ")]


def test_json_lines_name_every_hook_and_effect_transition(lab: ToyDeployment) -> None:
    records = as_json(run_service(lab, "--log-format", "json"))

    for hook in HOOKS:
        ok = [r for r in hook_lines(records, hook) if r["outcome"] == "OK"]
        assert len(ok) == 1, (hook, hook_lines(records, hook))
        line = ok[0]
        assert line["plugin"] == "toy"
        assert line["trace"] == "t"
        assert line["step"] == "step-1"
        assert line["duration_ms"] >= 0
        assert line["operation"].startswith("op-")
    connect = hook_lines(records, "ConnectNetwork")[0]
    assert connect["claim"] == "root-1"
    assert connect["sandbox"] == "pod-a"
    assert connect["scope"] == "att-1"
    assert hook_lines(records, "NodePrepare")[0]["claim"] == "root-1"

    effects = [r for r in records if r["message"].startswith("effect ")]
    states = {(r["effect"], r["state"]) for r in effects}
    for effect in {r["effect"] for r in effects}:
        for state in ("Applying", "Applied", "Undoing", "Undone"):
            assert (effect, state) in states, (effect, state, sorted(states))
    for line in effects:
        assert line["trace"] == "t", line  # the hook's ids ride on its effect lines
        assert line["kind"].startswith("test/")
    undone = [r for r in effects if r["state"] == "Undone" and r["scope"] == "att-1"]
    assert undone
    assert all(r["by"] == "op-remove" and r["operation"] == "op-connect" for r in undone)


def test_a_refusal_is_a_warning_with_its_code_and_reason(lab: ToyDeployment) -> None:
    records = as_json(run_service(lab, "--log-format", "json"))
    refused = [r for r in hook_lines(records, "NodeUnprepare") if r["operation"] == "op-early"]
    assert len(refused) == 1, refused
    assert refused[0]["level"] == "WARNING"
    assert refused[0]["outcome"] == "FAILED_PRECONDITION"
    assert "att-1" in refused[0]["reason"], refused[0]  # why: the attachment still there


def test_the_config_asks_for_json(lab: ToyDeployment) -> None:
    config = yaml.safe_load(lab.service.config.read_text())
    config["logFormat"] = "json"
    lab.service.config.write_text(yaml.safe_dump(config))
    records = as_json(run_service(lab))
    assert any(r["message"] == "hook NodePrepare OK" for r in records)


def test_text_lines_carry_the_same_fields(lab: ToyDeployment) -> None:
    lines = run_service(lab)
    hooks = [line for line in lines if " hook ConnectNetwork OK " in line]
    assert len(hooks) == 1, lines
    for field in ("plugin=toy", "operation=op-connect", "claim=root-1", "sandbox=pod-a", "trace=t"):
        assert field in hooks[0], hooks[0]
    assert hooks[0].startswith("toy-service INFO plugins.sdk.runner: hook ConnectNetwork OK ")


# -- the formatter and the event helper ----------------------------------------------------


def capture(level: int = logging.DEBUG) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(f"test_logs.{id(stream)}")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(level)
    return logger, stream


def test_an_event_is_its_message_plus_fields_and_empty_fields_are_left_out() -> None:
    logger, stream = capture()
    log_event(logger, logging.INFO, "hook X OK", plugin="vlan", claim="", sandbox=None, n=3)
    record = json.loads(stream.getvalue())
    assert record["message"] == "hook X OK"
    assert record["plugin"] == "vlan"
    assert record["n"] == 3
    assert "claim" not in record
    assert "sandbox" not in record
    assert record["time"].endswith("+00:00")


def test_a_field_cannot_overwrite_the_line_s_own_keys() -> None:
    logger, stream = capture()
    log_event(logger, logging.WARNING, "what", level="DEBUG", message="forged", logger="x")
    record = json.loads(stream.getvalue())
    assert (record["level"], record["message"]) == ("WARNING", "what")
    assert record["logger"] == logger.name


def test_a_plain_line_and_a_traceback_stay_one_json_object() -> None:
    logger, stream = capture()
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logger.exception("failed %s", "here")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    record = json.loads(lines[0])
    assert record["message"] == "failed here"
    assert "ValueError: bad" in record["exception"]


def test_a_value_with_spaces_is_quoted_in_text() -> None:
    stream = io.StringIO()
    logger = logging.getLogger(f"test_logs.text.{id(stream)}")
    logger.propagate = False
    logger.addHandler(logging.StreamHandler(stream))
    logger.setLevel(logging.INFO)
    log_event(logger, logging.INFO, "hook X FAILED", reason='a "b" c', plugin="vlan")
    assert stream.getvalue() == 'hook X FAILED reason="a \\"b\\" c" plugin=vlan\n'


def test_a_line_below_the_level_builds_nothing() -> None:
    logger, stream = capture(logging.WARNING)

    class Exploding:
        def __str__(self) -> str:
            raise AssertionError("formatted a line nobody sees")

    log_event(logger, logging.INFO, "quiet", value=Exploding())  # type: ignore[arg-type]
    assert stream.getvalue() == ""


# -- the service's handler: lines formatted and written on a thread of its own ------------


class _Recording(logging.Handler):
    """Formats like a real handler and records each line with the thread that wrote it."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((self.format(record), threading.current_thread().name))


def background(level: int = logging.DEBUG) -> tuple[logging.Logger, BackgroundHandler, _Recording]:
    target = _Recording()
    handler = BackgroundHandler(target)
    logger = logging.getLogger(f"test_logs.bg.{id(handler)}")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(level)
    return logger, handler, target


def test_the_logging_thread_neither_formats_nor_writes() -> None:
    logger, handler, target = background()
    formatted_on: list[str] = []

    class Field:
        def __str__(self) -> str:
            formatted_on.append(threading.current_thread().name)
            return "v"

    try:
        log_event(logger, logging.INFO, "hook X OK", field=Field())  # type: ignore[arg-type]
        handler.flush()  # returns once the line is written
        assert target.lines == [("hook X OK field=v", "log-writer")]
        assert formatted_on == ["log-writer"]
    finally:
        handler.close()


def test_lines_keep_their_order_and_a_flush_waits_for_them() -> None:
    logger, handler, target = background()
    try:
        for i in range(500):
            log_event(logger, logging.INFO, f"line {i}", n=i)
        logger.warning("plain %s", "args")  # formatted at once: its args may change later
        handler.flush()
        assert [line for line, _ in target.lines] == [
            *(f"line {i} n={i}" for i in range(500)),
            "plain args",
        ]
    finally:
        handler.close()


def test_a_full_queue_makes_the_caller_wait_and_drops_nothing() -> None:
    target = _Recording()
    handler = BackgroundHandler(target, capacity=2)
    logger = logging.getLogger(f"test_logs.full.{id(handler)}")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for i in range(200):
            logger.info("line %d", i)
        handler.flush()
        assert [line for line, _ in target.lines] == [f"line {i}" for i in range(200)]
    finally:
        handler.close()


def test_close_writes_what_is_queued_then_lines_go_straight_through() -> None:
    logger, handler, target = background()
    log_event(logger, logging.INFO, "before close")
    handler.close()
    assert [line for line, _ in target.lines] == ["before close"]
    log_event(logger, logging.INFO, "after close")
    assert target.lines[-1] == ("after close", threading.current_thread().name)
