"""DuplexClient against our own server (EmbeddedServer with the scripted model)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from duplexkit.client import SERVER_SOURCE, DuplexClient
from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer

RATE = 16_000
REPLY = "This is a scripted reply."


def speech(seconds: float) -> np.ndarray:
    t = np.arange(round(seconds * RATE)) / RATE
    return (0.2 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(load_model("scripted", {"first_output_ms": "50", "token_ms": "5"})) as srv:
        yield srv


async def test_a_committed_turn_is_answered_measured_on_the_server_clock_and_closed_cleanly(
    server: EmbeddedServer,
) -> None:
    async with DuplexClient(server.url) as client:
        caps = await client.configure(timeout_s=5)
        assert caps.advertised and caps.chunk_period_ms == 1000
        await client.stream(speech(1.5), sample_rate_hz=RATE, pace="as-fast-as-possible")
        await client.commit(timeout_s=5)
        padding = asyncio.create_task(client.pad_silence())
        drain = await client.drain(settle_s=0.3, timeout_s=10)
        padding.cancel()
        await asyncio.wait([padding])
        await client.ack_playback(timeout_s=2)
        close = await client.close(5)
    assert drain.settled, drain
    assert (close.clean, close.reason) == (True, "client_close")
    [r] = client.collector.responses()
    assert r.status == "completed"
    assert r.source == SERVER_SOURCE
    assert r.ttft_ms is not None and r.ttfp_ms is not None and r.tpot_ms is not None
    assert r.ttfp_ms >= 50.0  # the model's first_output_ms, measured from the request start
    assert r.audio_ms == pytest.approx(len(REPLY) * 60.0)
    assert r.rtf is not None and r.rtf > 0
    assert r.text == REPLY
    [sentence] = client.collector.sentences()
    assert sentence.sentence == REPLY and sentence.start >= 1.5
    assert client.collector.failures() == []
    acknowledged = [e.data["played_ms"] for e in client.events if e.type == "playback.acknowledged"]
    assert acknowledged and acknowledged[-1] == pytest.approx(r.audio_ms)
    session = client.collector.session()
    assert session.turns == 1 and session.stream_ttfp_ms is not None


async def test_realtime_streaming_keeps_its_schedule_and_stamps_events_where_they_were_heard(
    server: EmbeddedServer,
) -> None:
    async with DuplexClient(server.url) as client:
        await client.configure(timeout_s=5)
        report = await client.stream(np.zeros(RATE * 2, np.float32), sample_rate_hz=RATE, chunk_ms=100)
        for _ in range(200):
            listens = [e for e in client.events if e.type == "response.listen"]
            if len(listens) == 2:
                break
            await asyncio.sleep(0.01)
        await client.close(5)
    assert report.completed and report.pacing is not None
    assert report.pacing.appends == 20 and report.pacing.stalls == ()
    assert report.pacing.schedule_error_ms is not None and report.pacing.schedule_error_ms.p50 < 20.0
    assert report.pacing.drift_ms is not None and abs(report.pacing.drift_ms) < 50.0
    # The server answers each 1000 ms unit with a listen once the append that closes it is on the wire:
    # each is heard where it arrived on the stream's clock, never before the unit it answers closed.
    assert [e.data["unit_end_ms"] for e in listens] == [1000.0, 2000.0]
    assert listens[0].media_ms >= 1000.0 and listens[1].media_ms >= 2000.0
    origin = client.collector.stream_started_at
    assert origin is not None
    assert [round(e.media_ms, 3) for e in listens] == [
        round((e.received_at - origin) * 1000.0, 3) for e in listens
    ]
