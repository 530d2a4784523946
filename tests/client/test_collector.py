"""EventCollector: per-response and per-session timing with their sources, sentences, audio, event dump."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest

from duplexkit.client.collector import (
    COMMIT_SOURCE,
    CREATED_SOURCE,
    SERVER_SOURCE,
    STREAM_SOURCE,
    EventCollector,
    dump_events,
)
from duplexkit.client.events import ReceivedEvent, error_code_of, error_message_of
from duplexkit.protocol.audio import encode_base64_audio


def audio_b64(ms: float, value: float = 0.0, rate: int = 24_000) -> str:
    return encode_base64_audio(np.full(round(ms * rate / 1000), value, np.float32), "pcm16")


class Session:
    """Feeds a collector events at given client times (media clock = `media_ms`)."""

    def __init__(self) -> None:
        self.collector = EventCollector()
        self.media_ms = 0.0

    def ev(self, at: float, event_type: str, **fields: Any) -> None:
        self.collector.observe(ReceivedEvent({"type": event_type, **fields}, at, self.media_ms))

    def created(self, at: float, rid: str = "r1", **fields: Any) -> None:
        self.ev(
            at,
            "response.created",
            response={"id": rid, "status": "in_progress", **fields.pop("response", {})},
            **fields,
        )

    def text(self, at: float, text: str, rid: str = "r1", **fields: Any) -> None:
        self.ev(
            at, "response.output_audio_transcript.delta", response_id=rid, item_id="i1", delta=text, **fields
        )

    def audio(self, at: float, ms: float, rid: str = "r1", value: float = 0.0, **fields: Any) -> None:
        self.ev(
            at,
            "response.output_audio.delta",
            response_id=rid,
            item_id="i1",
            delta=audio_b64(ms, value),
            sample_rate_hz=24_000,
            **fields,
        )

    def done(self, at: float, rid: str = "r1", **fields: Any) -> None:
        self.ev(at, "response.done", response={"id": rid, "status": "completed"}, **fields)


def test_the_worked_example_on_the_client_receive_clock() -> None:
    # stream start 10.0, response.created at 10.1, text at 10.2, 100 ms of audio at 10.3
    s = Session()
    s.collector.stream_started(10.0)
    s.created(10.1)
    s.text(10.2, "Hello.")
    s.audio(10.3, 100.0)
    s.done(10.4)
    [response] = s.collector.responses()
    assert response.source == CREATED_SOURCE  # no commit: anchored at its response.created
    assert response.ttft_ms == pytest.approx(100.0)
    assert response.ttfp_ms == pytest.approx(200.0)
    assert response.rtf == pytest.approx(2.0)
    assert response.tpot_ms is None  # a client cannot see token boundaries
    assert response.status == "completed"
    session = s.collector.session()
    assert session.stream_ttft_ms == pytest.approx(200.0)
    assert session.stream_ttfp_ms == pytest.approx(300.0)
    assert session.source == STREAM_SOURCE
    assert session.turns == 1


def test_client_receive_latency_is_measured_from_the_commit_send_for_the_next_response_only() -> None:
    s = Session()
    s.collector.commit_sent(9.9)
    s.created(10.1)
    s.text(10.2, "First.")
    s.done(10.3)
    s.created(20.0, rid="r2")
    s.text(20.5, "Second.", rid="r2")
    first, second = s.collector.responses()
    assert first.ttft_ms == pytest.approx(300.0)
    assert second.ttft_ms == pytest.approx(500.0)  # anchored at its own response.created
    # two definitions, two labels: never pooled as one client-clock TTFT
    assert (first.source, second.source) == (COMMIT_SOURCE, CREATED_SOURCE)


def test_our_server_metrics_are_adopted_and_labelled() -> None:
    m = {"source": "server_monotonic_request_start", "ttft_ms": 150.0, "ttfp_ms": 180.0}
    s = Session()
    s.created(10.1, response_request_metrics={"source": m["source"]})
    s.audio(10.3, 100.0, response_request_metrics=m)
    s.text(10.3, "Hi.", response_request_metrics=m)
    s.audio(10.5, 100.0)
    s.done(10.6, response_request_metrics={**m, "tpot_ms": 25.0})
    [r] = s.collector.responses()
    assert r.source == SERVER_SOURCE
    assert (r.ttft_ms, r.ttfp_ms, r.tpot_ms) == (150.0, 180.0, 25.0)
    # RTF = (server TTFP + receive span of the audio) / audio duration = (180 + 200) / 200
    assert r.rtf == pytest.approx(1.9)


def test_vllm_omni_placements_are_read() -> None:
    m = {"source": "server_monotonic_request_start", "ttft_ms": 120.0, "ttfp_ms": 140.0}
    s = Session()
    s.created(10.1, response={"metadata": {"duplex_event": {"response_request_metrics": m}}})
    s.audio(10.3, 100.0, metadata={"vllm_omni": {"response_request_metrics": {**m, "ttfp_ms": 999.0}}})
    [r] = s.collector.responses()
    assert r.source == SERVER_SOURCE
    assert r.ttft_ms == 120.0
    assert r.ttfp_ms == 140.0  # the first value seen wins


def test_server_values_it_did_not_send_stay_none_never_filled_from_the_client_clock() -> None:
    s = Session()
    s.created(10.1, response_request_metrics={"source": "server_monotonic_request_start", "ttfp_ms": 90.0})
    s.text(10.2, "Text the server did not time.")
    s.audio(10.3, 100.0)
    s.done(10.4)
    [r] = s.collector.responses()
    assert r.source == SERVER_SOURCE
    assert r.ttfp_ms == 90.0
    assert r.ttft_ms is None
    assert r.tpot_ms is None


def test_metrics_from_another_clock_are_not_presented_as_the_servers() -> None:
    s = Session()
    s.created(10.1, response_request_metrics={"source": "somebody_elses_clock", "ttft_ms": 1.0})
    s.text(10.2, "Hi.")
    [r] = s.collector.responses()
    assert r.source == CREATED_SOURCE
    assert r.ttft_ms == pytest.approx(100.0)


def test_unseen_values_are_none_not_zero() -> None:
    s = Session()
    s.created(10.1)
    s.text(10.2, "   ")  # whitespace is not a first token
    [r] = s.collector.responses()
    assert (r.ttft_ms, r.ttfp_ms, r.tpot_ms, r.rtf, r.inter_chunk_gap_ms, r.status) == (None,) * 6
    assert r.audio_chunks == 0 and r.audio_ms == 0.0
    session = s.collector.session()
    assert (session.stream_ttft_ms, session.stream_ttfp_ms, session.stream_rtf) == (None, None, None)
    assert s.collector.open_responses() == ["r1"]


def test_inter_chunk_gaps_and_audio_duration() -> None:
    s = Session()
    s.created(10.0)
    for at in (10.3, 10.4, 10.6, 11.0):
        s.audio(at, 250.0)
    [r] = s.collector.responses()
    assert r.audio_chunks == 4 and r.audio_ms == pytest.approx(1000.0)
    gaps = r.inter_chunk_gap_ms
    assert gaps is not None
    assert (gaps.count, gaps.mean, gaps.p50, gaps.max) == pytest.approx((3, 700 / 3, 200.0, 400.0))


def test_audio_at_another_rate_is_counted_at_its_own_rate() -> None:
    s = Session()
    s.created(10.0)
    s.ev(
        10.1,
        "response.output_audio.delta",
        response_id="r1",
        delta=audio_b64(100.0, rate=16_000),
        sample_rate_hz=16_000,
    )
    [r] = s.collector.responses()
    assert r.audio_ms == pytest.approx(100.0)
    assert len(s.collector.output_audio()) == 2400  # resampled to 24 kHz


def test_output_audio_sits_on_its_playback_timeline() -> None:
    s = Session()
    s.created(1.0)
    s.media_ms = 500.0
    s.audio(1.1, 100.0, value=0.5)
    s.media_ms = 520.0  # arrives while the first chunk still plays: queued right after it
    s.audio(1.2, 100.0, value=0.25)
    s.media_ms = 1000.0  # after a gap: starts at its own media time
    s.audio(1.7, 100.0, value=-0.5)
    out = s.collector.output_audio()
    assert len(out) == 24 * 1100
    assert np.all(out[: 24 * 500] == 0)
    assert np.allclose(out[24 * 500 : 24 * 600], 0.5, atol=1e-4)
    assert np.allclose(out[24 * 600 : 24 * 700], 0.25, atol=1e-4)
    assert np.all(out[24 * 700 : 24 * 1000] == 0)
    assert np.allclose(out[24 * 1000 :], -0.5, atol=1e-4)


def test_sentences_use_the_media_clock_and_never_span_two_responses() -> None:
    s = Session()
    s.created(1.0)
    s.media_ms = 4000.0
    s.text(1.1, "Hello there")
    s.done(1.2)
    s.created(2.0, rid="r2")
    s.media_ms = 5200.0
    s.text(2.1, "Next. And", rid="r2")
    assert [x.to_json() for x in s.collector.sentences()] == [
        {"sentence": "Hello there", "start": 4.0, "end": 4.0},
        {"sentence": "Next.", "start": 5.2, "end": 5.2},
        {"sentence": "And", "start": 5.2, "end": 5.2},
    ]


def test_a_sentence_spans_its_own_audio_not_the_arrival_of_its_text() -> None:
    # Seen: a sentence timed 3.2-3.8 s whose audio ran 3.0-5.5 s. Without marks the text spreads evenly
    # over the response's audio: "Hello there." is 12 of 25 characters, so 3.0-4.2 s, the rest 4.3-5.5 s.
    s = Session()
    s.created(1.0)
    s.media_ms = 3000.0
    s.audio(1.1, 2500.0, value=0.1)
    s.media_ms = 3200.0
    s.text(1.2, "Hello there. ")
    s.media_ms = 3800.0
    s.text(1.8, "How are you?")
    assert [x.to_json() for x in s.collector.sentences()] == [
        {"sentence": "Hello there.", "start": 3.0, "end": 4.2},
        {"sentence": "How are you?", "start": 4.3, "end": 5.5},
    ]


def test_by_arrival_a_sentence_spans_its_deltas_read_on_the_media_clock_sent() -> None:
    # vLLM-Omni's runner rule (--sentence-timing arrival): the same deltas as above, each read as the
    # audio_end_ms the client had sent when it arrived (3000 and 3600 ms), not where its audio plays.
    collector = EventCollector(sentence_timing="arrival")
    observed = [
        (
            {"type": "response.created", "response": {"id": "r1", "status": "in_progress"}},
            1.0,
            2950.0,
            2800.0,
        ),
        (
            {"type": "response.output_audio.delta", "response_id": "r1", "delta": audio_b64(2500.0, 0.1)},
            1.1,
            3050.0,
            2800.0,
        ),
        (
            {"type": "response.output_audio_transcript.delta", "response_id": "r1", "delta": "Hello there. "},
            1.2,
            3150.0,
            3000.0,
        ),
        (
            {"type": "response.output_audio_transcript.delta", "response_id": "r1", "delta": "How are you?"},
            1.8,
            3750.0,
            3600.0,
        ),
    ]
    for data, at, heard, sent in observed:
        collector.observe(ReceivedEvent(data, at, heard, sent))
    assert [x.to_json() for x in collector.sentences()] == [
        {"sentence": "Hello there.", "start": 3.0, "end": 3.0},
        {"sentence": "How are you?", "start": 3.6, "end": 3.6},
    ]


def test_with_marks_a_sentence_spans_the_audio_the_server_says_voiced_it() -> None:
    s = Session()
    s.created(1.0)
    s.media_ms = 9000.0  # both sentences' text arrives at once: by arrival they would be 9.00-9.00 s
    s.text(1.1, "One. Two.")
    s.audio(1.1, 1000.0, value=0.1, metadata={"audio_text_marks": [{"text_chars": 5, "audio_end_ms": 400.0}]})
    s.audio(
        1.2, 1000.0, value=0.1, metadata={"audio_text_marks": [{"text_chars": 9, "audio_end_ms": 2000.0}]}
    )
    sentences = [x.to_json() for x in s.collector.sentences()]
    assert sentences == [
        {"sentence": "One.", "start": 9.0, "end": 9.32},
        {"sentence": "Two.", "start": 9.4, "end": 11.0},
    ]


def test_concatenated_placement_puts_output_at_its_place_in_the_server_s_stream() -> None:
    s = Session()
    s.collector.placement = "concatenated"
    s.created(1.0)
    s.media_ms = 2000.0  # arrival says 2 s; the output stream says frame 10, 800 ms
    s.audio(1.1, 80.0, value=0.5, output_stream_ms=800.0)
    s.media_ms = 2500.0
    s.audio(1.6, 80.0, value=0.5)  # no place in the stream: its arrival
    assert [c.start for c in s.collector.audio_placements()] == [24 * 800, 24 * 2500]


def test_one_response_text_is_read_from_one_delta_kind_only() -> None:
    s = Session()
    s.created(1.0)
    s.text(1.1, "Once.")
    s.ev(1.1, "response.output_text.delta", response_id="r1", delta="Once.")
    assert [x.sentence for x in s.collector.sentences()] == ["Once."]
    assert s.collector.responses()[0].text == "Once."


def test_errors_are_kept_and_only_non_benign_ones_fail_the_session() -> None:
    s = Session()
    s.ev(1.0, "error", error={"code": "playback_ack_too_late", "message": "late"})
    s.ev(1.05, "error", error={"code": "stale_function_call_output", "message": "retired by a barge-in"})
    assert s.collector.failures() == []
    s.ev(1.1, "error", error={"code": "model_step_failed", "message": "boom"})
    assert [e["error"]["code"] for e in s.collector.failures()] == ["model_step_failed"]
    assert len(s.collector.errors) == 3


def test_a_failed_responses_error_fails_the_session_as_an_error_event_does() -> None:
    """OpenAI (and duplexkit) report a failure within a response on its `response.done`."""
    s = Session()
    s.created(1.0)
    s.ev(1.1, "response.done", response={"id": "r1", "status": "cancelled", "status_details": {}})
    assert s.collector.failures() == []
    error = {"type": "server_error", "code": "model_step_failed", "message": "boom"}
    details = {"type": "failed", "reason": "model_error", "error": error}
    s.ev(1.2, "response.done", response={"id": "r2", "status": "failed", "status_details": details})
    [failure] = s.collector.failures()
    assert (error_code_of(failure), error_message_of(failure)) == ("model_step_failed", "boom")


def test_playback_positions_report_audio_received_per_response() -> None:
    s = Session()
    s.created(1.0)
    s.audio(1.1, 100.0)
    s.audio(1.2, 60.0)
    assert s.collector.playback_positions() == [("r1", "i1", pytest.approx(160.0))]


def test_the_event_dump_replaces_audio_with_byte_counts() -> None:
    delta = audio_b64(100.0)
    events = [
        ReceivedEvent(
            {"type": "response.output_audio.delta", "delta": delta, "response_id": "r"}, 5.5, 1200.0
        ),
        ReceivedEvent({"type": "response.output_audio_transcript.delta", "delta": "Hi"}, 5.75, 1400.0),
    ]
    dumped = dump_events(events, origin=5.0)
    assert dumped[0] == {
        "t_ms": 500.0,
        "media_ms": 1200.0,
        "event": {"type": "response.output_audio.delta", "response_id": "r", "delta_bytes": 4800},
    }
    assert dumped[1]["event"]["delta"] == "Hi"
    assert len(base64.b64decode(delta)) == 4800


def test_a_response_the_server_could_not_anchor_is_measured_on_the_client_clock_and_says_so() -> None:
    # What our server sends for a response with no request start: metrics without a source.
    s = Session()
    s.collector.commit_sent(10.0)
    s.created(10.1)
    s.text(10.2, "Hi.")
    s.done(10.4, response_request_metrics={"output_tokens": 1})
    [r] = s.collector.responses()
    assert r.source == COMMIT_SOURCE
    assert r.ttft_ms == pytest.approx(200.0)
