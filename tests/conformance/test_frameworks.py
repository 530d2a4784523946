"""The matrix's cells for the agent frameworks' realtime clients: Pipecat and LiveKit."""

from __future__ import annotations

import pytest

from duplexkit.server import EmbeddedServer
from tests.conformance.checks import Samples, assert_answers, assert_voiced, slot_freed
from tests.conformance.matrix import Client, cells


@pytest.mark.parametrize(("client", "model", "pacing"), cells("test_frameworks.py"))
async def test_a_spoken_turn(
    client: Client, model: str, pacing: str, served: EmbeddedServer, question: Samples
) -> None:
    from tests.conformance.frameworks import livekit, pipecat

    drive = pipecat if client.name == "pipecat" else livekit
    turn = await drive(served, question, pacing)
    assert_voiced(turn)
    assert_answers(turn.transcript, model)
    await slot_freed(served)
