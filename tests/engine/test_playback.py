"""Playback as a specification: what the listener heard is what the conversation history keeps.

The `PlaybackLedger` is tested directly, then through `EngineSession` (`playback.ack` →
`playback.acknowledged`, late and unknown acks, history trimmed to played audio, `commit_all_on_done`).
The engine runs on a fake clock: every `now` is a plain float in seconds.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest

from duplexkit.engine import EngineConfig, EngineSession, Speak, Step, Unit
from duplexkit.engine.playback import PlaybackLedger
from duplexkit.protocol.audio import encode_base64_audio
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.wire import parse_client_event

OUT_RATE = 24_000

# --- the ledger -------------------------------------------------------------------------------------


def _ledger(policy: Any = "ack_only") -> PlaybackLedger:
    """A ledger holding response `r1`: "Hello " over 1000 ms, then "world." over 500 ms."""
    ledger = PlaybackLedger(policy)
    ledger.open("r1", "i1")
    assert ledger.generated("r1", "Hello ", 1000.0) == (6, 1000.0)
    assert ledger.generated("r1", "world.", 500.0) == (12, 1500.0)
    return ledger


def test_generated_output_accumulates_text_audio_and_marks() -> None:
    entry = _ledger().get("r1")
    assert entry is not None
    assert (entry.text, entry.generated_ms, entry.marks) == (
        "Hello world.",
        1500.0,
        [(6, 1000.0), (12, 1500.0)],
    )
    assert (entry.played_ms, entry.committed_ms, entry.settled) == (0.0, 0.0, False)


def test_an_ack_moves_played_and_committed_never_past_what_was_generated() -> None:
    ledger = _ledger()
    entry = ledger.ack("r1", 1200.0, None)
    assert (entry.played_ms, entry.committed_ms) == (1200.0, 1200.0)
    entry = ledger.ack("r1", 9000.0, None)
    assert (entry.played_ms, entry.committed_ms) == (1500.0, 1500.0)


def test_acks_never_move_backwards() -> None:
    ledger = _ledger()
    ledger.ack("r1", 1200.0, None)
    entry = ledger.ack("r1", 300.0, 100.0)
    assert (entry.played_ms, entry.committed_ms) == (1200.0, 1200.0)


def test_committed_never_exceeds_played() -> None:
    ledger = _ledger()
    entry = ledger.ack("r1", 800.0, 1400.0)
    assert (entry.played_ms, entry.committed_ms) == (800.0, 800.0)
    entry = ledger.ack("r1", 1400.0, 900.0)
    assert (entry.played_ms, entry.committed_ms) == (1400.0, 900.0)


@pytest.mark.parametrize(
    ("committed_ms", "heard"),
    [(0.0, ""), (999.0, ""), (1000.0, "Hello "), (1499.0, "Hello "), (1500.0, "Hello world.")],
)
def test_heard_text_ends_at_the_last_mark_whose_audio_was_committed(committed_ms: float, heard: str) -> None:
    ledger = _ledger()
    entry = ledger.ack("r1", committed_ms, None)
    assert entry.heard_text() == heard


def test_text_without_audio_is_heard_whole() -> None:
    ledger = PlaybackLedger("ack_only")
    ledger.open("r1", "i1")
    ledger.generated("r1", "Hello", 0.0)
    entry = ledger.get("r1")
    assert entry is not None
    assert entry.heard_text() == "Hello"


def test_an_interrupted_response_is_trimmed_to_what_was_played_and_settled() -> None:
    ledger = _ledger()
    ledger.ack("r1", 1200.0, None)
    entry = ledger.finish("r1", interrupted=True)
    assert (entry.committed_ms, entry.settled, entry.heard_text()) == (1200.0, True, "Hello ")


def test_commit_all_on_done_commits_a_completed_response_whole() -> None:
    entry = _ledger("commit_all_on_done").finish("r1", interrupted=False)
    assert (entry.played_ms, entry.committed_ms, entry.settled) == (1500.0, 1500.0, True)
    assert entry.heard_text() == "Hello world."


def test_ack_only_leaves_a_completed_response_open_for_late_acks_until_the_next_response() -> None:
    ledger = _ledger("ack_only")
    entry = ledger.finish("r1", interrupted=False)
    assert not entry.settled
    assert ledger.ack("r1", 1000.0, None).committed_ms == 1000.0
    ledger.open("r2", "i2")  # the conversation moved on
    assert entry.settled
    assert entry.committed_ms == 1000.0
    with pytest.raises(ProtocolError) as info:
        ledger.ack("r1", 1500.0, None)
    assert info.value.code == ErrorCode.PLAYBACK_ACK_TOO_LATE


def test_an_ack_for_a_settled_response_is_too_late() -> None:
    ledger = _ledger()
    ledger.finish("r1", interrupted=True)
    with pytest.raises(ProtocolError) as info:
        ledger.ack("r1", 100.0, None)
    assert info.value.code == ErrorCode.PLAYBACK_ACK_TOO_LATE


def test_an_ack_for_an_unknown_response_is_unknown_response() -> None:
    with pytest.raises(ProtocolError) as info:
        _ledger().ack("r9", 100.0, None)
    assert info.value.code == ErrorCode.UNKNOWN_RESPONSE


def test_entries_are_found_by_item() -> None:
    ledger = _ledger()
    assert ledger.by_item("i1") is ledger.get("r1")
    assert ledger.by_item("nope") is None


# --- through the engine session ---------------------------------------------------------------------


def _client(type_: str, **fields: Any) -> Any:
    return parse_client_event(json.dumps({"type": type_, **fields}))


def _speak(text: str, ms: float, **kwargs: Any) -> Speak:
    tokens = tuple(t for t in re.findall(r"\S*\s*", text) if t)
    return Speak(tokens=tokens, audio=np.full(round(ms * OUT_RATE / 1000), 0.1, np.float32), **kwargs)


class _Harness:
    def __init__(self, policy: str | None = None) -> None:
        self.engine = EngineSession("sess_test", EngineConfig(model="scripted"))
        self.engine.start(0.0)
        if policy is not None:
            self.send("session.update", session={"playback_commit_policy": policy})

    def send(self, type_: str, now: float = 0.0, **fields: Any) -> Step:
        return self.engine.handle(_client(type_, **fields), now)

    def unit(self, now: float) -> Unit:
        audio = encode_base64_audio(np.zeros(16_000, np.float32), "pcm16")
        [unit] = self.send("input_audio_buffer.append", now, audio=audio).units
        return unit

    def reply(self, *, end_of_turn: bool) -> tuple[str, str]:
        """A reply "Hello " (1000 ms) + "world." (500 ms) over two units; returns (response_id, item_id)."""
        events: list[Any] = []
        for k, segment in enumerate((_speak("Hello ", 1000), _speak("world.", 500, end_of_turn=end_of_turn))):
            unit = self.unit(float(k))
            self.engine.request_started(unit, k + 0.5)
            events += self.engine.on_decision(unit, segment, k + 1.0).events
            self.engine.step_finished(unit, k + 1.0)
        created = events[0]
        return created.response.id, events[1].item.id

    def ack(self, response_id: str, played_ms: float, **fields: Any) -> Any:
        [event] = self.send("playback.ack", response_id=response_id, played_ms=played_ms, **fields).events
        return event

    def heard(self, item_id: str) -> str | None:
        [item] = [item for item in self.engine.history if item.id == item_id]
        return item.content[0].transcript


def test_playback_ack_is_answered_with_playback_acknowledged() -> None:
    h = _Harness()
    response_id, item_id = h.reply(end_of_turn=False)
    event = h.ack(response_id, 1200)
    assert event.type == "playback.acknowledged"
    assert (event.response_id, event.item_id) == (response_id, item_id)
    assert (event.played_ms, event.committed_ms) == (1200.0, 1200.0)
    event = h.ack(response_id, 1300, committed_ms=1000)
    assert (event.played_ms, event.committed_ms) == (1300.0, 1200.0)


def test_playback_ack_after_barge_in_settled_the_response_is_too_late() -> None:
    h = _Harness()
    response_id, _ = h.reply(end_of_turn=False)
    h.send("barge_in", 2.5)
    event = h.ack(response_id, 1500, event_id="evt_ack")
    assert event.type == "error"
    assert (event.error.code, event.error.event_id) == (ErrorCode.PLAYBACK_ACK_TOO_LATE, "evt_ack")
    assert [e.type for e in h.send("session.heartbeat").events] == ["session.heartbeat_ack"]


def test_playback_ack_for_an_unknown_response_is_unknown_response() -> None:
    event = _Harness().ack("resp_nope", 100)
    assert event.error.code == ErrorCode.UNKNOWN_RESPONSE


def test_history_keeps_only_what_was_played_of_an_interrupted_response() -> None:
    h = _Harness()
    response_id, item_id = h.reply(end_of_turn=False)
    h.ack(response_id, 1200)
    done = next(e for e in h.send("barge_in", 2.5).events if e.type == "response.done")
    assert done.response.output[0].content[0].transcript == "Hello world."  # what was generated
    assert h.heard(item_id) == "Hello "  # what was heard: up to the last mark the playback reached


def test_history_of_an_interrupted_response_with_no_ack_is_empty() -> None:
    h = _Harness()
    _, item_id = h.reply(end_of_turn=False)
    h.send("response.cancel", 2.5)
    assert h.heard(item_id) == ""


def test_ack_only_history_follows_the_acks_of_a_completed_response() -> None:
    h = _Harness("ack_only")
    response_id, item_id = h.reply(end_of_turn=True)
    assert h.heard(item_id) == ""
    h.ack(response_id, 1000)
    assert h.heard(item_id) == "Hello "
    h.ack(response_id, 1500)
    assert h.heard(item_id) == "Hello world."


def test_history_follows_the_committed_point_not_the_played_one() -> None:
    h = _Harness("ack_only")
    response_id, item_id = h.reply(end_of_turn=True)
    h.ack(response_id, 1500, committed_ms=1000)
    assert h.heard(item_id) == "Hello "


def test_commit_all_on_done_commits_everything_when_the_response_completes() -> None:
    h = _Harness("commit_all_on_done")
    assert h.engine.settings.playback_commit_policy == "commit_all_on_done"
    response_id, item_id = h.reply(end_of_turn=True)
    assert h.heard(item_id) == "Hello world."
    assert h.ack(response_id, 500).error.code == ErrorCode.PLAYBACK_ACK_TOO_LATE


def test_commit_all_on_done_still_trims_an_interrupted_response() -> None:
    h = _Harness("commit_all_on_done")
    response_id, item_id = h.reply(end_of_turn=False)
    h.ack(response_id, 1000)
    h.send("barge_in", 2.5)
    assert h.heard(item_id) == "Hello "


def test_truncate_trims_an_assistant_item_to_the_given_audio_position() -> None:
    h = _Harness()
    response_id, item_id = h.reply(end_of_turn=True)
    h.ack(response_id, 1500)
    [event] = h.send("conversation.item.truncate", item_id=item_id, audio_end_ms=1100).events
    assert (event.type, event.audio_end_ms) == ("conversation.item.truncated", 1100)
    assert h.heard(item_id) == "Hello "
    [retrieved] = h.send("conversation.item.retrieve", item_id=item_id).events
    assert retrieved.item.content[0].transcript == "Hello "
    assert h.ack(response_id, 1500).error.code == ErrorCode.PLAYBACK_ACK_TOO_LATE


def test_only_assistant_audio_items_can_be_truncated() -> None:
    h = _Harness()
    h.send("input_audio_buffer.append", audio=encode_base64_audio(np.zeros(160, np.float32), "pcm16"))
    committed, _added, _done = h.send("input_audio_buffer.commit").events
    [error] = h.send("conversation.item.truncate", item_id=committed.item_id, audio_end_ms=0).events
    assert (error.error.code, error.error.param) == (ErrorCode.INVALID_VALUE, "item_id")
