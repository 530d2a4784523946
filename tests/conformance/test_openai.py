"""The matrix's cells for the openai SDK's WebSocket connections (GA and beta)."""

from __future__ import annotations

import pytest

from duplexkit.server import EmbeddedServer
from tests.conformance.checks import Samples, assert_answers, assert_voiced, slot_freed
from tests.conformance.conftest import Models
from tests.conformance.drivers import openai_websocket
from tests.conformance.matrix import Client, cells


@pytest.mark.parametrize(("client", "model", "pacing"), cells("test_openai.py"))
async def test_a_spoken_turn(
    client: Client, model: str, pacing: str, served: EmbeddedServer, question: Samples, models: Models
) -> None:
    api = "ga" if client.name == "openai-ga" else "beta"
    turn = await openai_websocket(served, question, pacing, api=api)
    assert_voiced(turn)
    assert_answers(turn.transcript, model)
    await slot_freed(served)
