"""DrainTracker: when the replies to a commit have settled: the quiet window in decided units, or, for a
server that stopped answering units, a window of seconds without hearing from it."""

from __future__ import annotations

import math
from typing import Any

from duplexkit.client.drain import CommitPoint, DrainTracker
from duplexkit.client.events import ReceivedEvent

SETTLE = 2.0


def ev(event_type: str, at: float, **fields: Any) -> ReceivedEvent:
    return ReceivedEvent({"type": event_type, **fields}, at, 0.0)


def listen(at: float) -> ReceivedEvent:
    return ev("response.listen", at, response={"status": "listening", "metadata": {"model_listen": True}})


def reply(at: float) -> tuple[ReceivedEvent, ...]:
    """A response "r" created with its first audio at `at`, done 0.1 s later."""
    return (
        ev("response.created", at, response={"id": "r"}),
        ev("response.output_audio.delta", at, response_id="r", delta=""),
        ev("response.done", at + 0.1, response={"id": "r", "status": "completed"}),
    )


def feed(tracker: DrainTracker, *events: ReceivedEvent) -> DrainTracker:
    for event in events:
        tracker.observe(event)
    return tracker


def test_a_committed_clip_answered_only_by_listens_settles_once_the_window_s_units_are_decided() -> None:
    # 1000 ms units, a 2 s window: the listen deciding the committed unit, then two more quiet units.
    tracker = feed(DrainTracker(0.0, []), ev("input_audio_buffer.committed", 0.1), listen(0.3))
    assert tracker.decided
    assert not tracker.poll(1.3, SETTLE).settled
    tracker.observe(listen(1.3))
    assert not tracker.poll(2.3, SETTLE).settled
    tracker.observe(listen(2.3))
    status = tracker.poll(2.3, SETTLE)  # long before a 2 s wall window after the last event
    assert status.settled and status.wake_at is None and tracker.settled_by == "units"


def test_the_window_spans_the_ceiling_of_settle_over_the_unit() -> None:
    assert CommitPoint(unit_ms=200).quiet_units(0.5) == 3
    assert CommitPoint(unit_ms=80).quiet_units(2.0) == 25
    assert CommitPoint(unit_ms=1000).quiet_units(0.0) == 0


def test_a_server_slower_than_real_time_answering_one_unit_after_the_commit_gets_its_reply() -> None:
    # 1000 ms units, commit at 3000 ms (3 units due), sent at t = 3.0. The server takes 1.5 s per unit: it
    # decides unit k (ending at k s) at 1.5 k s, so the committed unit at 4.5 s, and it speaks on the unit
    # after it, at 6.0 s. A 2 s wall window after the commit ran out at 5.0 s, before the reply.
    tracker = DrainTracker(3.0, [], CommitPoint(media_ms=3000.0, units_due=3, units_answered=1))
    feed(tracker, listen(3.0), ev("input_audio_buffer.committed", 3.01), listen(4.5))
    assert tracker.decided
    assert not tracker.poll(5.0, SETTLE).settled
    feed(
        tracker,
        *reply(6.0),
        listen(7.5),
    )
    assert not tracker.poll(8.9, SETTLE).settled  # the reply's own unit restarted the count
    tracker.observe(listen(9.0))  # the second unit after it, decided quiet
    assert tracker.poll(9.0, SETTLE).settled and tracker.settled_by == "units"


def test_speaking_restarts_the_count_of_quiet_units() -> None:
    tracker = feed(DrainTracker(0.0, []), ev("input_audio_buffer.committed", 0.1), listen(0.3), listen(1.3))
    tracker.observe(ev("response.created", 2.3, response={"id": "r"}))
    tracker.observe(ev("response.done", 2.4, response={"id": "r", "status": "completed"}))
    tracker.observe(listen(3.3))
    assert not tracker.poll(3.3, SETTLE).settled
    tracker.observe(listen(4.3))
    assert tracker.poll(4.3, SETTLE).settled


def test_a_server_that_stops_answering_units_settles_after_a_window_without_hearing_from_it() -> None:
    # It steps only on input (or speaks a protocol without per-unit answers): after its reply, nothing.
    tracker = feed(
        DrainTracker(0.0, [], CommitPoint(units_due=1)),
        ev("input_audio_buffer.committed", 0.1),
        ev("response.created", 0.2, response={"id": "r"}),
        ev("response.done", 0.5, response={"id": "r", "status": "completed"}),
        ev("playback.acknowledged", 1.5, response_id="r", played_ms=100.0),  # housekeeping: not heard from
    )
    status = tracker.poll(2.4, SETTLE)
    assert not status.settled and status.wake_at == 2.5
    assert tracker.poll(2.5, SETTLE).settled and tracker.settled_by == "wall_clock"


def test_a_server_still_deciding_units_is_never_silent_for_a_window() -> None:
    tracker = feed(DrainTracker(0.0, [], CommitPoint(units_due=1)), ev("input_audio_buffer.committed", 0.1))
    for k in range(1, 30):  # the model keeps speaking, one output every 100 ms, no listen
        tracker.observe(ev("response.output_text.delta", 0.1 * k, response_id="r", delta="."))
    assert not tracker.poll(3.0, SETTLE).settled
    assert tracker.poll(4.9, SETTLE).settled  # 2 s after it was last heard from


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


def test_reply_events_restart_the_wall_clock_window_but_acknowledgements_of_our_own_events_do_not() -> None:
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
    assert not tracker.poll(30.0, SETTLE).settled  # not decided: no window runs, whatever the wall clock
    tracker.observe(ev("response.created", 3.0, unit_end_ms=5500.0, response={"id": "r"}))
    tracker.observe(ev("response.done", 3.5, response={"id": "r", "status": "completed"}))
    assert not tracker.poll(3.5, SETTLE).settled
    feed(tracker, marked_listen(4.0, 6500.0), marked_listen(4.0, 6500.0))  # one unit, however often
    feed(tracker, marked_listen(4.2, 6700.0))  # a server answering each append: still the same unit
    assert not tracker.poll(4.2, SETTLE).settled
    tracker.observe(marked_listen(5.0, 7500.0))
    assert tracker.poll(5.0, SETTLE).settled


def test_with_marks_an_unmarked_output_restarts_the_window_after_every_unit_marked_so_far() -> None:
    tracker = feed(
        DrainTracker(0.0, [], CommitPoint(media_ms=5500.0, units_due=6)),
        ev("input_audio_buffer.committed", 0.1),
        marked_listen(0.5, 5500.0),
        marked_listen(1.5, 6500.0),
        ev("response.output_text.delta", 1.6, response_id="r", delta="hi"),
        marked_listen(2.5, 7500.0),
    )
    assert not tracker.poll(2.5, SETTLE).settled
    tracker.observe(marked_listen(3.5, 8500.0))
    assert tracker.poll(3.5, SETTLE).settled


def test_a_marked_listen_on_the_committed_unit_or_later_is_the_decision() -> None:
    tracker = feed(
        DrainTracker(0.0, [], CommitPoint(media_ms=5500.0, units_due=6)),
        ev("input_audio_buffer.committed", 0.1),
        marked_listen(0.5, 5499.6),  # rounded on the wire: within tolerance of the commit
    )
    assert tracker.decided
    feed(tracker, marked_listen(1.5, 6499.6), marked_listen(2.5, 7499.6))
    assert tracker.poll(2.5, SETTLE).settled


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
    assert not tracker.poll(2.5, SETTLE).settled
    feed(tracker, listen(3.5), listen(4.5))
    assert tracker.poll(4.5, SETTLE).settled


def test_without_marks_a_reply_opening_on_the_committed_unit_is_the_decision() -> None:
    tracker = feed(
        DrainTracker(0.0, [], CommitPoint(media_ms=5500.0, units_due=6, units_answered=5)),
        ev("input_audio_buffer.committed", 0.1),
        ev("response.created", 0.5, response={"id": "r"}),
    )
    assert tracker.decided
    tracker.observe(ev("response.audio.delta", 0.6, response_id="r", delta=""))
    tracker.observe(ev("response.done", 1.0, response={"id": "r", "status": "completed"}))
    feed(tracker, listen(1.5))
    assert not tracker.poll(1.5, SETTLE).settled
    tracker.observe(listen(2.5))
    assert tracker.poll(2.5, SETTLE).settled


def test_a_server_answering_units_slower_than_the_window_is_waited_for_in_units() -> None:
    # 1000 ms units, a 2 s window, the server answers one unit every 2.5 s: commit at 3000 ms (3 units due),
    # the committed unit decided at 5.5 s, the reply on the next unit at 8.0 s. 2 s of silence after the
    # decision (at 7.5 s) is its lag, not the end of its reply: its wall window is 2 + 2.5 s.
    point = CommitPoint(
        media_ms=3000.0, units_due=3, units_answered=2, answers_units=True, last_answer_at=3.0
    )
    tracker = feed(DrainTracker(3.0, [], point), ev("input_audio_buffer.committed", 3.01), listen(5.5))
    assert tracker.decided and tracker.wall_window_s(SETTLE) == math.inf  # no pace after the commit yet
    status = tracker.poll(7.6, SETTLE)
    assert not status.settled and status.wake_at is None  # only its next unit can settle it
    feed(
        tracker,
        *reply(8.0),
        listen(10.5),
    )
    assert not tracker.poll(12.9, SETTLE).settled
    tracker.observe(listen(13.0))
    assert tracker.poll(13.0, SETTLE).settled and tracker.settled_by == "units"


def test_a_server_that_slows_after_the_commit_is_counted_in_units_at_its_pace_since() -> None:
    # 1000 ms units, a 2 s window (2 quiet units). Before the commit the server answered a unit every second
    # (at 1.0 and 2.0 s); it decides the committed unit (the one ending at 3000 ms) as the commit is sent,
    # at 3.0 s, then takes 3.5 s for the next: its reply, at 6.5 s. Its pace before the commit (1 s) is no
    # measure of its pace after: the old window (2 + 1 s after 3.0 s) settled at 6.0 s, with 0 of 2 quiet
    # units, half a second before the reply.
    point = CommitPoint(
        media_ms=3000.0, units_due=3, units_answered=2, answers_units=True, last_answer_at=2.0
    )
    tracker = feed(DrainTracker(3.0, [], point), ev("input_audio_buffer.committed", 3.0), listen(3.0))
    assert tracker.decided and tracker.unit.quiet_units == 0
    assert not tracker.poll(6.0, SETTLE).settled
    assert not tracker.poll(6.49, SETTLE).settled
    feed(
        tracker,
        *reply(6.5),
    )
    assert tracker.answer_gap_s == 3.5  # the pace it has shown since the commit
    status = tracker.poll(7.0, SETTLE)
    assert not status.settled and status.wake_at == 6.6 + 2.0 + 3.5
    tracker.observe(listen(10.0))  # one quiet unit at its new pace...
    assert not tracker.poll(12.0, SETTLE).settled  # ...2 s after it is not a second one
    tracker.observe(listen(13.5))
    assert tracker.poll(13.5, SETTLE).settled and tracker.settled_by == "units"


def test_a_server_that_slows_after_the_commit_and_then_stops_settles_past_its_pace_since() -> None:
    point = CommitPoint(
        media_ms=3000.0, units_due=3, units_answered=2, answers_units=True, last_answer_at=2.0
    )
    tracker = feed(
        DrainTracker(3.0, [], point),
        ev("input_audio_buffer.committed", 3.0),
        listen(3.0),
        *reply(6.5),
    )
    assert not tracker.poll(12.0, SETTLE).settled
    assert tracker.poll(12.1, SETTLE).settled and tracker.settled_by == "wall_clock"


def test_a_server_that_answers_units_and_then_stops_altogether_settles_past_its_own_pace() -> None:
    # It answered each unit within 0.3 s, decided the committed unit and replied, then answers nothing more.
    point = CommitPoint(units_due=1, units_answered=0, answers_units=True, last_answer_at=-0.2)
    tracker = feed(
        DrainTracker(0.0, [], point),
        ev("input_audio_buffer.committed", 0.05),
        listen(0.1),
        *reply(0.4),
    )
    assert tracker.wall_window_s(SETTLE) == 2.3
    assert not tracker.poll(2.7, SETTLE).settled
    assert tracker.poll(2.8, SETTLE).settled and tracker.settled_by == "wall_clock"


def test_a_server_that_answered_units_and_stops_right_after_the_committed_one_runs_to_the_bound() -> None:
    # It listened on every unit before the commit and decided the committed unit, then answers nothing: it
    # has shown no pace after the commit, so no wall-clock window can tell its silence from a slow reply.
    point = CommitPoint(
        media_ms=3000.0, units_due=3, units_answered=2, answers_units=True, last_answer_at=2.0
    )
    tracker = feed(DrainTracker(3.0, [], point), ev("input_audio_buffer.committed", 3.0), listen(3.0))
    status = tracker.poll(60.0, SETTLE)
    assert not status.settled and status.wake_at is None  # only the drain's own bound ends it


def test_a_server_that_answered_no_unit_before_the_commit_settles_on_the_settle_window() -> None:
    # It answered no append (it answers the commit, not units), decided the committed unit with one marked
    # listen, then nothing: it has shown no pace to wait for, so the settle window alone applies.
    point = CommitPoint(media_ms=3000.0, units_due=3, units_answered=0, answers_units=False)
    marked = ev("response.listen", 3.1, unit_end_ms=3000.0, response={"status": "listening"})
    tracker = feed(DrainTracker(3.0, [], point), ev("input_audio_buffer.committed", 3.0), marked)
    assert tracker.decided and tracker.answers_units and tracker.wall_window_s(SETTLE) == SETTLE
    assert not tracker.poll(5.0, SETTLE).settled
    assert tracker.poll(5.1, SETTLE).settled and tracker.settled_by == "wall_clock"
