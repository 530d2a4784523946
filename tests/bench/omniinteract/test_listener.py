"""The simulated listener's serialized playback clock, clears, acks, word timing, and the completion rule,
driven with plain values (Sans-I/O): 24 kHz PCM16, so 24,000 samples (48,000 bytes) are one second."""

from __future__ import annotations

from typing import Any

import pytest

from duplexkit.bench.omniinteract.listener import CompletionTracker, SimulatedListener
from duplexkit.bench.omniinteract.timing import ResponseText, response_chunk
from duplexkit.client.drain import CommitPoint
from duplexkit.client.events import ReceivedEvent


def pcm(seconds: float) -> bytes:
    return bytes(2 * round(seconds * 24_000))


def test_segments_play_one_after_another_on_one_clock() -> None:
    listener = SimulatedListener()
    a = listener.audio("r1", "i1", pcm(1.0), arrival_s=2.0)  # plays 2.0 - 3.0
    b = listener.audio("r1", "i1", pcm(1.0), arrival_s=2.5)  # arrived while a plays: 3.0 - 4.0
    c = listener.audio("r2", "i2", pcm(0.5), arrival_s=6.0)  # the clock is idle by then: 6.0 - 6.5
    assert [(s.start_s, s.end_s) for s in (a, b, c)] == [(2.0, 3.0), (3.0, 4.0), (6.0, 6.5)]
    assert (b.offset, c.offset) == (24_000, 0)  # offsets within each response's own audio
    assert listener.played_ms("r1", 3.5) == 1500.0
    assert listener.played_ms("r1", 10.0) == 2000.0
    assert listener.played_ms("r2", 6.25) == 250.0


def test_a_clear_cuts_what_was_not_played() -> None:
    listener = SimulatedListener()
    listener.audio("r1", "i1", pcm(1.0), 1.0)  # 1.0 - 2.0
    listener.audio("r1", "i1", pcm(1.0), 1.0)  # 2.0 - 3.0
    listener.clear(2.25)
    assert listener.played_ms("r1", 100.0) == 1250.0  # 1 s + 0.25 s heard, the rest dropped
    assert listener.truncated == {"r1"}
    after = listener.audio("r2", None, pcm(0.5), 2.3)
    assert after.start_s == 2.3  # the clock restarted at the clear, so new audio plays on arrival


def test_acks_follow_playback_and_the_final_ack_is_exact() -> None:
    listener = SimulatedListener()
    listener.audio("r1", "i1", pcm(0.75), 0.0)
    assert listener.acks_due(0.1) == []  # 100 ms played: less than a 200 ms step
    assert listener.acks_due(0.25) == [("r1", "i1", 250.0)]
    assert listener.acks_due(0.3) == []
    assert listener.acks_due(0.5) == [("r1", "i1", 500.0)]
    assert listener.final_acks(0.6) == [("r1", "i1", 600.0)]  # exact, not rounded to a step
    assert listener.final_acks(0.6) == []  # nothing new to acknowledge


def event(data: dict[str, Any], at: float) -> ReceivedEvent:
    return ReceivedEvent(data, at, 0.0)


def done(rid: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "response.done", "response": {"id": rid, "status": status}}


def test_completion_needs_the_ack_a_decision_after_the_commit_no_open_response_and_quiet() -> None:
    tracker = CompletionTracker()
    tracker.observe(event({"type": "response.created", "response": {"id": "r1"}}, 1.0))
    tracker.observe(event(done("r1"), 2.0))  # a decision, but before the commit: does not count
    tracker.commit_sent(5.0)
    tracker.observe(event({"type": "input_audio_buffer.committed"}, 5.1))
    assert not tracker.poll(100.0, 2.0).complete  # no decision after the commit yet
    buffering = {"reason": "buffering", "model_listen": False}
    tracker.observe(event({"type": "response.listen", "response": {"metadata": buffering}}, 5.2))
    assert not tracker.poll(100.0, 2.0).complete  # a unit not stepped yet is no decision
    tracker.observe(event({"type": "response.listen", "response": {"metadata": {"model_listen": True}}}, 5.3))
    tracker.observe(event({"type": "playback.acknowledged"}, 7.0))  # housekeeping: not an event here
    status = tracker.poll(7.2, 2.0)
    assert not status.complete and status.wake_at == pytest.approx(7.3)
    assert tracker.poll(7.3, 2.0).complete


def test_a_lagging_models_late_listens_of_earlier_units_do_not_complete_the_case() -> None:
    tracker = CompletionTracker()
    tracker.expect_commit(CommitPoint(media_ms=6000.0, units_due=6))
    tracker.commit_sent(6.0)
    tracker.observe(event({"type": "input_audio_buffer.committed"}, 6.1))
    model_listen = {"metadata": {"reason": "model_listen", "model_listen": True}}
    for k, at in ((4, 6.5), (5, 7.5)):  # the backlog: units ending at 4 s and 5 s, after the commit
        listen = {"type": "response.listen", "response": model_listen, "unit_end_ms": k * 1000.0}
        tracker.observe(event(listen, at))
    assert not tracker.decided and not tracker.poll(100.0, 2.0).complete
    on_commit = {"type": "response.listen", "response": model_listen, "unit_end_ms": 6000.0}
    tracker.observe(event(on_commit, 8.5))
    assert tracker.decided and tracker.poll(10.5, 2.0).complete


def test_an_open_response_holds_completion_and_errors_are_tolerated_or_fatal() -> None:
    tracker = CompletionTracker()
    tracker.commit_sent(1.0)
    tracker.observe(event({"type": "input_audio_buffer.committed"}, 1.1))
    tracker.observe(event({"type": "response.created", "response": {"id": "r1"}}, 1.2))
    tracker.observe(event({"type": "error", "error": {"code": "playback_item_not_found"}}, 1.3))
    tracker.observe(event({"type": "error", "error": {"code": "playback_ack_too_late"}}, 1.4))
    assert not tracker.poll(50.0, 2.0).complete and tracker.poll(50.0, 2.0).failure is None
    tracker.observe(event(done("r1"), 1.5))
    assert tracker.poll(3.5, 2.0).complete
    tracker.observe(event({"type": "error", "error": {"code": "model_error"}}, 4.0))
    assert tracker.poll(10.0, 2.0).failure is not None


def test_words_from_audio_text_marks_land_on_the_playback_timeline() -> None:
    listener = SimulatedListener()
    listener.audio("r1", None, pcm(1.0), 10.0)  # the response's audio 0-1000 ms plays 10.0 - 11.0
    listener.audio("r1", None, pcm(1.0), 10.2)  # 1000-2000 ms plays 11.0 - 12.0
    text = ResponseText("r1", deltas=[("red cup", 10.0), (" here", 10.2)], marks=[(7, 1000.0), (12, 2000.0)])
    chunk, source = response_chunk(text, listener.segments)
    assert source == "audio_text_marks" and chunk is not None
    # "red" = chars 0-3 -> 0 to 3/7 s of audio; "cup" 4-7 -> 4/7 s to 1 s; "here" 8-12 -> 1.2 s to 2 s
    assert [(w.text, w.start, w.end) for w in chunk.words or ()] == [
        ("red", 10.0, 10.429),
        ("cup", 10.571, 11.0),
        ("here", 11.2, 12.0),
    ]


def test_without_marks_words_take_their_delta_span_and_cut_audio_is_not_heard() -> None:
    listener = SimulatedListener()
    listener.audio("r1", None, pcm(1.0), 3.0)  # 3.0 - 4.0
    listener.audio("r1", None, pcm(1.0), 3.0)  # 4.0 - 5.0, then cut away by a clear at 4.0
    listener.clear(4.0)
    text = ResponseText("r1", deltas=[("it is", 3.0), (" blue", 3.0)])
    chunk, source = response_chunk(text, listener.segments)
    assert source == "delta_chunks" and chunk is not None
    assert chunk.text == "it is" and (chunk.start, chunk.end) == (3.0, 4.0)


def test_a_listen_on_a_silent_unit_settles_the_commit() -> None:
    tracker = CompletionTracker()
    tracker.commit_sent(1.0)
    tracker.observe(event({"type": "input_audio_buffer.committed"}, 1.1))
    silent = {"reason": "silence_or_noise", "model_listen": False}
    tracker.observe(event({"type": "response.listen", "response": {"metadata": silent}}, 1.2))
    assert tracker.poll(3.2, 2.0).complete


async def test_periodic_acks_go_on_after_one_timed_out() -> None:
    import asyncio
    import time

    from duplexkit.bench.omniinteract.runner import _Pump

    class Client:
        """What the pump uses of a client: its events and a send that times out the first time."""

        events: list[ReceivedEvent] = []
        sent: list[Any] = []
        first, second = asyncio.Event(), asyncio.Event()

        async def send(self, event: Any, *, timeout_s: float) -> None:
            self.sent.append(event)
            if len(self.sent) == 1:
                self.first.set()
                raise TimeoutError
            self.second.set()

    client = Client()
    pump = _Pump(client, origin=time.monotonic() - 10.0)  # type: ignore[arg-type]
    pump.listener.audio("r1", "i1", pcm(1.0), arrival_s=0.0)  # fully played: one ack due, and it times out
    running = asyncio.create_task(pump.run(timeout_s=0.1))
    try:
        await asyncio.wait_for(client.first.wait(), timeout=5.0)
        pump.listener.audio("r2", "i2", pcm(1.0), arrival_s=1.0)  # more playback: the next ack is due
        await asyncio.wait_for(client.second.wait(), timeout=5.0)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert [ack.response_id for ack in client.sent] == ["r1", "r2"] and pump.ack_timeouts == 1
