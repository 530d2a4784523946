"""The append fast path (`InputAudioBufferAppend.from_plain`) against the general validator.

Whatever frame it is given, the fast path either declines (`None`, and the validator decides) or builds
exactly the event the validator builds: same field values and types, same fields set, same extra fields,
same audio. And the parser with the fast path answers every frame as the validator alone does: the same
event, or the same coded error.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from duplexkit.protocol import client_events as ce
from duplexkit.protocol import wire
from duplexkit.protocol.audio import AudioFormat
from duplexkit.protocol.errors import ProtocolError

FORMATS: list[AudioFormat] = ["pcm16", "pcm_f32le", "g711_ulaw", "g711_alaw"]

_audio = st.one_of(
    st.binary(max_size=24).map(lambda b: base64.b64encode(b).decode()),  # right or wrong length per format
    st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=4).map(
        lambda xs: base64.b64encode(np.array(xs, dtype="<f4").tobytes()).decode()
    ),
    st.text(alphabet="ABCDab01+/= \n", max_size=12),  # not base64, or not strict base64
    st.none(),
    st.integers(),
)
_ms = st.one_of(
    st.integers(min_value=-5, max_value=5),
    st.integers(min_value=2**53 - 2, max_value=2**53 + 2),
    st.integers(min_value=10**300, max_value=10**310),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just(-0.0),
    st.booleans(),
    st.none(),
    st.text(alphabet="0123.-e", max_size=5),
)
_rate = st.one_of(
    st.integers(min_value=-2, max_value=2),
    st.sampled_from([8_000, 16_000, 24_000, 48_000, 191_999, 192_000, 192_001, 2**63]),
    st.sampled_from([16_000.0, 16_000.5, 1e300]),
    st.booleans(),
    st.none(),
    st.sampled_from(["16000", "16k", ""]),
)
_other = st.dictionaries(
    st.sampled_from(["input_audio_format", "sample_rate_hz", "is_speech", "force_listen", "x_custom"]),
    st.one_of(st.sampled_from(["pcm16", "ulaw", "mp3"]), st.integers(0, 48_000), st.booleans(), st.none()),
    max_size=1,
)


@st.composite
def _appends(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "type": draw(st.sampled_from(["input_audio_buffer.append", "input_audio_buffer.commit"]))
    }
    if draw(st.booleans()):
        obj["audio"] = draw(_audio)
    if draw(st.booleans()):
        obj["event_id"] = draw(st.one_of(st.text(max_size=8), st.none(), st.integers()))
    if draw(st.booleans()):
        obj["sample_rate_hz"] = draw(_rate)
    for name in ("duration_ms", "audio_end_ms"):
        if draw(st.booleans()):
            obj[name] = draw(_ms)
    if draw(st.integers(0, 3)) == 0:
        obj.update(draw(_other))
    return obj


def _same_event(fast: ce.InputAudioBufferAppend, general: ce.ClientEventBase) -> None:
    assert isinstance(general, ce.InputAudioBufferAppend)
    assert repr(fast.model_dump()) == repr(general.model_dump())  # repr keeps 80 and 80.0 apart
    assert fast.model_fields_set == general.model_fields_set
    assert fast.model_extra == general.model_extra
    assert fast.payload == general.payload
    assert fast.frames == general.frames
    assert np.array_equal(fast.samples, general.samples)


@settings(max_examples=600, deadline=None)
@given(obj=_appends(), session_format=st.sampled_from(FORMATS))
def test_the_fast_path_builds_what_the_validator_builds_or_declines(
    obj: dict[str, Any], session_format: AudioFormat
) -> None:
    fast = ce.InputAudioBufferAppend.from_plain(obj, session_format)
    if fast is None:
        return
    general = ce.InputAudioBufferAppend.model_validate(obj, context={"input_audio_format": session_format})
    _same_event(fast, general)


@settings(max_examples=600, deadline=None)
@given(obj=_appends(), session_format=st.sampled_from(FORMATS))
def test_the_parser_answers_every_append_as_the_validator_alone_does(
    obj: dict[str, Any], session_format: AudioFormat
) -> None:
    frame = json.dumps(obj)
    try:
        ours: ce.ClientEventBase | ProtocolError = wire.parse_client_event(
            frame, input_audio_format=session_format
        )
    except ProtocolError as exc:
        ours = exc
    model = ce.CLIENT_EVENT_TYPES[obj["type"]]
    try:
        reference: ce.ClientEventBase | ProtocolError = model.model_validate(
            json.loads(frame), context={"input_audio_format": session_format}
        )
    except ValidationError as exc:
        event_id = obj.get("event_id") if isinstance(obj.get("event_id"), str) else None
        reference = ce._protocol_error(exc, obj["type"], event_id)
    if isinstance(reference, ProtocolError):
        assert isinstance(ours, ProtocolError)
        assert (ours.code, ours.message, ours.param, ours.event_id) == (
            reference.code,
            reference.message,
            reference.param,
            reference.event_id,
        )
    elif isinstance(reference, ce.InputAudioBufferAppend):
        assert isinstance(ours, ce.InputAudioBufferAppend)
        _same_event(ours, reference)
    else:
        assert not isinstance(ours, ProtocolError)
        assert ours.model_dump() == reference.model_dump()


def test_the_common_append_takes_the_fast_path() -> None:
    obj = {
        "type": "input_audio_buffer.append",
        "audio": base64.b64encode(np.arange(4, dtype="<i2").tobytes()).decode(),
        "duration_ms": 80,
        "audio_end_ms": 160.5,
        "event_id": "evt_1",
        "sample_rate_hz": 16_000,  # as `DuplexClient` sends it on every append
    }
    fast = ce.InputAudioBufferAppend.from_plain(obj, "pcm16")
    assert fast is not None and fast.sample_rate_hz == 16_000
    assert (fast.duration_ms, fast.audio_end_ms) == (80.0, 160.5) and type(fast.duration_ms) is float
    assert np.array_equal(fast.samples, np.arange(4, dtype=np.float32) / 32768)
    assert ce.InputAudioBufferAppend.from_plain({**obj, "is_speech": True}, "pcm16") is None  # other shape
    assert ce.InputAudioBufferAppend.from_plain({**obj, "duration_ms": True}, "pcm16") is None  # a bool
    assert ce.InputAudioBufferAppend.from_plain({**obj, "audio": "AAA"}, "pcm16") is None  # bad base64
