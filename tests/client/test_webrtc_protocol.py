"""The `webrtc` client protocol: the adapter without I/O, and `talk --protocol webrtc` against a server's
calls endpoint end to end (a duplexkit server; its peer behaviour is OpenAI's documented contract, tested in
tests/server/test_webrtc.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from duplexkit.client.protocols import protocol_for
from duplexkit.client.protocols.webrtc import TRACK_RATE_HZ, WebRTCProtocol

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


def test_track_frames_become_the_deltas_of_the_response_they_carry() -> None:
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


def test_talk_over_webrtc_with_the_embedded_server(tmp_path: Path) -> None:
    pytest.importorskip("aiortc")
    from duplexkit.client.wavfile import read_wav, write_wav
    from tests.client.speech_clip import DEMO_RATE_HZ, speech_like
    from tests.client.test_talk import cli

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
    audio, _ = read_wav(out / "output.wav")
    assert np.abs(audio).max() > 0.05  # the reply heard on the server's track
    events = json.loads((out / "events.json").read_text())
    assert [e for e in events if e["event"]["type"] == "playback.acknowledged"]  # the server acked its track
    assert [s["sentence"] for s in json.loads((out / "transcript.json").read_text())] == [
        "This is a scripted reply."
    ]
