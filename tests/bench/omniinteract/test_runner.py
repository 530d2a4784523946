"""The OmniInteract case lifecycle against a fake duplex server on a real socket: what goes on the wire (the
session settings, 200 ms appends, frames at n + 0.5 s), the simulated listener's acks, the completion rule,
tolerated and fatal errors, the per-case files and resume."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.benchmark import get_benchmark
from duplexkit.bench.omniinteract.case import QA, Case
from duplexkit.bench.runner import BenchmarkRunner
from duplexkit.bench.sources import Media
from duplexkit.bench.synth import buzz, write_mp4
from duplexkit.client import SessionBounds

REPLY = "The square is red."


def video(tmp_path: Path, seconds: float = 3.0) -> Media:
    path = tmp_path / "clip.mp4"
    sound = np.zeros(round(seconds * 16_000), dtype=np.float32)
    speech = buzz("what colour is it")
    sound[: speech.size] = speech[: sound.size]
    frame = np.full((48, 64, 3), 90, dtype=np.uint8)
    write_mp4(path, lambda t: frame, round(seconds * 10), fps=10, width=64, height=48, audio=sound)
    return Media.from_file(path)


def case(media: Media) -> Case:
    qa = QA(0.2, "What colour is it?", 1.0, "It is red.", "realtime", False)
    return Case(
        "1q1a", "0001", "multi_turn", (qa,), "0001.json", media, {"keywords": {"It is red.": ["red"]}}
    )


@dataclass
class Fake:
    """Replies once, on the append ending at `reply_at_ms`; `errors` are error codes sent with the reply."""

    reply_at_ms: float = 1000.0
    errors: tuple[str, ...] = ()
    rate: int = 24_000
    received: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, ws: ServerConnection) -> None:
        seq = 0
        connection_start = len(self.received)
        media_ms = 0.0  # like our server, each decision names its unit's end (`unit_end_ms`)

        async def send(data: dict[str, Any]) -> None:
            nonlocal seq
            seq += 1
            await ws.send(json.dumps({"event_id": f"e{seq}", "server_event_seq": seq, **data}))

        async for raw in ws:
            message = json.loads(raw)
            self.received.append(message)
            kind = message["type"]
            if kind == "input_audio_buffer.append":
                media_ms = float(message["audio_end_ms"])
            updates = sum(m["type"] == "session.update" for m in self.received[connection_start:])
            if kind == "session.update" and updates == 1:
                caps = {
                    "chunk_period_ms": 1000,
                    "input_sample_rate_hz": 16000,
                    "output_sample_rate_hz": 24000,
                }
                await send({"type": "session.created", "session": {"id": "s1", "capabilities": caps}})
            elif kind == "session.update":
                await send({"type": "session.updated", "session": {"id": "s1"}})
            elif kind == "input_audio_buffer.append" and message["audio_end_ms"] == self.reply_at_ms:
                created = {"id": "r1", "status": "in_progress"}
                await send({"type": "response.created", "response": created, "unit_end_ms": media_ms})
                audio = base64.b64encode(bytes(self.rate)).decode()  # 0.5 s
                marks = [{"text_chars": len(REPLY), "audio_end_ms": 500.0}]
                await send(
                    {
                        "type": "response.output_audio.delta",
                        "response_id": "r1",
                        "item_id": "item_r1",
                        "delta": audio,
                        "sample_rate_hz": self.rate,
                        "metadata": {"audio_duration_ms": 500.0, "audio_text_marks": marks},
                    }
                )
                await send(
                    {"type": "response.output_audio_transcript.delta", "response_id": "r1", "delta": REPLY}
                )
                for code in self.errors:
                    await send({"type": "error", "error": {"type": "invalid_request_error", "code": code}})
                await send({"type": "response.done", "response": {"id": "r1", "status": "completed"}})
            elif kind == "input_audio_buffer.commit":
                await send({"type": "input_audio_buffer.committed"})
                listen = {"status": "listening", "metadata": {"reason": "model_listen", "model_listen": True}}
                await send({"type": "response.listen", "response": listen, "unit_end_ms": media_ms})
            elif kind == "playback.ack":
                await send({"type": "playback.acknowledged", "response_id": message["response_id"]})
            elif kind == "session.close":
                await send({"type": "session.closed", "session_id": "s1", "reason": "client"})
                await ws.close()
                return


@pytest.fixture
async def fake() -> AsyncIterator[Fake]:
    server = Fake()
    async with serve(server.handle, "127.0.0.1", 0) as ws_server:
        port = ws_server.sockets[0].getsockname()[1]
        server.url = f"ws://127.0.0.1:{port}/v1/realtime"
        yield server


def config(url: str, **kw: Any) -> RunConfig:
    bounds = SessionBounds(settle_s=0.3, drain_timeout_s=5.0, close_timeout_s=2.0)
    return RunConfig(url=url, pace=kw.pop("pace", "realtime"), concurrency=1, bounds=bounds, **kw)


async def test_a_case_streams_as_the_reference_runner_does_and_lands_its_files(
    fake: Fake, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    runner = BenchmarkRunner(config(fake.url), run, benchmark=get_benchmark("omniinteract"))
    (result,) = await runner.run([case(video(tmp_path))])
    assert result.status == "published"

    updates = [m["session"] for m in fake.received if m["type"] == "session.update"]
    assert updates[0]["turn_detection"] is None and updates[0]["playback_commit_policy"] == "ack_only"
    assert updates[1] == {"overlap_policy": "listen_only"}
    appends = [m for m in fake.received if m["type"] == "input_audio_buffer.append"]
    assert {a["duration_ms"] for a in appends} == {200.0}
    assert [a["audio_end_ms"] for a in appends] == [200.0 * (k + 1) for k in range(len(appends))]
    assert appends[-1]["audio_end_ms"] % 1000 == 0  # padded to whole seconds
    frames = {a["audio_end_ms"]: len(a.get("video_frames", [])) for a in appends if a.get("video_frames")}
    assert frames == {600.0: 1, 1600.0: 1, 2600.0: 1}  # t = 0.5, 1.5, 2.5 s ride the first append past them
    commit_at = next(i for i, m in enumerate(fake.received) if m["type"] == "input_audio_buffer.commit")
    assert commit_at > fake.received.index(appends[-1])

    acks = [m for m in fake.received if m["type"] == "playback.ack"]
    assert acks and all(a["response_id"] == "r1" and a["item_id"] == "item_r1" for a in acks)
    assert acks[-1]["played_ms"] == 500.0  # the final ack is the exact total heard
    played = [a["played_ms"] for a in acks]
    assert len(played) >= 2 and played[0] >= 200.0  # acks follow playback, a step of 200 ms apart
    assert all(later - earlier >= 200.0 for earlier, later in itertools.pairwise(played[:-1]))
    assert [a["played_ms"] for a in acks] == sorted(a["played_ms"] for a in acks)

    folder = tmp_path / "run" / "1q1a" / "0001"
    assert {p.name for p in folder.iterdir()} == {
        "output.wav",
        "wav_transcript.json",
        "events.json",
        "result.json",
        ".done",
    }
    # the official scorer's shape: an object with `chunks`, words as {text, start, end}
    transcript = json.loads((folder / "wav_transcript.json").read_text())
    (chunk,) = transcript["chunks"]
    assert transcript["text"] == REPLY and chunk["text"] == REPLY and len(chunk["aligned_words"]) == 4
    assert [w["text"] for w in chunk["aligned_words"]] == REPLY.split()
    assert all(w["start"] <= w["end"] for w in chunk["aligned_words"])
    assert 1.0 <= chunk["timestamp"][0] < 2.0  # played on arrival, about when the 1000 ms append went out
    meta = json.loads((tmp_path / "run" / "records" / "1q1a" / "0001.meta.json").read_text())
    assert meta["completion"]["outcome"] == "complete" and meta["word_timing"] == "audio_text_marks"
    assert meta["eligibility"] == {"eligible": True, "reasons": []}
    events = json.loads((folder / "events.json").read_text())
    delta = next(e for e in events if e["event"]["type"] == "response.output_audio.delta")
    assert delta["event"]["delta_bytes"] == 24_000 and "delta" not in delta["event"]
    assert delta["media_ms"] >= 1000.0


async def test_tolerated_errors_do_not_fail_a_case_and_resume_skips_it(fake: Fake, tmp_path: Path) -> None:
    fake.errors = ("playback_item_not_found", "playback_ack_too_late")
    run = RunDir(tmp_path / "run")
    hooks = get_benchmark("omniinteract")
    sample = case(video(tmp_path))
    (first,) = await BenchmarkRunner(config(fake.url, pace="as-fast-as-possible"), run, benchmark=hooks).run(
        [sample]
    )
    assert first.status == "published"
    meta = json.loads((tmp_path / "run" / "records" / "1q1a" / "0001.meta.json").read_text())
    assert meta["tolerated_errors"] == ["playback_ack_too_late", "playback_item_not_found"]
    assert meta["server_errors"] == []
    seen = len(fake.received)
    (again,) = await BenchmarkRunner(config(fake.url), run, benchmark=hooks).run([sample])
    assert again.status == "skipped" and len(fake.received) == seen


async def test_a_fatal_error_fails_the_case_once_and_leaves_a_failed_record(
    fake: Fake, tmp_path: Path
) -> None:
    fake.errors = ("model_error",)
    run = RunDir(tmp_path / "run")
    (result,) = await BenchmarkRunner(
        config(fake.url, pace="as-fast-as-possible"), run, benchmark=get_benchmark("omniinteract")
    ).run([case(video(tmp_path))])
    assert result.status == "failed" and result.error == "server_error: model_error" and not result.retried
    folder = tmp_path / "run" / "1q1a" / "0001"
    assert json.loads((folder / ".failed.json").read_text())["error"] == "server_error: model_error"
    assert not (folder / ".done").exists() and not run.is_published("1q1a", "0001")


async def test_a_clip_the_server_never_decides_on_is_bounded_by_the_completion_timeout(
    tmp_path: Path,
) -> None:
    received: list[str] = []

    async def silent(ws: ServerConnection) -> None:  # acknowledges the commit but never decides
        updates = 0
        async for raw in ws:
            kind = json.loads(raw)["type"]
            received.append(kind)
            updates += kind == "session.update"
            if kind == "session.update" and updates == 1:
                await ws.send(json.dumps({"type": "session.created", "session": {"id": "s"}}))
            elif kind == "input_audio_buffer.commit":
                await ws.send(json.dumps({"type": "input_audio_buffer.committed"}))
            elif kind == "session.close":
                await ws.send(json.dumps({"type": "session.closed", "reason": "client"}))
                return

    async with serve(silent, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/realtime"
        bounds = SessionBounds(settle_s=0.2, drain_timeout_s=0.5, close_timeout_s=1.0)
        cfg = RunConfig(url=url, pace="as-fast-as-possible", bounds=bounds)
        (result,) = await BenchmarkRunner(
            cfg, RunDir(tmp_path / "run"), benchmark=get_benchmark("omniinteract")
        ).run([case(video(tmp_path, 1.0))])
    assert result.status == "failed" and result.error == "drain_timeout" and result.retried
    assert received.count("input_audio_buffer.commit") == 2  # the stall was retried once


async def test_reply_audio_at_another_rate_plays_for_its_own_duration(fake: Fake, tmp_path: Path) -> None:
    fake.rate = 16_000
    run = RunDir(tmp_path / "run")
    cfg = config(fake.url)  # realtime: playback ends before the stream does
    (result,) = await BenchmarkRunner(cfg, run, benchmark=get_benchmark("omniinteract")).run(
        [case(video(tmp_path))]
    )
    assert result.status == "published"
    acks = [m for m in fake.received if m["type"] == "playback.ack"]
    assert acks[-1]["played_ms"] == 500.0  # 8,000 samples at 16 kHz, heard as 0.5 s
