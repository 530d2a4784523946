"""`duplexkit talk` and `duplexkit demo` end to end against the embedded server, and their exit codes."""

from __future__ import annotations

import argparse
import json
import math
import socket
import wave
from pathlib import Path

import numpy as np
import pytest

from duplexkit.client import SessionBounds
from duplexkit.client.events import ReceivedEvent
from duplexkit.client.wavfile import read_wav, write_wav
from duplexkit.commands import demo, talk
from tests.client.fakes import FakeServer, FakeSession
from tests.client.speech_clip import DEMO_RATE_HZ, speech_like

FAST = [
    "--pace",
    "as-fast-as-possible",
    "--settle",
    "0.3",
    "--model",
    "scripted",
    "--model-arg",
    "first_output_ms=50",
]


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="duplexkit")
    commands = parser.add_subparsers(dest="command", required=True)
    talk.register(commands)
    demo.register(commands)
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


@pytest.fixture
def speech_wav(tmp_path: Path) -> Path:
    path = tmp_path / "speech.wav"
    write_wav(path, speech_like(), DEMO_RATE_HZ)
    return path


def test_talk_streams_a_file_into_the_embedded_server_and_writes_every_output(
    speech_wav: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert cli("talk", "--input", str(speech_wav), "--out", str(out), *FAST) == 0

    with wave.open(str(out / "output.wav"), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24_000, 1, 2)
    audio, _ = read_wav(out / "output.wav")
    assert np.abs(audio).max() > 0.05  # the scripted reply's tone is there
    assert len(audio) >= 24 * 1500  # 1.5 s of reply, placed after the 4 s clip on the playback timeline

    sentences = json.loads((out / "transcript.json").read_text())
    assert [s["sentence"] for s in sentences] == ["This is a scripted reply."]
    assert sentences[0]["start"] >= 4.0 and sentences[0]["end"] >= sentences[0]["start"]

    events = json.loads((out / "events.json").read_text())
    # The client connects with `duplex=1`: the server speaks vLLM-Omni's dialect (beta names) to it.
    deltas = [e["event"] for e in events if e["event"]["type"] == "response.audio.delta"]
    assert deltas and all("delta" not in d and d["delta_bytes"] > 0 for d in deltas)
    assert all({"t_ms", "media_ms", "event"} <= set(e) for e in events)

    timing = json.loads((out / "timing.json").read_text())
    assert timing["failure"] is None and timing["clock"] == "invalid"
    assert timing["stream"]["completed"] and timing["commit"]["acknowledged"]
    assert timing["drain"]["outcome"] == "settled" and timing["close"]["clean"]
    [response] = timing["responses"]
    assert response["source"] == "server_request_start_and_client_receive"
    assert response["ttfp_ms"] >= 50.0
    assert timing["session"]["turns"] >= 1

    printed = capsys.readouterr().out
    assert ": ok" in printed and "server_request_start_and_client_receive" in printed and str(out) in printed
    said = printed.splitlines().index("  said:  'This is a scripted reply.'")
    assert printed.splitlines()[said + 1].startswith(
        f"    response {response['response_id']} (completed): TTFT"
    )


def test_talk_prints_what_was_heard_before_the_reply_it_answers_even_when_the_transcript_comes_late() -> None:
    """The server says where each item goes (`previous_item_id`, `null`: first); talk follows it however
    late a transcript completes, as the engine sends a user item it places before the reply to it. A server
    that never says gets arrival order."""

    def event(at: float, **data: object) -> ReceivedEvent:
        return ReceivedEvent(data=dict(data), received_at=at, media_ms=0.0)

    def reply(at: float, rid: str, item_id: str, previous: str | None) -> list[ReceivedEvent]:
        added = {"item": {"id": item_id, "role": "assistant"}}
        return [
            event(at, type="response.created", response={"id": rid}),
            event(
                at,
                type="conversation.item.added",
                **added,
                previous_item_id=previous,
            ),
            event(at, type="response.output_item.added", response_id=rid, item={"id": item_id}),
        ]

    def heard(at: float, item_id: str, previous: str | None, text: str) -> list[ReceivedEvent]:
        return [
            event(
                at,
                type="conversation.item.added",
                item={"id": item_id, "role": "user"},
                previous_item_id=previous,
            ),
            event(
                at,
                type="conversation.item.input_audio_transcription.completed",
                item_id=item_id,
                transcript=text,
            ),
        ]

    events = [
        *reply(1.2, "resp_1", "item_a1", None),  # decided before the ASR finished: first, for now
        *heard(1.5, "item_1", None, "hello"),  # first of all
        *reply(5.0, "resp_2", "item_a2", "item_a1"),
        *heard(8.0, "item_2", "item_a1", "how are you"),  # 3 s after the reply it answers
        *heard(9.0, "item_3", "item_a2", "bye"),
        event(9.5, type="conversation.item.input_audio_transcription.completed", item_id="x", transcript="?"),
    ]
    assert talk.conversation_order(events) == [
        ("heard", "hello"),
        ("said", "resp_1"),
        ("heard", "how are you"),
        ("said", "resp_2"),
        ("heard", "bye"),
        ("heard", "?"),  # its item was never placed: where it arrived
    ]
    silent = [
        event(e.received_at, **{k: v for k, v in e.data.items() if k != "previous_item_id"}) for e in events
    ]
    assert [entry for entry in talk.conversation_order(silent) if entry[0] == "said"] == [
        ("said", "resp_1"),
        ("said", "resp_2"),
    ]  # a server that never says where items go: arrival order, not reversed


def test_the_demo_clip_is_deterministic_speech_then_silence() -> None:
    clip = speech_like()
    assert np.array_equal(clip, speech_like())
    unit = DEMO_RATE_HZ  # 1000 ms units
    rms = [float(np.sqrt(np.mean(np.square(clip[k * unit : (k + 1) * unit])))) for k in range(4)]
    assert min(rms[:3]) >= 0.003 * 10  # every unit the voice covers passes the speech threshold
    assert rms[3] == 0.0


def test_an_unreadable_input_is_a_usage_error(tmp_path: Path) -> None:
    bogus = tmp_path / "not.wav"
    bogus.write_text("hello")
    assert cli("talk", "--input", str(bogus), "--out", str(tmp_path / "o")) == 2
    assert cli("talk", "--input", str(tmp_path / "missing.wav"), "--out", str(tmp_path / "o")) == 2


def test_a_malformed_url_is_a_usage_error(speech_wav: Path, tmp_path: Path) -> None:
    assert cli("talk", "--url", "ftp://x", "--input", str(speech_wav), "--out", str(tmp_path / "o")) == 2


def test_an_unreachable_server_fails_the_session(speech_wav: Path, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    url = f"ws://127.0.0.1:{port}"
    assert cli("talk", "--url", url, "--input", str(speech_wav), "--out", str(tmp_path / "o")) == 1


def _options(url: str, out: Path) -> talk.TalkOptions:
    bounds = SessionBounds(settle_s=0.2, close_timeout_s=0.3)
    return talk.TalkOptions(url=url, out=out, pace="as-fast-as-possible", bounds=bounds)


async def test_a_close_that_stalls_after_the_replies_settled_is_a_warning_not_a_failure(
    tmp_path: Path,
) -> None:
    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000})
        await s.until("input_audio_buffer.commit")
        await s.send("input_audio_buffer.committed", item_id="i", audio_end_ms=1000.0)
        listen = {"status": "listening", "metadata": {"model_listen": True}}
        await s.send("response.listen", response=listen)
        while True:  # listens to every padded unit; never answers session.close
            if (await s.recv())["type"] == "input_audio_buffer.append":
                await s.send("response.listen", response=listen)

    async with FakeServer(handler) as server:
        result = await talk.talk(_options(server.url, tmp_path), np.zeros(16_000, np.float32), 16_000, None)
    assert result.failure is None
    assert result.drain is not None and result.drain.settled and result.drain.listens >= 2
    assert result.close is not None and not result.close.clean
    assert result.warnings == ["close: no session.closed (timeout)"]


async def test_a_server_error_fails_the_session(tmp_path: Path) -> None:
    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000})

        async def on_frame(frame: dict[str, object]) -> None:
            if frame["type"] == "input_audio_buffer.commit":
                await s.send(
                    "error", error={"type": "server_error", "code": "model_step_failed", "message": "x"}
                )

        await s.serve_until_close(on_frame)

    async with FakeServer(handler) as server:
        result = await talk.talk(_options(server.url, tmp_path), np.zeros(16_000, np.float32), 16_000, None)
    assert result.failure == "server error model_step_failed"
    assert result.drain is not None and result.drain.error is not None
    assert result.close is not None and result.close.clean


def test_talk_sends_a_videos_frames_one_per_unit_at_the_requested_fps(tmp_path: Path) -> None:
    from duplexkit.bench.omni_duplex_eval.dataset import Selection, load_dataset

    [sample] = load_dataset("builtin", Selection(splits=("RTD_counting",))).samples
    video, audio = tmp_path / "clip.mp4", tmp_path / "question.wav"
    video.write_bytes(sample.video_bytes() or b"")
    audio.write_bytes(sample.question_audio_bytes())
    out = tmp_path / "out"
    assert cli("talk", "--input", str(audio), "--video", str(video), "--out", str(out), *FAST) == 0
    stream = json.loads((out / "timing.json").read_text())["stream"]
    clip_s = stream["audio_end_ms"] / 1000
    assert stream["frames_sent"] == math.ceil(clip_s)  # 1 fps: one frame per 1 s unit, the last one partial
    assert stream["frames_dropped"] == 0


def test_an_unreadable_video_is_a_usage_error(speech_wav: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "not.mp4"
    bogus.write_text("hello")
    assert cli("talk", "--input", str(speech_wav), "--video", str(bogus), "--out", str(tmp_path / "o")) == 2


@pytest.mark.parametrize(("flag", "protocol"), [("pcmu", "duplex"), ("pcma", "openai-beta")])
def test_talk_at_telephone_quality_sends_g711_at_8khz_and_hears_the_reply_at_its_length(
    speech_wav: Path, tmp_path: Path, flag: str, protocol: str
) -> None:
    out = tmp_path / "out"
    assert (
        cli(
            "talk",
            "--input",
            str(speech_wav),
            "--out",
            str(out),
            "--format",
            flag,
            "--protocol",
            protocol,
            *FAST,
        )
        == 0
    )
    timing = json.loads((out / "timing.json").read_text())
    fmt = {"pcmu": "g711_ulaw", "pcma": "g711_alaw"}[flag]
    assert timing["failure"] is None and timing["audio_format"] == fmt
    assert timing["capabilities"]["input_sample_rate_hz"] == 8_000
    assert timing["capabilities"]["output_sample_rate_hz"] == 8_000
    events = json.loads((out / "events.json").read_text())
    deltas = [
        e["event"]
        for e in events
        if e["event"]["type"] in ("response.audio.delta", "response.output_audio.delta")
    ]
    # the scripted reply: 60 ms a character, as 8 kHz G.711 (one byte a sample), not a 24 kHz stream
    assert sum(d["delta_bytes"] for d in deltas) == round(len("This is a scripted reply.") * 0.060 * 8_000)
    sentences = json.loads((out / "transcript.json").read_text())
    assert [s["sentence"] for s in sentences] == ["This is a scripted reply."]
    audio, _ = read_wav(out / "output.wav")
    assert np.abs(audio).max() > 0.05


def test_talk_refuses_a_telephone_format_on_a_protocol_that_carries_its_own_audio(
    speech_wav: Path, tmp_path: Path
) -> None:
    assert (
        cli(
            "talk",
            "--input",
            str(speech_wav),
            "--out",
            str(tmp_path),
            "--format",
            "pcmu",
            "--protocol",
            "moshi",
        )
        == 2
    )
