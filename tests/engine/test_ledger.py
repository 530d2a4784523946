"""The request-start ledger and per-response timing as a specification.

TTFT, TTFP and TPOT are measured on the server's monotonic clock from the moment the model-turn request that
produced the response was accepted (seed 003: "Restore the duplex tests removed in #7413"). The ported seed
tests keep their names; the rest pin the semantics the seed and the protocol describe. The engine is driven
with a fake clock: every `now` is a plain float in seconds.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.engine import EngineConfig, EngineSession, Listen, Speak, Step, Unit
from duplexkit.engine.ledger import FirstOutputs, RequestStartLedger, ResponseTiming
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import encode_base64_audio
from duplexkit.protocol.wire import parse_client_event

OUT_RATE = 24_000


def _client(type_: str, **fields: Any) -> Any:
    return parse_client_event(json.dumps({"type": type_, **fields}))


def _speak(text: str = "", ms: float = 0.0, **kwargs: Any) -> Speak:
    tokens = tuple(t for t in re.findall(r"\S*\s*", text) if t)
    audio = np.full(round(ms * OUT_RATE / 1000), 0.1, dtype=np.float32)
    return Speak(tokens=tokens, audio=audio, **kwargs)


class _Harness:
    """An EngineSession on a fake clock, stepping units the way the server's runner does."""

    def __init__(self, **config: Any) -> None:
        self.engine = EngineSession("sess_test", EngineConfig(model="scripted", **config))
        self.engine.start(0.0)

    def send(self, type_: str, now: float, **fields: Any) -> Step:
        return self.engine.handle(_client(type_, **fields), now)

    def unit(self, now: float, ms: int = 1000) -> Unit:
        audio = encode_base64_audio(np.zeros(16 * ms, dtype=np.float32), "pcm16")
        [unit] = self.send("input_audio_buffer.append", now, audio=audio).units
        return unit

    def step(self, unit: Unit, *decisions: Listen | Speak, started: float | None, at: float) -> list[Any]:
        """Step `unit`: its request starts at `started` (`None`: the runner never reported a start)."""
        if started is not None:
            self.engine.request_started(unit, started)
        events: list[Any] = []
        for decision in decisions:
            events += self.engine.on_decision(unit, decision, at).events
        self.engine.step_finished(unit, at)
        return events


def _one(events: list[Any], cls: type[Any]) -> Any:
    [event] = [e for e in events if isinstance(e, cls)]
    return event


# --- the ledger -------------------------------------------------------------------------------------


def test_response_timing_binds_latest_request_start_for_model_turn() -> None:
    ledger = RequestStartLedger()
    ledger.mark_model_turn_request_started(1, 10.0)
    ledger.mark_model_turn_request_started(1, 11.0)  # the turn has no response yet: the latest start wins
    assert ledger.start_of(1) == 11.0

    assert ledger.begin_response(1) == 11.0
    ledger.mark_model_turn_request_started(1, 12.0)  # a continuation step of the open response
    assert ledger.start_of(1) == 11.0  # once the response is open the first start wins

    timing = ResponseTiming(request_start=ledger.begin_response(1))
    assert timing.mark_response_first_outputs(11.25, text=True, audio=True) == FirstOutputs(250.0, 250.0)


def test_begin_response_without_a_request_start_binds_nothing_then_keeps_the_first_start() -> None:
    ledger = RequestStartLedger()
    assert ledger.begin_response(3) is None
    ledger.mark_model_turn_request_started(3, 5.0)
    ledger.mark_model_turn_request_started(3, 6.0)
    assert ledger.start_of(3) == 5.0


def test_only_the_bound_turn_keeps_its_first_start() -> None:
    ledger = RequestStartLedger()
    ledger.mark_model_turn_request_started(1, 1.0)
    ledger.mark_model_turn_request_started(2, 2.0)
    ledger.begin_response(2)
    ledger.mark_model_turn_request_started(1, 3.0)
    ledger.mark_model_turn_request_started(2, 4.0)
    assert (ledger.start_of(1), ledger.start_of(2)) == (3.0, 2.0)


def test_complete_model_turn_forgets_every_start_up_to_and_including_that_turn() -> None:
    ledger = RequestStartLedger()
    for turn in (1, 2, 3):
        ledger.mark_model_turn_request_started(turn, float(turn))
    ledger.begin_response(2)
    ledger.complete_model_turn(2)
    assert [ledger.start_of(t) for t in (1, 2, 3)] == [None, None, 3.0]
    # the binding went with the turn: a start of turn 2 is again "latest wins"
    ledger.mark_model_turn_request_started(2, 7.0)
    ledger.mark_model_turn_request_started(2, 8.0)
    assert ledger.start_of(2) == 8.0


def test_complete_model_turn_keeps_the_binding_of_a_later_turn() -> None:
    ledger = RequestStartLedger()
    ledger.mark_model_turn_request_started(5, 1.0)
    ledger.begin_response(5)
    ledger.complete_model_turn(4)
    ledger.mark_model_turn_request_started(5, 2.0)
    assert ledger.start_of(5) == 1.0


def test_clear_forgets_every_start_and_the_binding() -> None:
    ledger = RequestStartLedger()
    ledger.mark_model_turn_request_started(1, 1.0)
    ledger.begin_response(1)
    ledger.clear()
    assert ledger.start_of(1) is None
    ledger.mark_model_turn_request_started(1, 2.0)
    ledger.mark_model_turn_request_started(1, 3.0)
    assert ledger.start_of(1) == 3.0


# --- first outputs ----------------------------------------------------------------------------------


def test_ttft_counts_only_text_and_ttfp_only_audio() -> None:
    timing = ResponseTiming(request_start=10.0)
    assert timing.mark_response_first_outputs(10.125, text=False, audio=True) == FirstOutputs(None, 125.0)
    assert timing.mark_response_first_outputs(10.5, text=True, audio=False) == FirstOutputs(500.0, None)
    assert (timing.ttft_ms, timing.ttfp_ms) == (500.0, 125.0)


def test_first_outputs_are_reported_only_when_newly_observed() -> None:
    timing = ResponseTiming(request_start=10.0)
    assert timing.mark_response_first_outputs(10.25, text=True, audio=True) == FirstOutputs(250.0, 250.0)
    assert timing.mark_response_first_outputs(10.75, text=True, audio=True) == FirstOutputs(None, None)
    assert (timing.ttft_ms, timing.ttfp_ms) == (250.0, 250.0)


def test_timing_without_a_request_start_observes_nothing_and_reports_none_never_zero() -> None:
    timing = ResponseTiming(request_start=None)
    assert timing.mark_response_first_outputs(3.0, text=True, audio=True) == FirstOutputs(None, None)
    timing.record_segment(4, tpot_ms=None)
    assert (timing.ttft_ms, timing.ttfp_ms, timing.tpot_ms) == (None, None, None)
    assert timing.output_tokens == 4


# --- TPOT -------------------------------------------------------------------------------------------


def test_tpot_over_segments_is_weighted_by_intervals_as_in_the_worked_example() -> None:
    timing = ResponseTiming(request_start=0.0)
    timing.record_segment(11, tpot_ms=10.0)
    timing.record_segment(3, tpot_ms=100.0)
    assert timing.tpot_ms == pytest.approx(25.0)
    assert timing.output_tokens == 14


def test_response_tpot_fallback_ignores_single_token_segment() -> None:
    timing = ResponseTiming(request_start=0.0)
    timing.record_segment(1, tpot_ms=500.0)  # one token: no interval, no weight
    timing.record_segment(5, tpot_ms=20.0)
    assert timing.tpot_ms == pytest.approx(20.0)

    only_single = ResponseTiming(request_start=0.0)
    only_single.record_segment(1, tpot_ms=500.0)
    assert only_single.tpot_ms is None


def test_response_tpot_keeps_token_weighted_value_when_itls_exist() -> None:
    # The worked example: 11 tokens whose inter-token latencies were measured at 10 ms, then 3 tokens at
    # 100 ms with no latencies. Weighted by intervals (10 and 2) that is 25 ms; the mean of the measured
    # latencies alone (10 ms) would drop the second segment.
    timing = ResponseTiming(request_start=0.0)
    timing.record_segment(11, tpot_ms=None, itl_ms=(10.0,) * 10)
    timing.record_segment(3, tpot_ms=100.0)
    assert timing.tpot_ms == pytest.approx(25.0)


def test_measured_latencies_refine_their_segments_tpot_without_changing_its_weight() -> None:
    timing = ResponseTiming(request_start=0.0)
    timing.record_segment(5, tpot_ms=100.0, itl_ms=(10.0,))  # one latency measured: TPOT 10, weight 4
    timing.record_segment(2, tpot_ms=40.0)  # weight 1
    assert timing.tpot_ms == pytest.approx((4 * 10.0 + 1 * 40.0) / 5)


def test_latencies_handed_over_with_fewer_tokens_weigh_as_many_intervals_as_were_measured() -> None:
    """A model releasing text at the pace of its audio (the cascade) hands a phrase's five measured
    latencies over with its first word: they count, not weigh nothing as a one-token segment would."""
    timing = ResponseTiming(request_start=0.0)
    timing.record_segment(1, tpot_ms=None, itl_ms=(30.0,) * 5)
    timing.record_segment(3, tpot_ms=100.0)  # weight 2
    assert timing.tpot_ms == pytest.approx((5 * 30.0 + 2 * 100.0) / 7)


@settings(max_examples=60, deadline=None)
@given(
    segments=st.lists(
        st.tuples(st.integers(2, 50), st.floats(1.0, 500.0, allow_nan=False)), min_size=1, max_size=6
    ),
    singles=st.lists(st.floats(0.0, 5000.0, allow_nan=False), max_size=4),
)
def test_tpot_fallback_is_a_weighted_mean_that_single_token_segments_never_move(
    segments: list[tuple[int, float]], singles: list[float]
) -> None:
    plain, padded = ResponseTiming(request_start=0.0), ResponseTiming(request_start=0.0)
    for tokens, tpot in segments:
        plain.record_segment(tokens, tpot_ms=tpot)
        padded.record_segment(tokens, tpot_ms=tpot)
    for tpot in singles:
        padded.record_segment(1, tpot_ms=tpot)
    assert plain.tpot_ms is not None
    assert min(t for _, t in segments) - 1e-9 <= plain.tpot_ms <= max(t for _, t in segments) + 1e-9
    assert padded.tpot_ms == pytest.approx(plain.tpot_ms)


# --- through the engine session ---------------------------------------------------------------------


def test_response_request_metrics_are_measured_from_the_model_turn_request_start() -> None:
    h = _Harness()
    u0 = h.unit(0.0)
    assert h.step(u0, Listen(), started=10.0, at=10.05)[0].type == "response.listen"

    u1 = h.unit(1.0)
    opened = h.step(u1, _speak("", 1000), started=11.0, at=11.2)  # audio first, no text yet
    created = _one(opened, se.ResponseCreated)
    metrics = created.response_request_metrics
    assert metrics.source == "server_monotonic_request_start"
    assert metrics.measurement_origin.ttft == metrics.measurement_origin.ttfp == "model_turn_request_start"
    assert metrics.ttfp_ms == pytest.approx(200.0)
    assert metrics.ttft_ms is None
    assert _one(opened, se.ResponseOutputAudioDelta).response_request_metrics.ttfp_ms == pytest.approx(200.0)
    assert _one(opened, se.ResponseOutputAudioTranscriptDelta).response_request_metrics is None

    u2 = h.unit(2.0)  # a continuation step: its own request start must not re-anchor the response
    later = h.step(u2, _speak("Hello there", 500, end_of_turn=True), started=12.0, at=12.1)
    transcript = _one(later, se.ResponseOutputAudioTranscriptDelta).response_request_metrics
    assert transcript.source == "server_monotonic_request_start"
    assert transcript.ttft_ms == pytest.approx(1100.0)
    assert transcript.ttfp_ms == pytest.approx(200.0)
    assert _one(later, se.ResponseOutputAudioDelta).response_request_metrics is None  # TTFP already seen
    done = _one(later, se.ResponseDone).response_request_metrics
    assert (done.ttft_ms, done.ttfp_ms) == (pytest.approx(1100.0), pytest.approx(200.0))


def test_metrics_ride_on_response_created_and_the_first_deltas_when_both_arrive_at_once() -> None:
    h = _Harness()
    u0 = h.unit(0.0)
    events = h.step(u0, _speak("Hi", 400), started=1.0, at=1.3)
    for cls in (se.ResponseCreated, se.ResponseOutputAudioDelta, se.ResponseOutputAudioTranscriptDelta):
        metrics = _one(events, cls).response_request_metrics
        assert (metrics.ttft_ms, metrics.ttfp_ms) == (pytest.approx(300.0), pytest.approx(300.0))


def test_the_models_own_latency_split_rides_with_its_first_audio_and_on_response_done() -> None:
    h = _Harness()
    h.step(h.unit(0.0), Speak(), started=1.0, at=1.01)  # the turn's unit opens the response, no output
    split = (("final_decode", 120.0), ("llm_first_token", 80.0))
    first = h.step(h.unit(1.0), _speak("Hi", 400, stages_ms=split), started=2.0, at=2.1)
    assert _one(first, se.ResponseOutputAudioDelta).response_request_metrics.model_stages_ms == dict(split)
    done = h.step(h.unit(2.0), _speak(" there", 400, end_of_turn=True), started=3.0, at=3.1)
    assert _one(done, se.ResponseDone).response_request_metrics.model_stages_ms == dict(split)
    wire = _one(done, se.ResponseDone).model_dump(exclude_none=True)["response_request_metrics"]
    assert wire["model_stages_ms"] == {"final_decode": 120.0, "llm_first_token": 80.0}


def test_a_response_that_keeps_listening_binds_the_latest_request_start() -> None:
    h = _Harness()
    for k, started in enumerate((1.0, 2.0, 3.0)):
        assert h.step(h.unit(float(k)), Listen(), started=started, at=started + 0.1)
    events = h.step(h.unit(3.0), _speak("Yes", 100), started=4.0, at=4.4)
    assert _one(events, se.ResponseCreated).response_request_metrics.ttft_ms == pytest.approx(400.0)


def test_whitespace_only_text_is_not_a_first_token() -> None:
    h = _Harness()
    first = h.step(h.unit(0.0), Speak(tokens=(" ",)), started=1.0, at=1.1)
    assert _one(first, se.ResponseCreated).response_request_metrics.ttft_ms is None
    later = h.step(h.unit(1.0), _speak("Yes", 0), started=None, at=1.5)
    assert _one(later, se.ResponseOutputAudioTranscriptDelta).response_request_metrics.ttft_ms == (
        pytest.approx(500.0)
    )


def test_unobserved_metrics_are_omitted_on_the_wire_never_sent_as_zero() -> None:
    h = _Harness()
    events = h.step(h.unit(0.0), _speak("Hi", 0, end_of_turn=True), started=None, at=1.0)
    created = _one(events, se.ResponseCreated)
    assert "response_request_metrics" not in json.loads(created.model_dump_json(exclude_none=True))
    done = _one(events, se.ResponseDone)
    wire = json.loads(done.model_dump_json(exclude_none=True))["response_request_metrics"]
    assert "source" not in wire  # nothing was measured from a request start: not labelled as if it had been
    assert "measurement_origin" not in wire
    assert "ttft_ms" not in wire
    assert "ttfp_ms" not in wire


def test_response_timing_is_empty_without_a_request_start_and_is_scoped_to_one_response() -> None:
    h = _Harness()

    # no request start at all: nothing is measured
    a = h.step(h.unit(0.0), _speak("One", 200, end_of_turn=True), started=None, at=0.5)
    assert _one(a, se.ResponseCreated).response_request_metrics is None
    metrics = _one(a, se.ResponseDone).response_request_metrics
    assert metrics is not None and (metrics.ttft_ms, metrics.ttfp_ms) == (None, None)
    # not measured is not server-anchored: no source, no origin on the wire
    assert (metrics.source, metrics.measurement_origin) == (None, None)
    assert "source" not in metrics.model_dump(exclude_none=True)

    # a measured response, ended by its turn completing
    b = h.step(h.unit(1.0), _speak("Two", 200, end_of_turn=True), started=5.0, at=5.2)
    assert _one(b, se.ResponseDone).response_request_metrics.ttft_ms == pytest.approx(200.0)

    # the next response does not inherit the completed turn's start
    c = h.step(h.unit(2.0), _speak("Three", 200, end_of_turn=True), started=None, at=6.0)
    assert _one(c, se.ResponseCreated).response_request_metrics is None

    # a start marked before a barge-in does not anchor a response after it
    u3 = h.unit(3.0)
    h.engine.request_started(u3, 7.0)
    h.send("barge_in", 7.1)
    d = h.step(h.unit(4.0), _speak("Four", 200, end_of_turn=True), started=None, at=8.0)
    assert _one(d, se.ResponseCreated).response_request_metrics is None

    # a response cut off by barge-in ends its timing: the next response is measured afresh
    e = h.step(h.unit(5.0), _speak("Five", 1000), started=9.0, at=9.1)
    assert _one(e, se.ResponseCreated).response_request_metrics.ttft_ms == pytest.approx(100.0)
    h.send("barge_in", 9.5)
    f = h.step(h.unit(6.0), _speak("Six", 200), started=10.0, at=10.3)
    assert _one(f, se.ResponseCreated).response_request_metrics.ttft_ms == pytest.approx(300.0)


def test_a_response_opened_before_its_request_start_adopts_the_first_later_start() -> None:
    h = _Harness()
    opened = h.step(h.unit(0.0), _speak("", 0), started=None, at=0.5)  # opens with no output yet
    assert _one(opened, se.ResponseCreated).response_request_metrics is None
    events = h.step(h.unit(1.0), _speak("Hello", 200, end_of_turn=True), started=2.0, at=2.3)
    metrics = _one(events, se.ResponseDone).response_request_metrics
    assert metrics.source == "server_monotonic_request_start"
    assert (metrics.ttft_ms, metrics.ttfp_ms) == (pytest.approx(300.0), pytest.approx(300.0))


def test_an_output_before_the_adopted_start_is_never_measured_against_it() -> None:
    h = _Harness()
    h.step(h.unit(0.0), _speak("One ", 0), started=None, at=0.5)  # text out before any request start
    events = h.step(h.unit(1.0), _speak("two", 200, end_of_turn=True), started=2.0, at=2.3)
    metrics = _one(events, se.ResponseDone).response_request_metrics
    assert metrics.ttft_ms is None  # the first text came before the start: not 300 ms
    assert metrics.ttfp_ms == pytest.approx(300.0)  # the first audio came after it


def test_request_start_of_a_stale_unit_does_not_anchor_the_next_response() -> None:
    h = _Harness()
    stale = h.unit(0.0)
    h.send("barge_in", 0.5)
    h.engine.request_started(stale, 1.0)
    events = h.step(h.unit(1.0), _speak("Hi", 100), started=None, at=2.0)
    assert _one(events, se.ResponseCreated).response_request_metrics is None


def test_response_done_carries_interval_weighted_tpot_and_output_totals() -> None:
    h = _Harness()
    tokens = tuple(f"t{i} " for i in range(11))
    h.step(
        h.unit(0.0), Speak(tokens=tokens, audio=np.zeros(24_000, np.float32), tpot_ms=10.0), started=1, at=1
    )
    events = h.step(
        h.unit(1.0),
        Speak(tokens=("a ", "b ", "c"), audio=np.zeros(12_000, np.float32), tpot_ms=100.0, end_of_turn=True),
        started=None,
        at=2.0,
    )
    done = _one(events, se.ResponseDone)
    assert done.response_request_metrics.tpot_ms == pytest.approx(25.0)
    assert done.response_request_metrics.output_tokens == 14
    assert done.response_request_metrics.output_audio_ms == pytest.approx(1500.0)
    assert done.response.usage.output_tokens == 14


def test_text_only_session_reports_no_ttfp_for_audio_it_never_sent() -> None:
    h = _Harness()
    h.send("session.update", 0.0, session={"modalities": ["text"]})
    events = h.step(h.unit(0.0), _speak("Hi", 500, end_of_turn=True), started=1.0, at=1.2)
    assert _one(events, se.ResponseCreated).response_request_metrics.ttft_ms == pytest.approx(200.0)
    for cls in (se.ResponseCreated, se.ResponseOutputTextDelta, se.ResponseDone):
        assert _one(events, cls).response_request_metrics.ttfp_ms is None
