"""DeadlinePacer, driven with an injected clock: no drift, no burst after a stall, lag recorded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.client.pacing import DeadlinePacer

START = 1000.0
CHUNK_MS = 200.0


def run_stream(
    pacer: DeadlinePacer, latencies_s: list[float], stall: dict[int, float] | None = None
) -> list[float]:
    """Drive the pacer like the client does: wait for the slot, then the send takes `latency`; a stall
    makes the clock jump before asking for a slot. Returns the send times."""
    now, sent = START, []
    for i, latency in enumerate(latencies_s):
        now += (stall or {}).get(i, 0.0)
        slot = pacer.slot((i + 1) * CHUNK_MS, CHUNK_MS, now)
        now = max(now, slot.due) + latency
        pacer.sent(slot, now)
        sent.append(now)
    return sent


@settings(max_examples=60)
@given(latencies=st.lists(st.floats(min_value=0.0, max_value=0.19), min_size=1, max_size=300))
def test_due_times_come_from_the_anchor_so_latency_never_accumulates(latencies: list[float]) -> None:
    pacer = DeadlinePacer(START)
    sent = run_stream(pacer, latencies)
    report = pacer.report()
    # Each send is its own due time (start + media end) plus only its own latency: nothing carries over.
    for i, (at, latency) in enumerate(zip(sent, latencies, strict=True)):
        assert at == pytest.approx(START + (i + 1) * CHUNK_MS / 1000 + latency, abs=1e-6)
    assert report.stalls == ()
    assert report.drift_ms == pytest.approx(latencies[-1] * 1000, abs=1e-6)
    assert report.schedule_error_ms is not None
    assert report.schedule_error_ms.max == pytest.approx(max(latencies) * 1000, abs=1e-6)


def test_a_naive_sleep_after_send_drifts_where_the_deadline_schedule_does_not() -> None:
    latencies = [0.002] * 150  # 2 ms per send over 30 s of 200 ms appends
    pacer = DeadlinePacer(START)
    run_stream(pacer, latencies)
    naive_now = START
    for latency in latencies:  # naive: send, then sleep the chunk's duration
        naive_now += latency + CHUNK_MS / 1000
    naive_drift_ms = (naive_now - CHUNK_MS / 1000 - START) * 1000 - (len(latencies) - 1) * CHUNK_MS
    report = pacer.report()
    assert report.drift_ms == pytest.approx(2.0, abs=1e-6)
    assert naive_drift_ms == pytest.approx(300.0, abs=1e-6)


def test_the_first_append_is_due_when_its_audio_has_happened() -> None:
    slot = DeadlinePacer(START).slot(CHUNK_MS, CHUNK_MS, START)
    assert slot.due == pytest.approx(START + 0.2)
    assert slot.wait_s == pytest.approx(0.2)


def test_after_a_stall_the_schedule_reanchors_instead_of_bursting() -> None:
    pacer = DeadlinePacer(START)
    now = START
    waits = []
    for i in range(20):
        if i == 10:
            now += 1.5  # the event loop stalled for 1.5 s
        slot = pacer.slot((i + 1) * CHUNK_MS, CHUNK_MS, now)
        waits.append(slot.wait_s)
        now = max(now, slot.due)
        pacer.sent(slot, now)
    # The stalled append goes at once; every later one still waits its full chunk: no catch-up burst.
    assert waits[10] == 0.0
    assert waits[11:] == pytest.approx([0.2] * 9)
    report = pacer.report()
    assert len(report.stalls) == 1
    end_ms, lag_ms = report.stalls[0]
    assert end_ms == 11 * CHUNK_MS
    assert lag_ms == pytest.approx(1500.0 - CHUNK_MS)  # it was due one chunk after the previous send
    assert report.lag_ms == pytest.approx(lag_ms)
    # The lag is never made up: the drift at the end is exactly the recorded lag.
    assert report.drift_ms == pytest.approx(lag_ms)
    assert report.schedule_error_ms is not None and report.schedule_error_ms.max == pytest.approx(0.0)


def test_lateness_shorter_than_an_append_is_absorbed_without_moving_the_schedule() -> None:
    pacer = DeadlinePacer(START)
    late = pacer.slot(CHUNK_MS, CHUNK_MS, START + 0.25)  # 50 ms late
    assert late.lag_ms == 0.0 and late.wait_s == 0.0
    assert late.due == pytest.approx(START + 0.2)
    pacer.sent(late, START + 0.25)
    following = pacer.slot(2 * CHUNK_MS, CHUNK_MS, START + 0.25)
    assert following.due == pytest.approx(START + 0.4)
    assert following.wait_s == pytest.approx(0.15)
    assert pacer.report().stalls == ()


def test_late_by_a_whole_append_is_a_stall_and_just_under_is_not() -> None:
    assert DeadlinePacer(START).slot(CHUNK_MS, CHUNK_MS, START + 0.3999).lag_ms == 0.0
    slot = DeadlinePacer(START).slot(CHUNK_MS, CHUNK_MS, START + 0.4001)
    assert slot.lag_ms == pytest.approx(200.1)
    assert slot.due == START + 0.4001


def test_an_empty_schedule_reports_nothing_observed() -> None:
    report = DeadlinePacer(START).report()
    assert report.appends == 0
    assert report.schedule_error_ms is None
    assert report.drift_ms is None
