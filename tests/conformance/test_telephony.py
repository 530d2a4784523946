"""The matrix's cells for the media clients: a Twilio call and a WebRTC call set up by the openai SDK."""

from __future__ import annotations

import pytest

from duplexkit.protocol.audio import resample
from duplexkit.server import EmbeddedServer
from tests.conformance.checks import SCRIPTED_REPLY, Samples, assert_answers, assert_voiced, slot_freed
from tests.conformance.conftest import Models
from tests.conformance.drivers import openai_webrtc, twilio
from tests.conformance.matrix import Client, cells

pytest.importorskip("aiortc", reason="needs the webrtc extra")


@pytest.mark.parametrize(("client", "model", "pacing"), cells("test_telephony.py"))
async def test_a_spoken_turn(
    client: Client, model: str, pacing: str, served: EmbeddedServer, question: Samples, models: Models
) -> None:
    if client.name == "twilio":
        turn = await twilio(served, question, pacing)
        assert_voiced(turn)
        if model == "cascade":  # the line carries no text: the cascade's own recogniser hears the reply
            whisper = models("cascade").whisper  # type: ignore[attr-defined]
            assert_answers(whisper.transcribe(resample(turn.audio, turn.rate_hz, 16_000)).text, model)
        else:  # the scripted reply's audio, all of it (60 ms a character), and nothing else
            assert abs(len(turn.audio) / turn.rate_hz - 0.060 * len(SCRIPTED_REPLY)) < 0.1
    else:
        turn = await openai_webrtc(served, question, pacing)
        assert_voiced(turn)
        assert_answers(turn.transcript, model)
    await slot_freed(served)
