"""The Sans-I/O fuzzers for as long as asked (`benchmarks/chaos.py --only protocol_fuzz --minutes N`): each
state machine in turn, fresh random runs until its share of the time is spent; a failure is raised with
hypothesis's shrunk example, as in the suite."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.fuzz import test_engine_fuzz, test_moshi_fuzz, test_twilio_fuzz, test_wire_fuzz

MACHINES: dict[str, Any] = {
    "engine": test_engine_fuzz.EngineFuzz,
    "twilio": test_twilio_fuzz.TwilioFuzz,
    "moshi": test_moshi_fuzz.MoshiFuzz,
}


def protocol_fuzz(seconds: float, *, batch: int = 50) -> dict[str, Any]:
    """Run every machine (and the wire parser's property) for `seconds` in all; messages and runs per door."""
    report: dict[str, Any] = {"messages": {}, "runs": {}, "seconds": {}}
    share = seconds / (len(MACHINES) + 1)
    for name, machine in MACHINES.items():
        started, runs = time.monotonic(), 0
        machine.messages = 0
        while time.monotonic() - started < share:
            run_state_machine_as_test(
                machine, settings=settings(machine.TestCase.settings, max_examples=batch, database=None)
            )
            runs += batch
        report["messages"][name], report["runs"][name] = machine.messages, runs
        report["seconds"][name] = round(time.monotonic() - started, 1)
    started, frames = time.monotonic(), 0
    wire = settings(
        max_examples=batch * 8, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )(given(**test_wire_fuzz.FRAMES)(test_wire_fuzz.check_frame))
    while time.monotonic() - started < share:
        wire()
        frames += batch * 8
    report["messages"]["wire"], report["runs"]["wire"] = frames, frames
    report["seconds"]["wire"] = round(time.monotonic() - started, 1)
    return report
