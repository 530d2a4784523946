"""The matrix's cells for the duplex protocols' clients: vLLM-Omni's (`?duplex=1`) and Full-Duplex-Bench's
Moshi client on `/api/chat`."""

from __future__ import annotations

import pytest

from duplexkit.server import EmbeddedServer
from tests.conformance.checks import Samples, assert_answers, assert_voiced, slot_freed
from tests.conformance.drivers import fdb_moshi, vllm_omni
from tests.conformance.matrix import Client, cells


@pytest.mark.parametrize(("client", "model", "pacing"), cells("test_duplex.py"))
async def test_a_spoken_turn(
    client: Client, model: str, pacing: str, served: EmbeddedServer, question: Samples
) -> None:
    drive = vllm_omni if client.name == "vllm-omni" else fdb_moshi
    turn = await drive(served, question, pacing)
    assert_voiced(turn)
    assert_answers(turn.transcript, model)
    if model == "moshi":
        assert turn.transcript.strip(), "the tiny Moshi's text pieces"
    await slot_freed(served)
