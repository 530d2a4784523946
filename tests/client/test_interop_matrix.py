"""The interop matrix: duplexkit serves every protocol, and its client drives each one (and each dialect
of `/v1/realtime`) through one spoken turn, over real sockets and real codecs."""

from __future__ import annotations

import numpy as np
import pytest

from duplexkit.client import DuplexClient, SessionBounds, converse
from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer
from tests.client.speech_clip import DEMO_RATE_HZ, speech_like

REPLY = "This is a scripted reply."

# protocol → (endpoint, the audio delta name the server's dialect sends, the timing source the client can
# honestly label: request-start metrics need a protocol that carries them; Moshi's carries none).
MATRIX = {
    "duplex": ("/v1/realtime", "response.audio.delta", "server_request_start_and_client_receive"),
    "openai": ("/v1/realtime", "response.output_audio.delta", "server_request_start_and_client_receive"),
    "openai-beta": ("/v1/realtime", "response.audio.delta", "server_request_start_and_client_receive"),
    "moshi": ("/api/chat", "response.output_audio.delta", "client_receive_unanchored"),
}


@pytest.mark.parametrize("protocol", sorted(MATRIX))
async def test_one_spoken_turn_over_each_protocol(protocol: str) -> None:
    endpoint, audio_event, source = MATRIX[protocol]
    plugin = load_model("scripted", {"first_output_ms": "50", "token_ms": "5"})
    clip = speech_like()  # 2.4 s voiced, 1.6 s silence
    async with EmbeddedServer(plugin) as server:
        url = server.url.removesuffix("/v1/realtime") + endpoint
        async with DuplexClient(url, protocol=protocol) as client:
            conversation = await converse(
                client,
                clip,
                sample_rate_hz=DEMO_RATE_HZ,
                pace="realtime",
                chunk_ms=80 if protocol == "moshi" else 200,
                bounds=SessionBounds(settle_s=1.0, drain_timeout_s=20.0),
            )
    assert conversation.drain is not None and conversation.drain.settled, conversation.drain
    assert conversation.close is not None and conversation.close.clean
    assert client.collector.failures() == []
    responses = client.collector.responses()
    assert [r.source for r in responses] == [source] * len(responses) and responses
    assert "".join(r.text for r in responses) == REPLY
    assert [s.sentence for s in client.collector.sentences()] == [REPLY]
    audio = client.collector.output_audio()
    assert float(np.abs(audio).max()) > 0.05
    assert sum(r.audio_ms for r in responses) >= 1400  # the whole 1.5 s reply
    assert audio_event in {e.type for e in client.events}
    if source == "server_request_start_and_client_receive":
        assert all(r.ttfp_ms is not None and r.ttfp_ms >= 50 for r in responses)  # first_output_ms
