"""The `webrtc` client protocol: the adapter without I/O, and `talk --protocol webrtc` against a server's
calls endpoint end to end (a duplexkit server; its peer behaviour is OpenAI's documented contract, tested in
tests/server/test_webrtc.py), with its `output_audio_buffer` events and without them."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from duplexkit.client.protocols import protocol_for
from duplexkit.client.protocols.webrtc import TRACK_LAG_FRAMES, TRACK_RATE_HZ, WebRTCProtocol

FRAME = 960


def _frame(level: float) -> bytes:
    return (np.full(FRAME, level, np.float32) * 32767).astype("<i2").tobytes()


def _event(kind: str, **fields: object) -> str:
    return json.dumps({"type": kind, **fields})


def _done(response_id: str, status: str = "completed", audio_ms: float | None = None) -> str:
    metrics = {"source": "server_monotonic_request_start", "output_audio_ms": audio_ms}
    extra = {} if audio_ms is None else {"response_request_metrics": metrics}
    return _event("response.done", response={"id": response_id, "status": status}, **extra)


def _deltas(adapter: WebRTCProtocol, frames: list[bytes]) -> list[str]:
    out = []
    for frame in frames:
        events = adapter.decode(frame)
        assert events is not None
        out += [e["response_id"] for e in events if e["type"] == "response.output_audio.delta"]
    return out


Frame = tuple[str | None, float]
"""A frame of the server's track: the response whose audio it is (`None`: the server's silence), its level."""


def _call(frames: list[Frame], channel: dict[int, list[str]]) -> list[str | None]:
    """A call as an aiortc client receives it: `channel[k]` holds the events the server sent as its track
    sent frame k; they arrive before that frame, while the client's receiver still holds the
    `TRACK_LAG_FRAMES` frames before it. Returns, frame by frame, the response the adapter made the frame a
    delta of (`None`: no delta)."""
    adapter = WebRTCProtocol()
    heard: list[str | None] = []
    for k in range(len(frames) + TRACK_LAG_FRAMES):
        for event in channel.get(k, []):
            assert adapter.decode(event) is not None
        if k >= TRACK_LAG_FRAMES:
            decoded = adapter.decode(_frame(frames[k - TRACK_LAG_FRAMES][1]))
            assert decoded is not None and len(decoded) <= 1
            heard.append(decoded[0]["response_id"] if decoded else None)
    return heard


def _started(response_id: str) -> str:
    return _event("output_audio_buffer.started", response_id=response_id)


def test_the_servers_playout_events_delimit_replies_that_start_quiet_or_pause() -> None:
    silence: list[Frame] = [(None, 0.0)] * 10
    # r1 starts with silence of its own and pauses for 120 ms; it said nothing of its length and was done
    # (generated faster than real time) before its audio started. r2 starts quiet and says its length.
    r1: list[Frame] = [("r1", 0.0)] * 2 + [("r1", 0.3)] * 2 + [("r1", 0.0)] * 6 + [("r1", 0.3)] * 2
    r2: list[Frame] = [("r2", 0.0005)] * 3 + [("r2", 0.3)] * 3
    frames = silence + r1 + silence + r2 + silence
    r2_at = 10 + len(r1) + 10
    channel = {
        2: [_event("response.created", response={"id": "r1"}), _done("r1")],
        10: [_started("r1")],
        9 + len(r1): [_event("output_audio_buffer.stopped", response_id="r1")],
        r2_at - 3: [_event("response.created", response={"id": "r2"})],
        r2_at: [_started("r2")],
        r2_at + 2: [_done("r2", audio_ms=120.0)],
        r2_at + 5: [_event("output_audio_buffer.stopped", response_id="r2")],
    }
    assert _call(frames, channel) == [response_id for response_id, _ in frames]


def test_cleared_ends_a_reply_and_a_late_stopped_is_held_to_the_audio_said() -> None:
    frames: list[Frame] = (
        [(None, 0.0)] * 5 + [("r1", 0.3)] * 4 + [(None, 0.0)] * 5 + [("r2", 0.3)] * 3 + [(None, 0.0)] * 8
    )
    channel = {
        1: [_event("response.created", response={"id": "r1"})],
        5: [_started("r1")],
        9: [  # cut after its fourth frame: nothing of it comes after
            _done("r1", status="cancelled"),
            _event("output_audio_buffer.cleared", response_id="r1"),
        ],
        13: [_event("response.created", response={"id": "r2"})],
        14: [_started("r2")],
        # r2's audio ran out before it was done: `stopped` comes with its `response.done`, frames later.
        20: [_done("r2", audio_ms=60.0), _event("output_audio_buffer.stopped", response_id="r2")],
    }
    assert _call(frames, channel) == [response_id for response_id, _ in frames]


def test_a_stopped_placed_a_frame_early_by_a_loaded_receiver_leaves_the_said_reply_whole() -> None:
    # The receiver let one frame less through before `stopped` came (it was busy): by its arrival the event
    # names r1's last frame as the one after it. r1 said it made 100 ms: five frames, all of them its.
    frames: list[Frame] = [(None, 0.0)] * 4 + [("r1", 0.3)] * 5 + [(None, 0.0)] * 6
    channel = {
        1: [_event("response.created", response={"id": "r1"})],
        4: [_started("r1")],
        6: [_done("r1", audio_ms=100.0)],
        7: [_event("output_audio_buffer.stopped", response_id="r1")],  # sent with frame 8, arrived early
    }
    assert _call(frames, channel) == [response_id for response_id, _ in frames]


def test_urls_name_the_calls_endpoint() -> None:
    adapter = protocol_for("webrtc", "ws://h:1/v1/realtime")
    assert adapter.url("ws://h:1/v1/realtime", model="m") == "http://h:1/v1/realtime/calls?model=m"
    assert adapter.url("https://api.example/", model=None) == "https://api.example/v1/realtime/calls"
    assert adapter.url("http://h/v1/realtime/calls?x=1", model=None) == "http://h/v1/realtime/calls?x=1"


def test_appends_go_to_the_track_and_everything_else_on_the_channel() -> None:
    adapter = WebRTCProtocol()
    pcm = _frame(0.5)
    append = {
        "type": "input_audio_buffer.append",
        "audio": base64.b64encode(pcm).decode(),
        "sample_rate_hz": 48_000,
    }
    assert adapter.encode(append) == [pcm]
    assert adapter.encode({"type": "input_audio_buffer.commit"}) == ['{"type": "input_audio_buffer.commit"}']
    frames = ["aGVsbG8="]
    [audio, video] = adapter.encode({**append, "video_frames": frames})
    assert audio == pcm
    assert json.loads(video) == {"type": "input_audio_buffer.append", "audio": "", "video_frames": frames}
    with pytest.raises(ValueError, match="48 kHz"):
        adapter.encode({**append, "sample_rate_hz": 16_000})
    caps = adapter.capabilities({"capabilities": {"input_sample_rate_hz": 16_000, "chunk_period_ms": 80}})
    assert (caps.input_sample_rate_hz, caps.chunk_period_ms) == (TRACK_RATE_HZ, 80)


def test_without_playout_events_track_frames_become_the_deltas_of_the_response_they_carry() -> None:
    adapter = WebRTCProtocol()
    assert _deltas(adapter, [_frame(0.0), _frame(0.3)]) == []  # listening: the server's silence
    adapter.decode(_event("response.created", response={"id": "r1"}))
    # Silence until the first audio (the model thinking), then every frame of its 60 ms, quiet ones too.
    assert _deltas(adapter, [_frame(0.0), _frame(0.3), _frame(0.0)]) == ["r1", "r1"]
    adapter.decode(_done("r1", audio_ms=60.0))
    adapter.decode(_event("response.created", response={"id": "r2"}))
    assert _deltas(adapter, [_frame(0.3), _frame(0.3), _frame(0.3)]) == ["r1", "r2", "r2"]
    adapter.decode(_done("r2", status="cancelled"))  # what was not sent yet never comes
    assert _deltas(adapter, [_frame(0.3)]) == []


def test_a_response_that_did_not_say_its_audio_ends_at_the_first_quiet_frame_after_done() -> None:
    adapter = WebRTCProtocol()
    adapter.decode(_event("response.created", response={"id": "r1"}))
    assert _deltas(adapter, [_frame(0.3)]) == ["r1"]
    adapter.decode(_done("r1"))
    assert _deltas(adapter, [_frame(0.3), _frame(0.0), _frame(0.3)]) == ["r1"]
    decoded = adapter.decode(_event("response.created", response={"id": "r2"}))
    assert decoded is not None and decoded[0]["type"] == "response.created"
    assert adapter.decode("not json") is None


@pytest.mark.parametrize("playout_events", [True, False], ids=["playout-events", "no-playout-events"])
def test_talk_over_webrtc_with_the_embedded_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, playout_events: bool
) -> None:
    pytest.importorskip("aiortc")
    from duplexkit.client.wavfile import read_wav, write_wav
    from duplexkit.server.webrtc.call import WebRTCCall
    from tests.client.speech_clip import DEMO_RATE_HZ, speech_like
    from tests.client.test_talk import cli

    if not playout_events:  # a server that sends no `output_audio_buffer` events: the heuristic cuts
        send = WebRTCCall._send_event

        async def without_playout(call: WebRTCCall, text: str) -> None:
            if not json.loads(text)["type"].startswith("output_audio_buffer."):
                await send(call, text)

        monkeypatch.setattr(WebRTCCall, "_send_event", without_playout)
    track: list[tuple[float, bool]] = []  # each frame of the server's track: its peak, made a delta or not
    decode = WebRTCProtocol.decode

    def recording(adapter: WebRTCProtocol, message: str | bytes) -> list[dict[str, object]] | None:
        events = decode(adapter, message)
        if isinstance(message, bytes):
            track.append((float(np.abs(np.frombuffer(message, "<i2")).max()) / 32768, bool(events)))
        return events

    monkeypatch.setattr(WebRTCProtocol, "decode", recording)
    clip = tmp_path / "speech.wav"
    write_wav(clip, speech_like()[: DEMO_RATE_HZ * 2], DEMO_RATE_HZ)
    out = tmp_path / "out"
    args = ["--model", "scripted", "--model-arg", "first_output_ms=50", "--model-arg", "chunk_period_ms=200"]
    assert (
        cli("talk", "--protocol", "webrtc", "--input", str(clip), "--out", str(out), "--settle", "0.5", *args)
        == 0
    )
    timing = json.loads((out / "timing.json").read_text())
    assert timing["failure"] is None and timing["close"]["clean"]
    [response] = timing["responses"]
    assert response["source"] == "server_request_start_and_client_receive"
    assert response["ttfp_ms"] >= 50.0 and response["audio_ms"] == pytest.approx(1500.0)
    # The reply is the track's frames from its first sound on, as heard: not the silence still on its way
    # when `output_audio_buffer.started` arrived. Within two frames: the adapter places the event
    # `TRACK_LAG_FRAMES` after the frames received so far, and a loaded receiver may hold a frame or two more.
    first = next(i for i, (_, delta) in enumerate(track) if delta)
    sound = next(i for i, (peak, _) in enumerate(track) if peak > 0.05)
    assert abs(first - sound) <= 2, (first, sound)
    audio, _ = read_wav(out / "output.wav")
    assert np.abs(audio).max() > 0.05  # the reply heard on the server's track
    events = json.loads((out / "events.json").read_text())
    assert [e for e in events if e["event"]["type"] == "playback.acknowledged"]  # the server acked its track
    playout = {e["event"]["type"] for e in events if e["event"]["type"].startswith("output_audio_buffer.")}
    assert playout == (
        {"output_audio_buffer.started", "output_audio_buffer.stopped"} if playout_events else set()
    )
    assert [s["sentence"] for s in json.loads((out / "transcript.json").read_text())] == [
        "This is a scripted reply."
    ]
