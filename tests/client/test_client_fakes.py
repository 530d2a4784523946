"""DuplexClient against small fake servers that record every frame they read."""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from typing import Any

import numpy as np
import pytest

from duplexkit.client import COMMIT_SOURCE, SERVER_SOURCE, ConnectionLost, DuplexClient, SessionError
from tests.client.fakes import FakeServer, FakeSession

RATE = 16_000


def clip(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * RATE), dtype=np.float32)


async def just_serve(s: FakeSession) -> None:
    await s.handshake({"chunk_period_ms": 1000})
    await s.serve_until_close()


def replier(metrics: str | None) -> Any:
    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000})

        async def on_frame(frame: dict[str, Any]) -> None:
            if frame["type"] == "input_audio_buffer.commit":
                await s.send("input_audio_buffer.committed", item_id="item_0", audio_end_ms=500.0)
                await s.reply(metrics=metrics)

        await s.serve_until_close(on_frame)

    return handler


async def converse(client: DuplexClient, *, settle_s: float = 0.2) -> float:
    """Configure, stream 0.5 s, commit, pad until settled, final ack; return the commit's wire time."""
    await client.configure(timeout_s=2)
    await client.stream(clip(0.5), sample_rate_hz=RATE, pace="as-fast-as-possible")
    committed_at = await client.commit(timeout_s=2)
    padding = asyncio.create_task(client.pad_silence())
    drain = await client.drain(settle_s=settle_s, timeout_s=5)
    padding.cancel()
    await asyncio.wait([padding])
    assert drain.settled, drain
    await client.ack_playback(timeout_s=1)
    return committed_at


# --- configure ---------------------------------------------------------------------------------------


async def test_configure_sends_our_session_defaults_over_the_duplex_url_and_reads_capabilities() -> None:
    updates: list[dict[str, Any]] = []

    async def handler(s: FakeSession) -> None:
        updates.append(await s.handshake({"chunk_period_ms": 500, "first_unit_ms": 530}))
        await s.serve_until_close()

    async with (
        FakeServer(handler) as server,
        DuplexClient(server.url, api_key="sekrit", model="omni") as client,
    ):
        caps = await client.configure(extra_body={"reply": "hello"}, timeout_s=2)
        assert (await client.close(2)).clean
    path, headers = server.requests[0]
    assert path == "/v1/realtime?duplex=1&autostart=0&model=omni"
    assert headers["authorization"] == "Bearer sekrit"
    session = updates[0]["session"]
    assert session["modalities"] == ["audio", "text"]
    assert session["input_audio_format"] == session["output_audio_format"] == "pcm16"
    assert "turn_detection" in session and session["turn_detection"] is None
    assert session["playback_commit_policy"] == "ack_only"
    assert session["extra_body"] == {"reply": "hello"}
    assert session["model"] == "omni"
    assert (caps.chunk_period_ms, caps.grid.first_end_ms, caps.advertised) == (500, 530, True)
    assert client.session_id == "sess_fake"


async def test_capabilities_default_to_1000_ms_units_when_the_server_advertises_none() -> None:
    async def handler(s: FakeSession) -> None:
        await s.handshake(capabilities=None)
        await s.serve_until_close()

    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        caps = await client.configure(timeout_s=2)
        assert (caps.chunk_period_ms, caps.grid.first_end_ms, caps.advertised) == (1000, 1000, False)


async def test_configure_waits_a_bounded_time_for_session_created() -> None:
    async def handler(s: FakeSession) -> None:
        await s.serve_until_close()  # reads the update, never answers it

    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.configure(timeout_s=0.3)
        assert time.monotonic() - started < 1.0


async def test_a_refused_session_raises_with_the_error_event() -> None:
    async def handler(s: FakeSession) -> None:
        await s.until("session.update")
        await s.send(
            "error", error={"type": "rate_limit_error", "code": "resource_exhausted", "message": "full"}
        )
        await s.serve_until_close()

    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        with pytest.raises(SessionError, match="resource_exhausted") as refused:
            await client.configure(timeout_s=2)
        assert refused.value.event is not None and refused.value.event["error"]["message"] == "full"


async def test_a_refusal_at_accept_then_a_close_raises_with_the_error_not_a_bare_connection_loss() -> None:
    async def handler(s: FakeSession) -> None:  # what our server does over capacity
        await s.send("error", error={"type": "rate_limit_error", "code": "session_capacity_exhausted"})
        await s.ws.close(1013, "try again later")

    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        with pytest.raises(SessionError) as refused:
            await client.configure(timeout_s=2)
    assert not isinstance(refused.value, ConnectionLost)
    assert refused.value.event is not None
    assert refused.value.event["error"]["code"] == "session_capacity_exhausted"


# --- the append shape, frames, FIFO ------------------------------------------------------------------


async def test_appends_carry_duration_and_the_cumulative_media_clock_and_silence_has_the_same_shape() -> None:
    async with FakeServer(just_serve) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        report = await client.stream(clip(1.0), sample_rate_hz=RATE, pace="as-fast-as-possible", chunk_ms=300)
        await client.append_silence(250)
        assert client.audio_end_ms == client.sent_audio_end_ms == 1250.0
        await client.close(2)
    appends = server.of_type("input_audio_buffer.append")
    assert [a["duration_ms"] for a in appends] == [300, 300, 300, 100, 250]
    assert [a["audio_end_ms"] for a in appends] == [300, 600, 900, 1000, 1250]
    assert {frozenset(a) for a in appends} == {
        frozenset({"type", "audio", "sample_rate_hz", "duration_ms", "audio_end_ms"})
    }
    assert all(a["sample_rate_hz"] == RATE for a in appends)
    assert appends[-1]["audio"] == len(base64.b64encode(bytes(2 * 4000)))  # 250 ms of zeros
    assert report.completed and report.pacing is None and report.to_json()["clock"] == "invalid"


async def test_a_clip_at_another_rate_is_resampled_to_the_servers_input_rate() -> None:
    async with FakeServer(just_serve) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        await client.stream(np.zeros(48_000, np.float32), sample_rate_hz=48_000, pace="as-fast-as-possible")
        await client.close(2)
    appends = server.of_type("input_audio_buffer.append")
    assert appends[-1]["audio_end_ms"] == 1000.0
    assert sum(a["audio"] for a in appends) == sum(len(base64.b64encode(bytes(6400))) for _ in range(5))


async def test_video_frame_k_rides_on_the_append_that_closes_unit_k() -> None:
    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000, "first_unit_ms": 1030})
        await s.serve_until_close()

    frames = [b"\xff\xd8\xff frame %d" % k for k in range(5)]
    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        report = await client.stream(
            clip(3.5), sample_rate_hz=RATE, frames=frames, pace="as-fast-as-possible", chunk_ms=200
        )
        await client.close(2)
    carried = {
        a["audio_end_ms"]: [base64.b64decode(f) for f in a["video_frames"]]
        for a in server.of_type("input_audio_buffer.append")
        if "video_frames" in a
    }
    # Units close at 1030, 2030, 3030 ms; the clip ends inside the fourth unit, whose frame rides last.
    assert carried == {1200.0: frames[:1], 2200.0: frames[1:2], 3200.0: frames[2:3], 3500.0: frames[3:4]}
    assert (report.frames_sent, report.frames_dropped) == (4, 1)


async def test_a_cancelled_stream_stops_between_appends_and_the_client_stays_usable() -> None:
    async with FakeServer(just_serve) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.stream(clip(2.0), sample_rate_hz=RATE, chunk_ms=100), 0.45)
        report = client.streams[-1]
        await client.commit(timeout_s=2)
        assert (await client.close(2)).clean
    types = server.types()
    appends = server.of_type("input_audio_buffer.append")
    assert 2 <= len(appends) == report.appends_queued < 20
    assert types[types.index("input_audio_buffer.commit") - 1] == "input_audio_buffer.append"
    assert appends[-1]["audio_end_ms"] == client.audio_end_ms == report.audio_end_ms == 100.0 * len(appends)
    [commit] = server.of_type("input_audio_buffer.commit")
    assert commit["final"] is True  # the commit closes the input: the server flushes the residual unit


async def test_a_cancelled_stream_reports_exactly_the_frames_that_went_out() -> None:
    frames = [b"\xff\xd8\xff frame %d" % k for k in range(8)]
    async with FakeServer(just_serve) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        with pytest.raises(TimeoutError):  # realtime pace: cut after ~2.3 s of an 8 s clip
            await asyncio.wait_for(
                client.stream(clip(8.0), sample_rate_hz=RATE, frames=frames, chunk_ms=200), 2.3
            )
        report = client.streams[-1]
        assert (await client.close(2)).clean
    received = sum(len(a.get("video_frames", [])) for a in server.of_type("input_audio_buffer.append"))
    assert 1 <= report.frames_sent == received < len(frames)


async def test_playback_is_acked_periodically_while_the_session_runs_not_only_at_the_end() -> None:
    async with FakeServer(replier(None)) as server, DuplexClient(server.url, ack_interval_s=0.05) as client:
        await client.configure(timeout_s=2)
        await client.stream(clip(0.5), sample_rate_hz=RATE, pace="as-fast-as-possible")
        await client.commit(timeout_s=2)
        for _ in range(40):  # no final ack is requested: only the periodic loop can send one
            if server.of_type("playback.ack"):
                break
            await asyncio.sleep(0.05)
        await client.close(2)
    [ack] = server.of_type("playback.ack")
    assert (ack["response_id"], ack["played_ms"]) == ("resp_1", 100.0)


# --- metrics sources ---------------------------------------------------------------------------------


async def test_vllm_omni_metric_placements_are_adopted_and_labelled_as_server_anchored() -> None:
    async with FakeServer(replier("vllm")) as server, DuplexClient(server.url) as client:
        await converse(client)
        await client.close(2)
    [r] = client.collector.responses()
    assert r.source == SERVER_SOURCE
    assert (r.ttft_ms, r.ttfp_ms) == (150.0, 180.0)
    assert r.tpot_ms is None  # the server sent none
    assert r.rtf == pytest.approx(1.8)  # (180 ms + no receive span) / 100 ms of audio
    assert [s.sentence for s in client.collector.sentences()] == ["Hi there."]
    acks = server.of_type("playback.ack")
    assert acks and acks[-1]["response_id"] == "resp_1" and acks[-1]["played_ms"] == 100.0


async def test_without_server_metrics_latency_is_on_the_client_clock_from_the_commit_send() -> None:
    async with FakeServer(replier(None)) as server, DuplexClient(server.url) as client:
        committed_at = await converse(client)
        await client.close(2)
    [r] = client.collector.responses()
    assert r.source == COMMIT_SOURCE
    text = next(e for e in client.events if e.type == "response.output_audio_transcript.delta")
    audio = next(e for e in client.events if e.type == "response.output_audio.delta")
    assert r.ttft_ms == pytest.approx((text.received_at - committed_at) * 1000)
    assert r.ttfp_ms == pytest.approx((audio.received_at - committed_at) * 1000)
    assert r.ttfp_ms >= 50.0  # the fake waits 50 ms between response.created and the audio
    assert r.tpot_ms is None
    sentence = client.collector.sentences()[0]
    assert sentence.start == round(text.media_ms / 1000, 3)


async def test_the_drain_settles_although_every_padded_unit_is_answered_with_a_listen() -> None:
    listens_sent: list[float] = []

    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 100})
        committed = False

        async def on_frame(frame: dict[str, Any]) -> None:
            nonlocal committed
            if frame["type"] == "input_audio_buffer.commit":
                committed = True
                await s.send("input_audio_buffer.committed", item_id="item_0", audio_end_ms=300.0)
            if committed and frame["type"] in ("input_audio_buffer.commit", "input_audio_buffer.append"):
                listens_sent.append(time.monotonic())
                await s.send(
                    "response.listen",
                    response={
                        "status": "listening",
                        "metadata": {"reason": "model_listen", "model_listen": True},
                    },
                )

        await s.serve_until_close(on_frame)

    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        await client.stream(clip(0.3), sample_rate_hz=RATE, pace="as-fast-as-possible", chunk_ms=100)
        await client.commit(timeout_s=2)
        padding = asyncio.create_task(client.pad_silence())
        drain = await client.drain(settle_s=0.35, timeout_s=3)
        padding.cancel()
        await asyncio.wait([padding])
        await client.close(2)
    assert drain.outcome == "settled"
    assert drain.waited_s < 1.0
    assert drain.listens >= 3  # listens kept coming, faster than the window, and did not hold it open
    assert len(listens_sent) >= 3 and max(b - a for a, b in itertools.pairwise(listens_sent)) < 0.35
    padded = server.of_type("input_audio_buffer.append")[3:]
    assert len(padded) >= 3 and all(a["duration_ms"] == 100 for a in padded)


# --- bounded waits and stalls ------------------------------------------------------------------------


async def test_close_is_bounded_and_reported_unclean_when_session_close_is_never_answered() -> None:
    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000})
        while True:
            await s.recv()  # reads session.close and ignores it

    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        result = await client.close(0.3)
    assert not result.clean
    assert result.outcome == "timeout" and result.reason is None
    assert 0.3 <= result.elapsed_s < 1.5
    assert server.of_type("session.close")


async def test_a_server_that_stops_reading_bounds_the_stream_and_the_commit_stays_ahead_of_padding() -> None:
    resume = asyncio.Event()

    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000})
        for _ in range(2):
            await s.until("input_audio_buffer.append")
        await resume.wait()  # stop reading mid-stream
        await s.serve_until_close()

    async with (
        FakeServer(handler, receive_buffer=8192, max_queue=1) as server,
        DuplexClient(server.url) as client,
    ):
        await client.configure(timeout_s=2)
        started = time.monotonic()
        report = await client.stream(
            clip(300.0), sample_rate_hz=RATE, pace="as-fast-as-possible", chunk_ms=10_000, timeout_s=1.0
        )
        assert report.timed_out and not report.completed
        assert 1.0 <= time.monotonic() - started < 2.0
        assert report.appends_written < report.appends_queued < report.appends_planned
        with pytest.raises(TimeoutError):
            await client.commit(timeout_s=0.2)
        padding = asyncio.create_task(client.pad_silence(append_ms=100))
        await asyncio.sleep(0.25)
        resume.set()
        for _ in range(200):
            if len(server.of_type("input_audio_buffer.append")) > report.appends_queued + 1:
                break
            await asyncio.sleep(0.02)
        padding.cancel()
        await asyncio.wait([padding])
        assert (await client.close(2)).clean
    types = server.types()
    commit_at = types.index("input_audio_buffer.commit")
    appends = server.of_type("input_audio_buffer.append")
    # Every queued stream append arrived whole and before the commit; the padding only after it.
    assert types[1:commit_at] == ["input_audio_buffer.append"] * report.appends_queued
    assert appends[report.appends_queued - 1]["audio_end_ms"] == report.audio_end_ms
    padded = appends[report.appends_queued :]
    assert len(padded) >= 2 and types[commit_at + 1] == "input_audio_buffer.append"
    assert padded[0]["audio_end_ms"] == report.audio_end_ms + 100.0


async def test_close_is_bounded_even_when_the_server_has_stopped_reading_for_good() -> None:
    test_over = asyncio.Event()

    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000})
        await s.recv()
        await test_over.wait()  # never reads again

    async with (
        FakeServer(handler, receive_buffer=8192, max_queue=1, close_timeout=0.1) as server,
        DuplexClient(server.url) as client,
    ):
        await client.configure(timeout_s=2)
        report = await client.stream(
            clip(300.0), sample_rate_hz=RATE, pace="as-fast-as-possible", chunk_ms=10_000, timeout_s=0.5
        )
        assert report.timed_out
        result = await client.close(0.2)
        assert not result.clean and result.outcome == "timeout"
        assert result.elapsed_s < 0.2 + 1.0 + 0.5  # the wait, then the socket's bounded handshake
        test_over.set()


async def test_a_lost_connection_ends_the_drain_at_once_and_fails_later_sends() -> None:
    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000})
        await s.until("input_audio_buffer.commit")
        await s.ws.close()

    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        await client.commit(timeout_s=2)
        drain = await client.drain(settle_s=0.2, timeout_s=5)
        assert drain.outcome == "connection_closed" and drain.waited_s < 1.0
        with pytest.raises(ConnectionLost):
            await client.append_silence(100)
        result = await client.close(1)
    assert not result.clean and result.outcome == "connection_closed"
    assert server.of_type("input_audio_buffer.commit")


async def test_a_reply_arriving_mid_chunk_is_placed_where_it_arrived_not_at_the_last_chunk_s_end() -> None:
    # 1 s appends in real time; the server answers 0.5 s after reading the first one (sent 1 s into the
    # stream), so the reply arrives at least 1.5 s into the stream. The end of the last append sent,
    # 1.0 s, would place it (and its sentence, as 1.0-1.0 s) half a second before it was heard.
    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 1000})
        await s.until("input_audio_buffer.append")
        await asyncio.sleep(0.5)
        await s.reply(metrics=None, audio_ms=100.0)
        await s.serve_until_close()

    async with FakeServer(handler) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        await client.stream(clip(2.0), sample_rate_hz=RATE, chunk_ms=1000)
        [placed] = client.collector.audio_placements()
        [sentence] = client.collector.sentences()
    assert placed.start >= 24 * 1500
    assert sentence.start == round(placed.start / 24_000, 3)
    assert sentence.end == round((placed.start + len(placed.samples)) / 24_000, 3)


def slow_unit_server(per_unit_s: float) -> Any:
    """A server that answers every 100 ms unit, one per `per_unit_s` (2.5x slower than real time): a
    listen, except the fourth unit (the one after the committed third), which it answers with a reply."""

    async def handler(s: FakeSession) -> None:
        await s.handshake({"chunk_period_ms": 100})
        units: asyncio.Queue[int] = asyncio.Queue()

        async def answer() -> None:
            while True:
                unit = await units.get()
                await asyncio.sleep(per_unit_s)
                if unit == 4:
                    await s.reply(metrics=None)
                else:
                    listening = {"status": "listening", "metadata": {"model_listen": True}}
                    await s.send("response.listen", response=listening)

        appended = itertools.count(1)
        answering = asyncio.create_task(answer())

        async def on_frame(frame: dict[str, Any]) -> None:
            if frame["type"] == "input_audio_buffer.append":
                units.put_nowait(next(appended))
            elif frame["type"] == "input_audio_buffer.commit":
                await s.send("input_audio_buffer.committed", item_id="item_0", audio_end_ms=300.0)

        try:
            await s.serve_until_close(on_frame)
        finally:
            answering.cancel()

    return handler


@pytest.mark.parametrize(("timeout_s", "outcome"), [(20.0, "settled"), (0.5, "timeout")])
async def test_a_server_answering_units_late_is_waited_for_up_to_the_drain_bound(
    timeout_s: float, outcome: str
) -> None:
    # The committed unit is decided ~0.75 s in and the reply comes ~0.25 s later: a 0.15 s wall window would
    # have published silence. The drain waits in units; a bound that runs out first is a drain timeout.
    async with FakeServer(slow_unit_server(0.25)) as server, DuplexClient(server.url) as client:
        await client.configure(timeout_s=2)
        await client.stream(clip(0.3), sample_rate_hz=RATE, pace="as-fast-as-possible", chunk_ms=100)
        await client.commit(timeout_s=2)
        padding = asyncio.create_task(client.pad_silence())
        drain = await client.drain(settle_s=0.15, timeout_s=timeout_s)
        padding.cancel()
        await asyncio.wait([padding])
        await client.close(2)
    assert drain.outcome == outcome, drain
    if outcome == "settled":
        assert drain.quiet_rule == "units" and len(client.collector.responses()) == 1
