"""`duplexkit talk --protocol ...` against servers of other protocols (fakes written from their contracts
in `tests/client/protocol_peers.py`), and the adapters' own rules."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import sphn

from duplexkit.bench.attempt import is_capacity_refusal
from duplexkit.client import DuplexClient, SessionBounds, SessionError, converse
from duplexkit.client.protocols import detect_protocol, protocol_for
from duplexkit.client.protocols.openai import OpenAIBetaProtocol, OpenAIProtocol
from duplexkit.client.wavfile import read_wav, write_wav
from duplexkit.commands import talk
from duplexkit.models import load_model
from duplexkit.protocol.audio import encode_base64_audio
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.client.protocol_peers import (
    MOSHI_MODEL_VERSION,
    MOSHI_REPLY,
    MOSHI_SPEAKS_AT_FRAME,
    OPENAI_REPLY,
    MoshiPeer,
    OpenAIPeer,
    ServedInThread,
)
from tests.client.speech_clip import DEMO_RATE_HZ, speech_like


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="duplexkit")
    talk.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


@pytest.fixture
def speech_wav(tmp_path: Path) -> Path:
    path = tmp_path / "speech.wav"
    write_wav(path, speech_like()[: round(1.6 * DEMO_RATE_HZ)], DEMO_RATE_HZ)
    return path


@pytest.mark.parametrize("explicit", [True, False], ids=["--protocol moshi", "auto from /api/chat"])
def test_talk_drives_a_moshi_server(speech_wav: Path, tmp_path: Path, explicit: bool) -> None:
    peer = MoshiPeer()
    out = tmp_path / "out"
    with ServedInThread(peer) as url:
        protocol = ["--protocol", "moshi"] if explicit else []
        code = cli(
            "talk", "--url", f"{url}/api/chat?text_temperature=0.7", "--input", str(speech_wav),
            "--out", str(out), "--settle", "0.6", *protocol,
        )  # fmt: skip
    assert code == 0
    assert peer.text_messages == 0 and set(peer.kinds) == {1}  # only Ogg-Opus audio frames, no JSON
    assert peer.query.endswith("?text_temperature=0.7")  # settings ride the query, unchanged
    # The client kept streaming (silence) through the drain: more input than the clip itself.
    assert peer.input_samples > 1.6 * 24_000
    audio, rate = read_wav(out / "output.wav")
    assert rate == 24_000 and float(np.abs(audio).max()) > 0.1
    sentences = json.loads((out / "transcript.json").read_text())
    assert [s["sentence"] for s in sentences] == ["".join(MOSHI_REPLY)]
    # The reply began at input frame 5 (400 ms) of the stream: its sentence starts there on the media clock.
    assert MOSHI_SPEAKS_AT_FRAME * 0.08 <= sentences[0]["start"] <= MOSHI_SPEAKS_AT_FRAME * 0.08 + 0.5
    timing = json.loads((out / "timing.json").read_text())
    assert timing["protocol"] == "moshi"
    # The reply was cut out of the stream by the client: nothing anchors its own TTFT/TTFP (not a 0).
    [reply] = timing["responses"]
    assert reply["source"] == "client_receive_unanchored"
    assert (reply["ttft_ms"], reply["ttfp_ms"], reply["rtf"]) == (None, None, None)
    assert timing["session"]["stream_ttfp_ms"] is not None  # from the stream's start: that one holds
    assert "client clock only" in timing["clocks"]["latency"]
    assert timing["commit"]["acknowledged"] is None  # there is no commit to acknowledge
    assert timing["close"]["clean"] is True
    assert timing["drain"]["outcome"] == "settled" and timing["drain"]["listens_after_commit"] > 0
    events = json.loads((out / "events.json").read_text())
    created = events[0]["event"]
    assert created["type"] == "session.created" and created["synthesized_from"] == "moshi"
    assert created["session"]["moshi"] == {"protocol_version": 0, "model_version": MOSHI_MODEL_VERSION}


@pytest.mark.parametrize("beta", [False, True], ids=["openai", "openai-beta"])
def test_talk_drives_an_openai_style_server(speech_wav: Path, tmp_path: Path, beta: bool) -> None:
    peer = OpenAIPeer(beta=beta)
    out = tmp_path / "out"
    with ServedInThread(peer) as url:
        code = cli(
            "talk", "--url", url, "--input", str(speech_wav), "--out", str(out), "--settle", "0.3",
            "--pace", "as-fast-as-possible", "--protocol", "openai-beta" if beta else "openai",
        )  # fmt: skip
    assert code == 0
    kinds = [e["type"] for e in peer.events]
    assert "error" not in kinds and kinds[0] == "session.update"
    assert kinds[kinds.index("input_audio_buffer.commit") + 1] == "response.create"
    assert not {"playback.ack", "session.close", "session.heartbeat"} & set(kinds)  # not in that API
    assert (peer.headers.get("openai-beta") == "realtime=v1") is beta
    # PCM16 at 24 kHz: 1.6 s of speech plus the silence padded through the drain.
    assert peer.buffered >= 1.6 * 24_000
    assert json.loads((out / "transcript.json").read_text())[0]["sentence"] == OPENAI_REPLY
    audio, _ = read_wav(out / "output.wav")
    assert float(np.abs(audio).max()) > 0.1
    timing = json.loads((out / "timing.json").read_text())
    assert timing["protocol"] == ("openai-beta" if beta else "openai")
    assert timing["commit"]["acknowledged"] is True
    assert [r["source"] for r in timing["responses"]] == ["client_commit_to_receive"]  # it sent no metrics


def test_auto_detection_and_unknown_protocols() -> None:
    assert detect_protocol("ws://h:1/api/chat") == "moshi"
    assert detect_protocol("http://h:1/api/chat/?x=1") == "moshi"
    assert detect_protocol("ws://h:1/v1/realtime") == detect_protocol("ws://h:1") == "duplex"
    assert protocol_for("auto", "ws://h:1/api/chat").url("ws://h:1/api/chat?a=1", model="m") == (
        "ws://h:1/api/chat?a=1"
    )
    assert protocol_for("openai", "http://h:1").url("http://h:1", model="m") == "ws://h:1/v1/realtime?model=m"
    with pytest.raises(ValueError, match="unknown protocol"):
        protocol_for("grpc", "ws://h:1")
    with pytest.raises(ValueError, match="no equivalent in the Moshi protocol"):
        protocol_for("moshi", "ws://h:1/api/chat").encode({"type": "response.cancel"})


def test_a_bad_url_is_a_usage_error(speech_wav: Path, tmp_path: Path) -> None:
    assert cli("talk", "--url", "ftp://x/api/chat", "--input", str(speech_wav), "--out", str(tmp_path)) == 2


async def test_the_client_reads_a_flat_vllm_omni_capacity_refusal() -> None:
    async with EmbeddedServer(load_model("scripted", {}), ServerConfig(max_sessions=1)) as server:
        holder = DuplexClient(server.url)
        client = DuplexClient(server.url)  # duplex=1: vLLM-Omni's flat handshake errors
        async with holder:
            await holder.configure()
            async with client:
                with pytest.raises(SessionError, match="resource_exhausted") as info:
                    await client.configure(timeout_s=5)
    assert info.value.event is not None and isinstance(info.value.event["error"], str)
    assert is_capacity_refusal(info.value.event)


@pytest.mark.parametrize("beta", [False, True], ids=["openai", "openai-beta"])
async def test_openai_server_vad_turns_need_no_commit(beta: bool) -> None:
    peer = OpenAIPeer(beta=beta)
    clip = speech_like()[: round(1.6 * DEMO_RATE_HZ)]  # ends in speech: the server's VAD needs the padding
    protocol = (OpenAIBetaProtocol if beta else OpenAIProtocol)(server_vad=True)
    with ServedInThread(peer) as url:
        async with DuplexClient(url, protocol=protocol) as client:
            conversation = await converse(
                client,
                clip,
                sample_rate_hz=DEMO_RATE_HZ,
                pace="as-fast-as-possible",
                bounds=SessionBounds(settle_s=0.3, drain_timeout_s=10.0),
            )
    kinds = [e["type"] for e in peer.events]
    assert "error" not in kinds and not {"input_audio_buffer.commit", "response.create"} & set(kinds)
    assert conversation.drain is not None and conversation.drain.settled
    assert [s.sentence for s in client.collector.sentences()] == [OPENAI_REPLY]
    assert any(e.type == "input_audio_buffer.speech_stopped" for e in client.events)


def test_moshi_output_carries_its_place_in_the_output_stream_and_the_frames_are_counted() -> None:
    # Full-Duplex-Bench's client concatenates the output frames: frame i plays at i x 80 ms. Three quiet
    # frames, then speech: the reply's audio sits at 240 ms of the output stream, wherever it arrived.
    adapter = protocol_for("moshi", "ws://h:1/api/chat")
    assert adapter.placement == "concatenated"
    writer = sphn.OpusStreamWriter(24_000)
    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(1920) / 24_000)).astype(np.float32)
    events = []
    for i in range(5):
        pcm = tone if i >= 3 else np.zeros(1920, np.float32)
        events += adapter.decode(b"\x01" + bytes(writer.append_pcm(pcm))) or []
    deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
    assert [e["output_stream_ms"] for e in deltas] == [240, 320]
    pcm = np.zeros(1920 * 7, np.float32)
    adapter.encode({"type": "input_audio_buffer.append", "audio": encode_base64_audio(pcm, "pcm16")})
    assert adapter.wire_report() == {
        "protocol": "moshi",
        "input_frames": 7,
        "output_frames": 5,
        "output_frames_missed": 2,
    }
