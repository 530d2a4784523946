"""ResumeState and ResumePolicy without sockets: dedupe by seq, the frames to resend, backoff."""

from __future__ import annotations

import random

from duplexkit.client.reconnect import ResumePolicy, ResumeState


def created(seq: int = 1, *, supported: bool = True) -> dict[str, object]:
    return {
        "type": "session.created",
        "server_event_seq": seq,
        "session": {"id": "sess_1", "capabilities": {"supports_session_resume": supported}},
        "resume_token": "tok-1",
        "attachment_generation": 1,
    }


def test_replayed_events_already_held_are_dropped_and_control_events_stay_out_of_the_log() -> None:
    state = ResumeState(buffer_bytes=1_000)
    assert state.deliver(created())
    assert state.resumable and state.token == "tok-1"
    assert state.deliver({"type": "response.created", "server_event_seq": 2})
    assert state.deliver({"type": "response.done", "server_event_seq": 3})
    assert not state.deliver({"type": "response.done", "server_event_seq": 3})  # replayed twice
    assert not state.deliver({"type": "response.created", "server_event_seq": 2})
    assert state.duplicates == 2 and state.last_seq == 3
    assert not state.deliver(
        {"type": "session.resync_required", "server_event_seq": 3, "reason": "journal_gap"}
    )
    assert state.resume_request() == {
        "type": "session.resume",
        "session_id": "sess_1",
        "resume_token": "tok-1",
        "last_received_server_event_seq": 3,
    }


def test_what_ends_resumability() -> None:
    for event in (
        {"type": "session.closed", "server_event_seq": 2},
        {"type": "session.replaced", "server_event_seq": 1},
        {"type": "error", "server_event_seq": 2, "error": {"code": "invalid_resume_token"}},
    ):
        state = ResumeState(buffer_bytes=1_000)
        state.deliver(created())
        state.deliver(event)
        assert not state.resumable, event
    unsupported = ResumeState(buffer_bytes=1_000)
    unsupported.deliver(created(supported=False))
    assert not unsupported.resumable and unsupported.ack_due() is None


def test_frames_after_the_servers_count_are_resent_in_order_and_a_count_it_cannot_serve_refuses() -> None:
    state = ResumeState(buffer_bytes=25)
    state.deliver(created())
    for text in ("aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc", "dddddddddd"):
        state.written(text)
    assert state.frames_written == 4
    assert state.resumed(
        {"resume_token": "tok-2", "attachment_generation": 2, "client_events_received": 2}
    ) == [
        (3, "cccccccccc"),
        (4, "dddddddddd"),
    ]
    assert state.token == "tok-2" and state.generation == 2
    assert state.resumed({"client_events_received": 4}) == []
    assert state.resumed({"client_events_received": 0}) is None  # frame 1 is no longer kept (25 bytes)
    assert state.resumed({"client_events_received": 5}) is None  # more than was ever written
    assert state.resumed({}) is None  # a server that does not say


def test_acks_move_only_forward() -> None:
    state = ResumeState(buffer_bytes=1_000)
    state.deliver(created())
    assert state.ack_due() == 1 and state.ack_due() is None
    state.deliver({"type": "x", "server_event_seq": 5})
    assert state.ack_due() == 5


def test_backoff_doubles_within_its_bounds_with_jitter() -> None:
    policy = ResumePolicy(max_attempts=6, backoff_s=0.1, backoff_max_s=1.0)
    delays = list(policy.delays(random.Random(0)))
    assert len(delays) == 6
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
