"""A fuzzer of the wire parser (`protocol.wire`), every door's first step for JSON: whatever text or
bytes arrive, in any dialect and input format, it returns a typed event or raises a `ProtocolError` with a
code of the table, and the client's `event_id` comes back with the error whenever it could be read. It
holds no state between frames, so one `@given` covers it; the engines' fuzzers send it frames in order."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplexkit.protocol import CLIENT_EVENT_TYPES
from duplexkit.protocol.client_events import ClientEventBase
from duplexkit.protocol.dialects import Dialect
from duplexkit.protocol.errors import ProtocolError
from duplexkit.protocol.wire import MAX_EVENT_BYTES, parse_client_event
from tests.fuzz.contract import CODES
from tests.fuzz.strategies import absurd_json, examples, junk_frames

_TYPES = st.sampled_from(
    [
        *CLIENT_EVENT_TYPES,
        "input_audio_buffer.append",
        "response.audio.delta",
        "conversation.item.input_audio_transcription.completed",
        "x",
    ]
)


@st.composite
def _events(draw: Any) -> str:
    """An event of a known type whose other fields are anything at all."""
    body = draw(absurd_json())
    event = body if isinstance(body, dict) else {"payload": body}
    event["type"] = draw(_TYPES)
    if draw(st.booleans()):
        event["event_id"] = draw(st.sampled_from(["evt_1", "", "x" * 500]))
    return json.dumps(event)


FRAMES = {
    "frame": st.one_of(_events(), junk_frames(), absurd_json().map(json.dumps)),
    "dialect": st.sampled_from(list(Dialect)),
    "input_format": st.sampled_from(["pcm16", "g711_ulaw", "g711_alaw", "pcm_f32le"]),
    "max_bytes": st.sampled_from([MAX_EVENT_BYTES, 64, 1]),
}


def check_frame(frame: str | bytes, dialect: Dialect, input_format: Any, max_bytes: int) -> None:
    """The parser's answer to one frame: an event, or a coded error carrying the client's `event_id`."""
    try:
        event = parse_client_event(
            frame, input_audio_format=input_format, max_bytes=max_bytes, dialect=dialect
        )
    except ProtocolError as exc:
        assert exc.code in CODES
        try:
            sent = json.loads(frame)
        except (ValueError, RecursionError):
            return
        if isinstance(sent, dict) and isinstance(sent.get("event_id"), str) and exc.code != "event_too_large":
            assert exc.event_id == sent["event_id"]
    else:
        assert isinstance(event, ClientEventBase)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**FRAMES)
def test_the_parser_returns_an_event_or_a_coded_error_for_any_frame(
    frame: str | bytes, dialect: Dialect, input_format: Any, max_bytes: int
) -> None:
    check_frame(frame, dialect, input_format, max_bytes)
