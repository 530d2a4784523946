"""DrainTracker: when the replies to a commit have settled (listen acknowledgements are not activity)."""

from __future__ import annotations

from typing import Any

from duplexkit.client.drain import DrainTracker
from duplexkit.client.events import ReceivedEvent

SETTLE = 2.0


def ev(event_type: str, at: float, **fields: Any) -> ReceivedEvent:
    return ReceivedEvent({"type": event_type, **fields}, at, 0.0)


def listen(at: float) -> ReceivedEvent:
    return ev("response.listen", at, response={"status": "listening", "metadata": {"model_listen": True}})


def feed(tracker: DrainTracker, *events: ReceivedEvent) -> DrainTracker:
    for event in events:
        tracker.observe(event)
    return tracker


def test_a_committed_clip_answered_only_by_a_listen_settles_after_the_quiet_window() -> None:
    tracker = feed(DrainTracker(0.0, []), ev("input_audio_buffer.committed", 0.1), listen(0.3))
    assert not tracker.poll(2.0, SETTLE).settled
    status = tracker.poll(2.1, SETTLE)
    assert status.settled


def test_listens_for_padded_units_do_not_restart_the_quiet_window() -> None:
    tracker = feed(DrainTracker(0.0, []), ev("input_audio_buffer.committed", 0.1))
    for k in range(1, 30):  # a listen every 100 ms, faster than the window
        tracker.observe(listen(0.1 + k * 0.1))
    assert tracker.listens == 29
    assert tracker.poll(2.1, SETTLE).settled


def test_without_a_decision_after_the_commit_nothing_settles() -> None:
    tracker = feed(DrainTracker(0.0, []), ev("input_audio_buffer.committed", 0.1))
    status = tracker.poll(100.0, SETTLE)
    assert not status.settled and status.wake_at is None


def test_a_listen_before_the_acknowledgement_is_not_the_decision() -> None:
    tracker = feed(DrainTracker(0.0, []), listen(0.05), ev("input_audio_buffer.committed", 0.1))
    assert not tracker.poll(100.0, SETTLE).settled


def test_without_the_commit_acknowledgement_nothing_settles() -> None:
    tracker = feed(DrainTracker(0.0, []), listen(0.3))
    assert not tracker.poll(100.0, SETTLE).settled


def test_every_created_response_must_be_done_including_those_open_at_the_commit() -> None:
    tracker = feed(
        DrainTracker(0.0, ["resp_before"]),
        ev("input_audio_buffer.committed", 0.1),
        ev("response.created", 0.3, response={"id": "resp_after"}),
        ev("response.done", 1.0, response={"id": "resp_after", "status": "completed"}),
    )
    assert not tracker.poll(50.0, SETTLE).settled
    tracker.observe(ev("response.done", 51.0, response={"id": "resp_before", "status": "completed"}))
    status = tracker.poll(52.0, SETTLE)
    assert not status.settled and status.wake_at == 53.0  # the done restarted the window
    assert tracker.poll(53.0, SETTLE).settled


def test_reply_events_restart_the_window_but_acknowledgements_of_our_own_events_do_not() -> None:
    tracker = feed(
        DrainTracker(0.0, []),
        ev("input_audio_buffer.committed", 0.1),
        ev("response.created", 0.2, response={"id": "r"}),
        ev("response.output_audio.delta", 0.5, response_id="r", delta=""),
        ev("response.done", 1.0, response={"id": "r"}),
        ev("playback.acknowledged", 1.5, response_id="r", played_ms=100.0),
        ev("session.heartbeat_ack", 2.5),
        ev("error", 2.8, error={"type": "invalid_request_error", "code": "playback_ack_too_late"}),
    )
    assert tracker.poll(2.9, SETTLE).wake_at == 3.0
    assert tracker.poll(3.0, SETTLE).settled


def test_a_session_failing_error_ends_the_drain_with_that_error() -> None:
    error = {"type": "error", "error": {"type": "server_error", "code": "model_step_failed", "message": "x"}}
    tracker = feed(DrainTracker(0.0, []), ev("input_audio_buffer.committed", 0.1))
    tracker.observe(ReceivedEvent(error, 0.2, 0.0))
    status = tracker.poll(0.3, SETTLE)
    assert not status.settled
    assert status.failure == error
