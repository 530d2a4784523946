"""Twilio's doors on every edge, with the scripted model: a stream that is not 8 kHz mu-law is refused with
its code, and the voice webhook answers TwiML to requests signed by Twilio's own helper library (`twilio`:
RequestValidator signs as Twilio does) and to nothing else. The call itself, on the cascade, is in
`test_telephony_e2e.py`."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator

import httpx
import pytest
import websockets

from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.serve import Edge
from duplexkit.server.twilio.voice import TwilioConfig
from tests.server.twilio_peer import TwilioPeer, error_counts, slot_freed, stream_url

pytest.importorskip("twilio", reason="needs twilio (the dev extra)")

from twilio.request_validator import RequestValidator

AUTH_TOKEN = "12345678901234567890123456789012"


async def test_on_every_edge_a_stream_that_is_not_mulaw_8khz_is_closed_with_the_code_and_its_slot_freed(
    edge: Edge,
) -> None:
    async with EmbeddedServer(load_model("scripted", {}), edge=edge) as server:
        await _refused_format(server)


async def _refused_format(server: EmbeddedServer) -> None:
    peer = await TwilioPeer.connect(stream_url(server))
    await peer.open(media_format={"encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1})
    async with asyncio.timeout(10):  # the peer's own reader reads the close: no second `recv` here
        await peer.ws.wait_closed()
    assert (peer.ws.close_code, peer.ws.close_reason) == (1003, "unsupported_audio_format")
    await slot_freed(server)
    assert (await error_counts(server)).get("unsupported_audio_format") == 1


@pytest.fixture
async def signed_server() -> AsyncIterator[EmbeddedServer]:
    twilio = TwilioConfig(public_url="https://voice.example.com", auth_token=AUTH_TOKEN)
    async with EmbeddedServer(load_model("scripted", {}), config=ServerConfig(twilio=twilio)) as running:
        yield running


async def test_the_voice_webhook_answers_twiml_to_twilios_signature_only(
    signed_server: EmbeddedServer,
) -> None:
    validator = RequestValidator(AUTH_TOKEN)
    params = {"CallSid": "CA0123", "From": "+15550100", "To": "+15550199", "AccountSid": "AC0123"}
    signature = validator.compute_signature("https://voice.example.com/v1/twilio/voice", params)
    async with httpx.AsyncClient() as http:
        url = f"{signed_server.http_url}/v1/twilio/voice"
        answer = await http.post(url, data=params, headers={"X-Twilio-Signature": signature})
        forged = await http.post(
            url, data={**params, "From": "+15550666"}, headers={"X-Twilio-Signature": signature}
        )
        unsigned = await http.post(url, data=params)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/xml")
    stream = ET.fromstring(answer.text).find("./Connect/Stream")
    assert stream is not None and stream.get("url") == "wss://voice.example.com/v1/twilio/stream"
    for refused in (forged, unsigned):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "unauthorized"


async def test_the_stream_handshake_needs_twilios_signature_of_its_url(signed_server: EmbeddedServer) -> None:
    validator = RequestValidator(AUTH_TOKEN)
    signature = validator.compute_signature("wss://voice.example.com/v1/twilio/stream", {})
    url = stream_url(signed_server)
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(url)
    assert refused.value.response.status_code == 403
    peer = await TwilioPeer.connect(url, additional_headers={"X-Twilio-Signature": signature})
    await peer.open()
    await peer.stop()
    await slot_freed(signed_server)


@pytest.mark.parametrize("query", ["greeting=hello%20there", "next=/menu", "a=1&a=2", "x=%7E+y"])
async def test_on_every_edge_a_webhook_whose_query_does_not_round_trip_is_checked_as_twilio_signed_it(
    edge: Edge, query: str
) -> None:
    twilio = TwilioConfig(public_url="https://voice.example.com", auth_token=AUTH_TOKEN)
    config = ServerConfig(twilio=twilio)
    params = {"CallSid": "CA0123", "From": "+15550100"}
    signature = RequestValidator(AUTH_TOKEN).compute_signature(
        f"https://voice.example.com/v1/twilio/voice?{query}", params
    )
    async with EmbeddedServer(load_model("scripted", {}), config=config, edge=edge) as server:
        url = f"{server.http_url}/v1/twilio/voice?{query}"
        async with httpx.AsyncClient() as http:
            signed = await http.post(url, data=params, headers={"X-Twilio-Signature": signature})
            forged = await http.post(url, data=params, headers={"X-Twilio-Signature": signature[::-1]})
    assert signed.status_code == 200 and signed.headers["content-type"].startswith("text/xml")
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "unauthorized"
