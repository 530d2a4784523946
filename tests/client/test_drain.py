"""DrainTracker: when the replies to a commit have settled (listen acknowledgements are not activity)."""

from __future__ import annotations

from typing import Any

from duplexkit.client.drain import CommitPoint, DrainTracker
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


# --- which decision answers the committed unit --------------------------------------------------------


def marked_listen(at: float, unit_end_ms: float) -> ReceivedEvent:
    return ev(
        "response.listen",
        at,
        unit_end_ms=unit_end_ms,
        response={"status": "listening", "metadata": {"model_listen": True}},
    )


def test_late_listens_of_earlier_units_are_not_the_decision_when_the_server_marks_units() -> None:
    # Commit at 5500 ms; a lagging model's listens for units ending at 4000 and 5000 ms arrive after the
    # acknowledgement: they answer earlier units, so the quiet window never starts on them.
    tracker = feed(
        DrainTracker(0.0, [], CommitPoint(media_ms=5500.0, units_due=6)),
        ev("input_audio_buffer.committed", 0.1),
        marked_listen(0.5, 4000.0),
        marked_listen(1.5, 5000.0),
    )
    assert tracker.rule == "server_unit_end"
    assert not tracker.poll(30.0, SETTLE).settled
    tracker.observe(ev("response.created", 3.0, unit_end_ms=5500.0, response={"id": "r"}))
    tracker.observe(ev("response.done", 3.5, response={"id": "r", "status": "completed"}))
    assert not tracker.poll(5.4, SETTLE).settled
    assert tracker.poll(5.5, SETTLE).settled


def test_a_marked_listen_on_the_committed_unit_or_later_is_the_decision() -> None:
    tracker = feed(
        DrainTracker(0.0, [], CommitPoint(media_ms=5500.0, units_due=6)),
        ev("input_audio_buffer.committed", 0.1),
        marked_listen(0.5, 5499.6),  # rounded on the wire: within tolerance of the commit
    )
    assert tracker.decided
    assert tracker.poll(2.1, SETTLE).settled


def test_without_marks_the_decision_is_the_answer_to_the_units_due_th_unit() -> None:
    # vLLM-Omni sends no unit marks: 6 units up to the commit, 3 answered before it; the 4th and 5th
    # answers (late listens) are earlier units', the 6th answers the committed unit.
    tracker = feed(
        DrainTracker(0.0, [], CommitPoint(media_ms=5500.0, units_due=6, units_answered=3)),
        ev("input_audio_buffer.committed", 0.1),
        listen(0.5),
        listen(1.5),
    )
    assert tracker.rule == "unit_count"
    assert not tracker.decided
    assert not tracker.poll(30.0, SETTLE).settled
    tracker.observe(listen(2.5))
    assert tracker.decided
    assert tracker.poll(30.0, SETTLE).settled


def test_without_marks_a_reply_opening_on_the_committed_unit_is_the_decision() -> None:
    tracker = feed(
        DrainTracker(0.0, [], CommitPoint(media_ms=5500.0, units_due=6, units_answered=5)),
        ev("input_audio_buffer.committed", 0.1),
        ev("response.created", 0.5, response={"id": "r"}),
    )
    assert tracker.decided
    tracker.observe(ev("response.audio.delta", 0.6, response_id="r", delta=""))
    tracker.observe(ev("response.done", 1.0, response={"id": "r", "status": "completed"}))
    assert tracker.poll(3.0, SETTLE).settled
