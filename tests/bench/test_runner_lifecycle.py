"""The sample lifecycle and the retry policy, end to end against fault-injection servers.

Each fake is a `websockets.serve` server on port 0 (in the test's event loop, or in a thread of its own when
it must block its loop), speaking just enough of the duplex protocol:
`session.update` → `session.created` with capabilities, commit → `input_audio_buffer.committed`, a reply as
`response.created` → transcript delta → audio delta → `response.done`, a `response.listen` per padded
append, `session.close` → `session.closed`. Like our server, it names the unit each decision answers
(`unit_end_ms`: the media clock of the latest append it has read). Each connection follows a `Script`; a
fault is one field of it. The fake records every frame it reads and every event it sends, in order, with
its time.

Two faults live on the client's side of the socket (the `wire` fixture): a narrow link (small send buffer
and write limit), so that a server that stops reading stalls the client after kilobytes instead of the
megabytes loopback buffers hold; and a commit frame that is slow to reach the socket. A server cannot make
exactly the commit's write stall (the appends before it go through the same buffers), so that stall is
injected where it happens, in the client's socket `send`, and the fake still sees the resulting wire order.

Every test runs the sample through `BenchmarkRunner` (or, where only one attempt's state is the point,
`run_attempt`) and asserts the recorded metadata, the retry count and whether the sample was published.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import json
import logging
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

import duplexkit.client.client as client_module
from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.benchmark import DEFAULT_BENCHMARK, get_benchmark
from duplexkit.bench.media import prepare_media
from duplexkit.bench.omni_duplex_eval.dataset import Sample
from duplexkit.bench.omni_duplex_eval.runner import run_attempt
from duplexkit.bench.retry import capacity_backoff_s
from duplexkit.bench.runner import BenchmarkRunner, SampleResult
from duplexkit.client import DuplexClient, SessionBounds
from tests.bench.conftest import clip_sample

CAPABILITIES = {
    "chunk_period_ms": 1000,
    "first_unit_ms": 1000,
    "input_sample_rate_hz": 16_000,
    "output_sample_rate_hz": 24_000,
}
REPLY_TEXT = "Hello there. How are you?"
REPLY_SENTENCES = ["Hello there.", "How are you?"]
CLIP_S = 1.5
CHUNK_MS = 200
CLIP_APPENDS = round(CLIP_S * 1000 / CHUNK_MS)
PADDING_LISTEN = {"status": "listening", "metadata": {"reason": "silence_or_noise", "model_listen": False}}
MODEL_LISTEN = {"status": "listening", "metadata": {"reason": "model_listen", "model_listen": True}}

OnCommit = Literal["reply", "model_listen", "error", "busy"]


# --- the fault-injection server ---------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """What the fake does on one connection (the defaults: a well-behaved server)."""

    refuse: Literal["at_accept", "after_update"] | None = None
    """Refuse with `session_capacity_exhausted` (rate_limit_error, retryable) then close 1013."""
    answer_update: bool = True
    reply_after_append: int | None = None
    """Send a complete reply right after the n-th clip append (before the commit)."""
    stop_reading_after_append: int | None = None
    """Stop reading the socket after the n-th clip append, for the rest of the connection."""
    drop_after_append: int | None = None
    """Abort the TCP connection after the n-th clip append."""
    ack_commit: bool = True
    on_commit: tuple[OnCommit, ...] = ("reply",)
    error_code: str = "model_step_failed"
    reply_on_first_padding: bool = False
    """Step only on input: the reply to the committed clip comes with the first padded append."""
    listen_each_padding: bool = True
    """Answer each padded append with a (non-model) `response.listen`, as a stepping server does."""
    ack_too_late: bool = False
    """Answer every `playback.ack` with the benign error `playback_ack_too_late`."""
    answer_close: bool = True
    closed_after_s: float = 0.0
    """Delay before answering `session.close`."""
    block_loop_after_closed_s: float = 0.0
    """After `session.closed`, block the fake's own event loop (its closing handshake waits too)."""


@dataclass
class Connection:
    """What one connection saw and did: `log` entries are (monotonic time, "in" | "out", event type)."""

    script: Script
    log: list[tuple[float, str, str]] = field(default_factory=list)
    clip: list[dict[str, Any]] = field(default_factory=list)
    padding: list[dict[str, Any]] = field(default_factory=list)
    committed: bool = False

    def note(self, direction: str, kind: str) -> None:
        self.log.append((time.monotonic(), direction, kind))

    def positions(self, direction: str, kind: str) -> list[int]:
        return [i for i, (_, d, k) in enumerate(self.log) if d == direction and k == kind]

    def times(self, direction: str, kind: str) -> list[float]:
        return [t for t, d, k in self.log if d == direction and k == kind]


class FakeServer:
    """A fault-injection duplex server; connection n follows `scripts[min(n, last)]`.

    `async with` runs it in the test's event loop (as the embedded server runs beside `duplexkit bench`);
    `with` runs it in a thread with its own loop, for faults that block the server's loop.
    """

    def __init__(self, *scripts: Script, rcvbuf: int | None = None, max_queue: int | None = 16) -> None:
        self.scripts = scripts or (Script(),)
        self.connections: list[Connection] = []
        self.url = ""
        self._rcvbuf = rcvbuf
        self._max_queue = max_queue
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> FakeServer:
        self._task = asyncio.create_task(self._main())
        while not self._ready.is_set():
            assert not self._task.done(), "the fake server did not start"
            await asyncio.sleep(0.005)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None and self._stop is not None
        self._stop.set()
        await self._task

    def __enter__(self) -> FakeServer:
        self._thread.start()
        assert self._ready.wait(5), "the fake server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if self._rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._rcvbuf)
        sock.bind(("127.0.0.1", 0))
        async with serve(
            self._handle,
            sock=sock,
            max_queue=self._max_queue,
            max_size=None,
            ping_interval=None,
            compression=None,
            close_timeout=1.0,
        ):
            self.url = f"ws://127.0.0.1:{sock.getsockname()[1]}/v1/realtime"
            self._ready.set()
            await self._stop.wait()

    async def _handle(self, ws: ServerConnection) -> None:
        assert self._stop is not None
        number = len(self.connections)
        script = self.scripts[min(number, len(self.scripts) - 1)]
        conn = Connection(script)
        self.connections.append(conn)
        replies = 0
        media_ms = 0.0
        busy: asyncio.Task[None] | None = None

        async def send(kind: str, **fields: Any) -> None:
            conn.note("out", kind)
            await ws.send(json.dumps({"type": kind, **fields}))

        async def refuse() -> None:
            error = {
                "type": "rate_limit_error",
                "code": "session_capacity_exhausted",
                "message": "all session slots are in use; retry later",
                "retryable": True,
            }
            await send("error", error=error)
            await ws.close(1013, "try again later")

        async def reply() -> None:
            nonlocal replies
            replies += 1
            rid, iid = f"resp_{number}_{replies}", f"item_{number}_{replies}"
            await send(
                "response.created", response={"id": rid, "status": "in_progress"}, unit_end_ms=media_ms
            )
            await send(
                "response.output_audio_transcript.delta", response_id=rid, item_id=iid, delta=REPLY_TEXT
            )
            audio = base64.b64encode(tone_pcm16_24k(0.2)).decode()
            await send(
                "response.output_audio.delta",
                response_id=rid,
                item_id=iid,
                delta=audio,
                sample_rate_hz=24_000,
                unit_end_ms=media_ms,
            )
            await send("response.done", response={"id": rid, "status": "completed"})

        async def keep_busy() -> None:
            """A second reply that never ends: its audio keeps coming, unit after unit."""
            rid = f"resp_{number}_busy"
            with contextlib.suppress(ConnectionClosed):
                await send(
                    "response.created", response={"id": rid, "status": "in_progress"}, unit_end_ms=media_ms
                )
                while True:
                    audio = base64.b64encode(bytes(2 * 2_400)).decode()
                    await send(
                        "response.output_audio.delta",
                        response_id=rid,
                        item_id="item_busy",
                        delta=audio,
                        sample_rate_hz=24_000,
                        unit_end_ms=media_ms,
                    )
                    await asyncio.sleep(0.1)

        try:
            if script.refuse == "at_accept":
                await refuse()
                return
            async for raw in ws:
                frame = json.loads(raw)
                kind = frame.get("type", "")
                conn.note("in", kind)
                if kind == "session.update":
                    if script.refuse == "after_update":
                        await refuse()
                        return
                    if not script.answer_update:
                        continue
                    await send(
                        "session.created", session={"id": f"sess_{number}", "capabilities": CAPABILITIES}
                    )
                elif kind == "input_audio_buffer.append":
                    record = {
                        "duration_ms": frame.get("duration_ms"),
                        "audio_end_ms": frame.get("audio_end_ms"),
                        "silent": not any(base64.b64decode(frame["audio"])),
                    }
                    media_ms = float(frame.get("audio_end_ms") or media_ms)
                    if conn.committed:
                        conn.padding.append(record)
                        if script.reply_on_first_padding and len(conn.padding) == 1:
                            await reply()
                        if script.listen_each_padding:
                            await send("response.listen", response=PADDING_LISTEN, unit_end_ms=media_ms)
                        continue
                    conn.clip.append(record)
                    if len(conn.clip) == script.reply_after_append:
                        await reply()
                    if len(conn.clip) == script.drop_after_append:
                        ws.transport.abort()
                        return
                    if len(conn.clip) == script.stop_reading_after_append:
                        await self._stop.wait()
                        ws.transport.abort()  # unread data pending: no closing handshake to wait for
                        return
                elif kind == "input_audio_buffer.commit":
                    conn.committed = True
                    if script.ack_commit:
                        await send("input_audio_buffer.committed", item_id=f"item_in_{number}")
                    for action in script.on_commit:
                        if action == "reply":
                            await reply()
                        elif action == "model_listen":
                            await send("response.listen", response=MODEL_LISTEN, unit_end_ms=media_ms)
                        elif action == "error":
                            error = {"type": "server_error", "code": script.error_code, "message": "boom"}
                            await send("error", error=error)
                        elif action == "busy":
                            busy = asyncio.create_task(keep_busy())
                elif kind == "playback.ack" and script.ack_too_late:
                    error = {
                        "type": "invalid_request_error",
                        "code": "playback_ack_too_late",
                        "message": "late",
                    }
                    await send("error", error=error)
                elif kind == "session.close" and script.answer_close:
                    await asyncio.sleep(script.closed_after_s)
                    await send("session.closed", session_id=f"sess_{number}", reason="client_close")
                    time.sleep(script.block_loop_after_closed_s)  # noqa: ASYNC251 (blocks the fake's own loop)
                    return
        except ConnectionClosed:
            pass
        finally:
            if busy is not None:
                busy.cancel()


def tone_pcm16_24k(seconds: float) -> bytes:
    t = np.arange(round(seconds * 24_000)) / 24_000
    return (0.2 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2").tobytes()


# --- the client's side of the wire ----------------------------------------------------------------


@dataclass
class Wire:
    """How the client's socket behaves: a small send buffer and write limit (a narrow link, so a server that
    stops reading stalls the client after kilobytes, not megabytes), and a commit write that stalls."""

    sndbuf: int | None = None
    write_limit: int | None = None
    stall_commit_s: float = 0.0
    """The first connection's commit frame takes this long to reach the socket."""
    stall_first_ack_s: float = 0.0
    """The first connection's first `playback.ack` frame takes this long to reach the socket."""
    opened: int = 0


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    settings = Wire()
    real_connect = client_module.connect

    async def open_connection(uri: str, kwargs: dict[str, Any]) -> Any:
        index = settings.opened
        settings.opened += 1
        extra: dict[str, Any] = {}
        if settings.sndbuf is not None:
            parts = urllib.parse.urlsplit(uri)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, settings.sndbuf)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
            extra["sock"] = sock
        if settings.write_limit is not None:
            extra["write_limit"] = settings.write_limit
        ws = await real_connect(uri, **kwargs, **extra)
        if index == 0 and (settings.stall_commit_s > 0 or settings.stall_first_ack_s > 0):
            real_send = ws.send
            acks = 0

            async def send(message: Any, *args: Any, **kw: Any) -> None:
                nonlocal acks
                small = isinstance(message, str) and len(message) < 400
                kind = json.loads(message).get("type") if small else None
                if kind == "input_audio_buffer.commit":
                    await asyncio.sleep(settings.stall_commit_s)
                elif kind == "playback.ack":
                    acks += 1
                    if acks == 1:
                        await asyncio.sleep(settings.stall_first_ack_s)
                await real_send(message, *args, **kw)

            ws.send = send
        return ws

    monkeypatch.setattr(client_module, "connect", lambda uri, **kwargs: open_connection(uri, kwargs))
    return settings


@pytest.fixture
def narrow_link(wire: Wire, monkeypatch: pytest.MonkeyPatch) -> Wire:
    """A 4 KiB send buffer and 1 KiB write limit; the socket's closing handshake waits 0.2 s, not 1 s."""
    wire.sndbuf, wire.write_limit = 4096, 1024
    monkeypatch.setattr(client_module, "SOCKET_CLOSE_GRACE_S", 0.2)
    return wire


STALLING = {"rcvbuf": 4096, "max_queue": 1}
"""Options for a fake whose socket holds little unread data (4 KiB receive buffer, one queued frame)."""


# --- running samples ------------------------------------------------------------------------------


def fast_config(url: str, **overrides: Any) -> RunConfig:
    """As fast as possible, with small bounds: timing is not the point unless a test says so."""
    settings: dict[str, Any] = {
        "url": url,
        "pace": "as-fast-as-possible",
        "chunk_ms": CHUNK_MS,
        "concurrency": 1,
        "capacity_wait_max_s": 5.0,
        "keep_audio": False,
    }
    bounds: dict[str, Any] = {
        "configure_timeout_s": 2.0,
        "input_slack_s": 0.2,
        "commit_timeout_s": 0.2,
        "settle_s": 0.3,
        "drain_timeout_s": 0.6,
        "close_timeout_s": 0.3,
        "close_grace_s": 0.3,
    }
    bound_names = {f.name for f in dataclasses.fields(SessionBounds)}
    for key, value in overrides.items():
        (bounds if key in bound_names else settings)[key] = value
    return RunConfig(bounds=SessionBounds(**bounds), **settings)


@dataclass
class Ran:
    result: SampleResult
    meta: dict[str, Any]
    run_dir: RunDir
    sample: Sample

    @property
    def published(self) -> bool:
        return self.run_dir.is_published(self.sample.split, self.sample.id)

    def sentences(self) -> list[dict[str, Any]]:
        path = self.run_dir.sentences_path(self.sample.split, self.sample.id)
        loaded: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
        return loaded


async def run_sample(
    config: RunConfig, tmp_path: Path, *, sample: Sample | None = None, rng: random.Random | None = None
) -> Ran:
    sample = sample or clip_sample("clip", CLIP_S)
    run_dir = RunDir(tmp_path / "run")
    runner = BenchmarkRunner(config, run_dir, rng=rng or random.Random(0))
    [result] = await runner.run([sample])
    meta = json.loads(run_dir.meta_path(sample.split, sample.id).read_text(encoding="utf-8"))
    return Ran(result, meta, run_dir, sample)


def sentence_texts(sentences: list[dict[str, Any]]) -> list[str]:
    return [s["sentence"] for s in sentences]


@contextlib.asynccontextmanager
async def serving(*scripts: Script, threaded: bool = False, **options: Any) -> AsyncIterator[FakeServer]:
    if threaded:
        with FakeServer(*scripts, **options) as server:
            yield server
    else:
        async with FakeServer(*scripts, **options) as server:
            yield server


# --- a clean sample -------------------------------------------------------------------------------


async def test_a_clean_sample_is_published_once_with_its_metadata(tmp_path: Path) -> None:
    async with serving(Script()) as fake:
        ran = await run_sample(fast_config(fake.url, pace="realtime", keep_audio=True), tmp_path)

    assert ran.result.status == "published" and not ran.result.retried
    assert ran.published
    meta = ran.meta
    assert meta["status"] == "published" and meta["error"] is None
    assert (meta["split"], meta["id"], meta["family"], meta["task"]) == (
        "RTD_counting",
        "clip",
        "rtd",
        "RTD_counting",
    )
    assert meta["clock"] == "media" and meta["pace"] == "realtime"
    assert (meta["fps"], meta["chunk_ms"], meta["unit_ms"]) == (1.0, CHUNK_MS, 1000)
    assert meta["input_committed"] is True and meta["response_done"] is True
    assert meta["timeouts"] == dict.fromkeys(
        (
            "configure_timeout",
            "input_timeout",
            "commit_timeout",
            "drain_timeout",
            "ack_timeout",
            "close_timeout",
        ),
        None,
    )
    assert meta["bounds"]["input_timeout"] == pytest.approx(CLIP_S + 0.2)
    assert meta["retry_count"] == 0 and meta["capacity_wait_s"] == 0.0
    assert meta["server_errors"] == [] and len(meta["attempts"]) == 1
    assert meta["drain"]["outcome"] == "settled" and meta["close"]["clean"] is True
    assert meta["stream"]["completed"] and meta["stream"]["appends_written"] == CLIP_APPENDS
    # The reply came right after the commit: its sentences sit at the clip's end on the media clock.
    sentences = ran.sentences()
    assert sentence_texts(sentences) == REPLY_SENTENCES
    assert all(s["start"] == pytest.approx(CLIP_S, abs=0.21) for s in sentences)
    folder = ran.run_dir.sample_dir("RTD_counting", "clip")
    assert (folder / "output.wav").is_file() and (folder / "events.json").is_file()
    assert len(fake.connections) == 1


async def test_as_fast_as_possible_marks_the_clock_invalid(tmp_path: Path) -> None:
    async with serving(Script()) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert ran.meta["status"] == "published"
    assert ran.meta["clock"] == "invalid" and ran.meta["pace"] == "as-fast-as-possible"
    assert ran.meta["stream"]["clock"] == "invalid"


# --- input stalls ---------------------------------------------------------------------------------


async def test_a_stalled_input_is_bounded_and_the_attempt_still_lands_its_transcript(
    narrow_link: Wire,
) -> None:
    """The server answers the first append with a complete reply, then stops reading the socket: the stream
    gives up at clip + slack, the commit queued behind it cannot land, and the attempt still returns the
    transcript it received, with `input_committed` false."""
    sample = clip_sample("clip", CLIP_S)
    media = prepare_media(sample)
    async with serving(Script(reply_after_append=1, stop_reading_after_append=1), **STALLING) as fake:
        config = fast_config(fake.url)
        started = time.monotonic()
        attempt = await run_attempt(sample, media, config)
        elapsed = time.monotonic() - started

    bound = CLIP_S + config.bounds.input_slack_s
    outcome = attempt.outcome
    assert outcome.input_timeout == pytest.approx(bound)
    assert outcome.stall == "input_timeout"
    assert (
        outcome.commit_timeout == config.bounds.commit_timeout_s
    )  # the commit is queued behind the stalled append
    assert outcome.response_done is True and outcome.server_errors == []
    assert attempt.meta["input_committed"] is False
    assert attempt.meta["stream"]["input_timeout"] is True
    assert attempt.meta["stream"]["appends_written"] < CLIP_APPENDS
    assert sentence_texts(attempt.sentences) == REPLY_SENTENCES
    every_bound = (
        bound
        + config.bounds.commit_timeout_s
        + config.bounds.drain_timeout_s
        + config.bounds.close_timeout_s
        + config.bounds.close_grace_s
    )
    assert bound <= elapsed < every_bound + 1.0
    assert len(fake.connections[0].clip) < CLIP_APPENDS


async def test_a_stalled_input_under_a_completed_reply_is_retried_once(
    narrow_link: Wire, tmp_path: Path
) -> None:
    """A completed reply does not prove the whole input arrived: the stall is retried; the retry publishes."""
    stall = Script(reply_after_append=1, stop_reading_after_append=1)
    async with serving(stall, Script(), **STALLING) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert ran.result.status == "published" and ran.result.retried
    assert ran.published and sentence_texts(ran.sentences()) == REPLY_SENTENCES
    meta = ran.meta
    assert meta["status"] == "published" and meta["error"] is None and meta["retry_count"] == 1
    assert meta["input_committed"] is True  # the final attempt's
    first, second = meta["attempts"]
    assert first["error"] == "input_timeout" and first["response_done"] is True
    assert first["timeouts"]["input_timeout"] == pytest.approx(CLIP_S + 0.2)
    assert sentence_texts(first["sentences"]) == REPLY_SENTENCES  # the superseded attempt's transcript
    assert second["error"] is None and "sentences" not in second
    assert len(fake.connections) == 2


# --- commit stalls --------------------------------------------------------------------------------


async def test_a_stalled_commit_write_is_bounded_and_padding_still_starts_behind_it(wire: Wire) -> None:
    """The commit frame takes 0.8 s to reach the socket (bound 0.2 s): `commit_timeout` is recorded and the
    padding starts anyway; its appends queue behind the commit (FIFO), so the server reads the commit right
    after the last clip append and the first padded append right after the commit."""
    wire.stall_commit_s = 0.8
    sample = clip_sample("clip", CLIP_S)
    async with serving(Script()) as fake:
        attempt = await run_attempt(sample, prepare_media(sample), fast_config(fake.url, drain_timeout_s=2.0))

    assert attempt.outcome.commit_timeout == 0.2 and attempt.outcome.stall == "commit_timeout"
    assert attempt.outcome.input_timeout is None
    assert attempt.meta["input_committed"] is False  # conservative: the commit landed after its bound
    [conn] = fake.connections
    [commit_at] = conn.positions("in", "input_audio_buffer.commit")
    appends = conn.positions("in", "input_audio_buffer.append")
    assert sum(i < commit_at for i in appends) == CLIP_APPENDS  # nothing overtook the commit
    assert conn.padding and all(p["silent"] for p in conn.padding)  # the padding arrived, after it
    # The first padded append was queued during the stall: it reaches the server right behind the commit,
    # not one append period (200 ms) later as it would after a prompt commit.
    [commit_time] = conn.times("in", "input_audio_buffer.commit")
    first_padding_time = conn.log[min(i for i in appends if i > commit_at)][0]
    assert first_padding_time - commit_time < 0.1
    # Once the commit landed, the reply came and the drain settled.
    assert attempt.meta["drain"]["outcome"] == "settled"
    assert sentence_texts(attempt.sentences) == REPLY_SENTENCES


async def test_a_stalled_commit_is_retried_once_and_the_retry_is_published(
    wire: Wire, tmp_path: Path
) -> None:
    wire.stall_commit_s = 0.5
    async with serving(Script()) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert ran.published and ran.meta["status"] == "published"
    assert ran.meta["retry_count"] == 1 and ran.result.retried
    first, second = ran.meta["attempts"]
    assert first["error"] == "commit_timeout" and first["timeouts"]["commit_timeout"] == 0.2
    assert first["response_done"] is True and sentence_texts(first["sentences"]) == REPLY_SENTENCES
    assert second["error"] is None
    assert ran.meta["timeouts"]["commit_timeout"] is None and ran.meta["input_committed"] is True
    assert len(fake.connections) == 2


async def test_a_commit_the_server_never_acknowledges_ends_in_drain_timeout_and_is_retried_once(
    tmp_path: Path,
) -> None:
    """`commit_timeout` bounds the commit's write, which lands here; what the missing acknowledgement
    stalls is the drain (it waits for `input_audio_buffer.committed`), so the attempt ends in
    `drain_timeout` and the sample is retried once, then fails."""
    async with serving(Script(ack_commit=False)) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert not ran.published and ran.result.status == "failed"
    assert ran.meta["status"] == "failed" and ran.meta["error"] == "drain_timeout"
    assert ran.meta["retry_count"] == 1
    assert [a["error"] for a in ran.meta["attempts"]] == ["drain_timeout", "drain_timeout"]
    assert all(a["timeouts"]["commit_timeout"] is None for a in ran.meta["attempts"])
    assert ran.meta["timeouts"]["drain_timeout"] == 0.6
    assert all(c.positions("in", "input_audio_buffer.commit") for c in fake.connections)
    assert len(fake.connections) == 2


async def test_a_commit_the_server_never_acknowledges_is_not_recorded_as_committed() -> None:
    sample = clip_sample("clip", CLIP_S)
    async with serving(Script(ack_commit=False)) as fake:
        attempt = await run_attempt(sample, prepare_media(sample), fast_config(fake.url))

    assert attempt.outcome.drain_timeout == 0.6
    assert attempt.meta["input_committed"] is False


# --- drain ----------------------------------------------------------------------------------------


async def test_a_drain_that_never_settles_is_bounded_and_retried_once(tmp_path: Path) -> None:
    """After a complete reply the server opens another that never ends: the quiet window never comes, the
    drain stops at its bound (a recorded `drain_timeout`, not silence), and the retry (a well-behaved
    session) publishes."""
    async with serving(Script(on_commit=("reply", "busy")), Script()) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert ran.published and ran.meta["status"] == "published" and ran.meta["retry_count"] == 1
    first, second = ran.meta["attempts"]
    assert first["error"] == "drain_timeout" and first["timeouts"]["drain_timeout"] == 0.6
    assert first["response_done"] is False
    assert second["error"] is None and ran.meta["drain"]["outcome"] == "settled"
    assert len(fake.connections[0].positions("out", "response.output_audio.delta")) >= 3


async def test_padding_listens_complete_the_quiet_window_rather_than_restart_it(tmp_path: Path) -> None:
    """The server answers every padded append with a `response.listen`, closer together than the settle
    window, so it is never silent for a window: the drain settles because those listens decide the
    window's two units quiet (were they activity that restarts it, the drain would run to its bound)."""
    settle_s = 1.5
    async with serving(Script(listen_each_padding=True)) as fake:
        ran = await run_sample(fast_config(fake.url, settle_s=settle_s, drain_timeout_s=3.0), tmp_path)

    assert ran.published and ran.meta["retry_count"] == 0
    assert ran.meta["timeouts"]["drain_timeout"] is None
    assert ran.meta["drain"]["outcome"] == "settled" and ran.meta["drain"]["quiet_rule"] == "units"
    [conn] = fake.connections
    [commit_at] = conn.positions("in", "input_audio_buffer.commit")
    listens_after_commit = [i for i in conn.positions("out", "response.listen") if i > commit_at]
    assert len(listens_after_commit) >= 2
    listen_times = conn.times("out", "response.listen")
    assert max(b - a for a, b in itertools.pairwise(listen_times)) < settle_s
    assert ran.meta["drain"]["listens"] >= 2


async def test_a_committed_clip_answered_only_by_a_model_listen_settles(tmp_path: Path) -> None:
    """No response at all, one model listen after the commit (and no padding listens): the listen is the
    decision, and a server that then answers no more units settles one window of silence later instead of
    waiting for its bound. The sample is published with no sentences and `response_done` false (no
    response was created)."""
    script = Script(on_commit=("model_listen",), listen_each_padding=False)
    async with serving(script) as fake:
        ran = await run_sample(fast_config(fake.url, drain_timeout_s=3.0), tmp_path)

    assert ran.published and ran.sentences() == []
    meta = ran.meta
    assert meta["status"] == "published" and meta["retry_count"] == 0
    assert meta["timeouts"]["drain_timeout"] is None
    assert meta["drain"] == {
        "outcome": "settled",
        "waited_s": meta["drain"]["waited_s"],
        "listens": 1,
        "decision_rule": "server_unit_end",
        "quiet_rule": "wall_clock",
    }
    assert meta["drain"]["waited_s"] < 1.0
    assert meta["response_done"] is False and meta["responses"] == []
    assert len(fake.connections[0].positions("out", "response.listen")) == 1


async def test_a_committed_clip_answered_by_nothing_is_not_a_decision_and_ends_in_drain_timeout(
    tmp_path: Path,
) -> None:
    """The same session without the listen: the commit is acknowledged but the model never decides, so the
    drain cannot settle on an empty window; it runs to its bound, the sample is retried once, then fails.
    (This pins that the listen, not the quiet, is what settles the listen-only drain above.)"""
    script = Script(on_commit=(), listen_each_padding=False)
    async with serving(script) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert not ran.published
    assert ran.meta["status"] == "failed" and ran.meta["error"] == "drain_timeout"
    assert ran.meta["retry_count"] == 1 and ran.meta["drain"]["listens"] == 0
    assert len(fake.connections) == 2


# --- padding --------------------------------------------------------------------------------------


async def test_padding_sends_real_appends_that_advance_the_media_clock(tmp_path: Path) -> None:
    """A server that steps only on input answers the commit on the first padded unit: the padding sends
    silence in the stream's append shape, continuing the media clock, and the reply lands after it."""
    script = Script(on_commit=(), reply_on_first_padding=True)
    async with serving(script) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert ran.published and ran.meta["retry_count"] == 0
    assert ran.meta["timeouts"]["drain_timeout"] is None
    [conn] = fake.connections
    assert conn.padding and all(p["silent"] and p["duration_ms"] == CHUNK_MS for p in conn.padding)
    ends = [p["audio_end_ms"] for p in conn.padding]
    assert ends == [CLIP_S * 1000 + CHUNK_MS * (k + 1) for k in range(len(ends))]
    sentences = ran.sentences()
    assert sentence_texts(sentences) == REPLY_SENTENCES
    assert sentences[0]["start"] >= (CLIP_S * 1000 + CHUNK_MS) / 1000


async def test_a_padding_coding_error_fails_the_sample_as_a_runner_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """If padding broke with a programming error and that were swallowed, this server (which answers only
    once padding arrives) would look like a drain timeout; instead the sample fails visibly, once."""

    async def broken_padding(self: DuplexClient, append_ms: int | None = None) -> None:
        raise AttributeError("'DuplexClient' object has no attribute 'append_silence_v0'")

    monkeypatch.setattr(DuplexClient, "pad_silence", broken_padding)
    script = Script(on_commit=(), reply_on_first_padding=True)
    async with serving(script) as fake:
        ran = await run_sample(fast_config(fake.url, drain_timeout_s=3.0), tmp_path)

    assert not ran.published and ran.result.status == "failed"
    assert ran.meta["error"].startswith("runner_error: AttributeError")
    assert ran.meta["timeouts"]["drain_timeout"] is None
    assert ran.meta["retry_count"] == 0 and len(ran.meta["attempts"]) == 1
    assert len(fake.connections) == 1


# --- close ----------------------------------------------------------------------------------------


async def test_a_completed_sample_whose_close_is_never_answered_is_published_and_not_retried(
    tmp_path: Path,
) -> None:
    async with serving(Script(answer_close=False)) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert ran.published and not ran.result.retried
    meta = ran.meta
    assert meta["status"] == "published" and meta["error"] is None and meta["retry_count"] == 0
    assert meta["response_done"] is True
    assert meta["timeouts"]["close_timeout"] == 0.3  # advisory, kept in the metadata
    assert meta["close"]["clean"] is False and meta["close"]["outcome"] == "timeout"
    assert meta["attempts"][0]["timeouts"]["close_timeout"] == 0.3
    assert sentence_texts(ran.sentences()) == REPLY_SENTENCES
    assert len(fake.connections) == 1


async def test_a_silent_sample_whose_close_is_never_answered_is_published_and_not_retried(
    tmp_path: Path,
) -> None:
    """The model chose silence (a listen on the committed unit, no response) and the close stalled: the
    drain settled with nothing open, so the stall is advisory, as under a reply."""
    script = Script(on_commit=("model_listen",), listen_each_padding=False, answer_close=False)
    async with serving(script) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert ran.published and not ran.result.retried and len(fake.connections) == 1
    meta = ran.meta
    assert meta["status"] == "published" and meta["error"] is None and meta["retry_count"] == 0
    assert meta["response_done"] is False and meta["responses"] == []
    assert meta["drain"]["outcome"] == "settled"
    assert meta["timeouts"]["close_timeout"] == 0.3  # recorded
    assert ran.sentences() == []


async def test_a_final_playback_ack_that_stalls_is_recorded_not_swallowed(tmp_path: Path, wire: Wire) -> None:
    wire.stall_first_ack_s = 1.0
    async with serving(Script()) as fake:
        ran = await run_sample(fast_config(fake.url, ack_timeout_s=0.2, close_timeout_s=2.0), tmp_path)

    assert ran.published and ran.meta["retry_count"] == 0  # the reply was received in full
    assert ran.meta["timeouts"]["ack_timeout"] == 0.2
    assert ran.meta["attempts"][0]["timeouts"]["ack_timeout"] == 0.2
    assert sentence_texts(ran.sentences()) == REPLY_SENTENCES


async def test_the_attempt_deadline_names_the_stage_it_cut_and_keeps_the_sentences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply mid-clip, then no decision on the commit: the drain would wait 30 s, the outer deadline
    (forced to 2 s here) cuts it. The record says the drain was running and keeps what was said."""
    monkeypatch.setattr(RunConfig, "attempt_deadline_s", lambda self, clip_s: 2.0)
    script = Script(reply_after_append=1, on_commit=(), listen_each_padding=False)
    async with serving(script) as fake:
        ran = await run_sample(fast_config(fake.url, drain_timeout_s=30.0), tmp_path)

    assert not ran.published and ran.meta["retry_count"] == 1
    assert ran.meta["deadline"] == {"deadline_s": 2.0, "stage": "drain"}
    for attempt in ran.meta["attempts"]:
        assert attempt["transport_error"] == "request_deadline"
        assert sentence_texts(attempt["sentences"]) == REPLY_SENTENCES


def test_the_attempt_deadline_covers_every_inner_bound() -> None:
    bounds = SessionBounds(
        open_timeout_s=1.0,
        configure_timeout_s=2.0,
        input_slack_s=3.0,
        commit_timeout_s=4.0,
        settle_s=50.0,  # inside the drain's bound, not added
        drain_timeout_s=5.0,
        ack_timeout_s=6.0,
        close_timeout_s=7.0,
        close_grace_s=8.0,
    )
    clip_s = 10.0
    by_hand = 1.0 + 2.0 + (10.0 + 3.0) + 4.0 + 5.0 + 6.0 + 7.0 + 8.0
    assert bounds.total_s(clip_s) == by_hand
    assert RunConfig(url="ws://x", bounds=bounds).attempt_deadline_s(clip_s) > by_hand


@pytest.mark.parametrize(("close_grace_s", "clean"), [(0.6, True), (0.0, False)])
async def test_the_outer_close_wait_gives_the_inner_one_a_grace_period(
    tmp_path: Path, close_grace_s: float, clean: bool
) -> None:
    """`session.closed` comes at 0.25 s (bound 0.5 s), then the server's socket handshake takes another
    0.45 s: the inner close succeeds at ~0.7 s. With the grace the outer wait lets it; with none, the outer
    timer fires first and aborts a close that was about to succeed."""
    script = Script(closed_after_s=0.25, block_loop_after_closed_s=0.45)
    async with serving(script, threaded=True) as fake:
        ran = await run_sample(
            fast_config(fake.url, close_timeout_s=0.5, close_grace_s=close_grace_s), tmp_path
        )

    assert ran.published and ran.meta["retry_count"] == 0
    assert ran.meta["close"]["clean"] is clean
    if clean:
        assert ran.meta["close"]["outcome"] == "closed" and ran.meta["timeouts"]["close_timeout"] is None
        assert ran.meta["close"]["elapsed_s"] > 0.5  # beyond close_timeout_s, inside the grace
    else:
        assert ran.meta["timeouts"]["close_timeout"] == 0.5


# --- server errors --------------------------------------------------------------------------------


async def test_a_server_error_fails_the_sample_after_one_attempt(tmp_path: Path) -> None:
    async with serving(Script(on_commit=("error",))) as fake:
        ran = await run_sample(fast_config(fake.url, drain_timeout_s=3.0), tmp_path)

    assert not ran.published and ran.result.status == "failed" and not ran.result.retried
    meta = ran.meta
    assert meta["status"] == "failed" and meta["error"] == "server_error: model_step_failed"
    assert meta["server_errors"] == ["model_step_failed"]
    assert meta["retry_count"] == 0 and len(meta["attempts"]) == 1
    assert meta["drain"]["outcome"] == "error"  # the drain stopped on the error, not on its bound
    assert meta["timeouts"]["drain_timeout"] is None
    assert len(fake.connections) == 1


async def test_a_benign_playback_ack_too_late_does_not_fail_the_sample(tmp_path: Path) -> None:
    async with serving(Script(ack_too_late=True)) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert fake.connections[0].positions("out", "error"), "the fake never sent the benign error"
    assert ran.published and ran.meta["status"] == "published" and ran.meta["error"] is None
    assert ran.meta["server_errors"] == [] and ran.meta["retry_count"] == 0
    assert sentence_texts(ran.sentences()) == REPLY_SENTENCES


# --- transport ------------------------------------------------------------------------------------


async def test_a_dropped_connection_is_retried_once(tmp_path: Path) -> None:
    async with serving(Script(drop_after_append=2), Script()) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert ran.published and ran.meta["status"] == "published" and ran.meta["retry_count"] == 1
    first, second = ran.meta["attempts"]
    assert first["transport_error"] and first["error"].startswith("transport_error: ")
    assert second["error"] is None and second["transport_error"] is None
    assert len(fake.connections) == 2


async def test_a_connection_dropped_twice_fails_the_sample(tmp_path: Path) -> None:
    async with serving(Script(drop_after_append=2)) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert not ran.published
    assert ran.meta["status"] == "failed" and ran.meta["error"].startswith("transport_error: ")
    assert ran.meta["retry_count"] == 1 and len(fake.connections) == 2


# --- timeouts that escape an attempt -------------------------------------------------------------


async def test_a_configure_timeout_is_recorded_as_such_and_retried_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server never answers `session.update`: the configure wait (0.3 s) runs out long before the
    attempt's deadline; it is the attempt's `configure_timeout`, not an inner wait leaking."""
    with caplog.at_level(logging.WARNING, logger="duplexkit.bench"):
        async with serving(Script(answer_update=False), Script()) as fake:
            ran = await run_sample(fast_config(fake.url, configure_timeout_s=0.3), tmp_path)

    assert ran.published and ran.meta["retry_count"] == 1
    first = ran.meta["attempts"][0]
    assert first["transport_error"] is None and first["timeouts"]["configure_timeout"] == 0.3
    assert first["error"] == "configure_timeout"
    assert "leaked" not in caplog.text and "hit its deadline" not in caplog.text
    assert len(fake.connections) == 2


async def test_an_attempt_that_hits_its_deadline_is_logged_as_the_deadline_and_retried_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outer per-attempt deadline (shortened here to 1.2 s) fires while the drain (bound 5 s) waits
    on a server that never settles: that timeout is the deadline's own, with its own message."""
    monkeypatch.setattr(RunConfig, "attempt_deadline_s", lambda self, clip_s: 1.2)
    with caplog.at_level(logging.WARNING, logger="duplexkit.bench"):
        async with serving(Script(on_commit=("reply", "busy")), Script()) as fake:
            ran = await run_sample(fast_config(fake.url, drain_timeout_s=5.0), tmp_path)

    assert ran.published and ran.meta["retry_count"] == 1
    first = ran.meta["attempts"][0]
    assert first["transport_error"] == "request_deadline"
    assert first["timeouts"]["drain_timeout"] is None  # the drain's own bound never expired
    assert "hit its deadline of 1.2 s" in caplog.text and "leaked" not in caplog.text
    assert len(fake.connections) == 2


# --- capacity -------------------------------------------------------------------------------------


def expected_backoff(seed: int, refusals: int) -> float:
    rng = random.Random(seed)
    return sum(capacity_backoff_s(n, rng=rng) for n in range(1, refusals + 1))


async def test_capacity_refusals_after_the_update_are_waited_out_and_are_not_attempts(tmp_path: Path) -> None:
    refused = Script(refuse="after_update")
    async with serving(refused, refused, Script()) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path, rng=random.Random(11))

    assert ran.published and ran.meta["status"] == "published"
    assert ran.meta["retry_count"] == 0 and len(ran.meta["attempts"]) == 1
    assert ran.meta["capacity_wait_s"] > 0
    # The jittered pauses, plus the real time each lease of a server took (milliseconds).
    assert expected_backoff(11, 2) <= ran.meta["capacity_wait_s"] <= expected_backoff(11, 2) + 0.05
    assert len(fake.connections) == 3


async def test_capacity_refusals_at_accept_are_waited_out_and_are_not_attempts(tmp_path: Path) -> None:
    """The refusal duplexkit's own server sends: right after the accept, then close 1013. In the same event
    loop the close reaches the client before its `session.update` write, which then fails; the refusal
    must still be read from the error event that came first, not taken for a lost connection."""
    refused = Script(refuse="at_accept")
    async with serving(refused, refused, Script()) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path, rng=random.Random(11))

    assert len(fake.connections) == 3
    assert ran.published and ran.meta["retry_count"] == 0
    # The jittered pauses, plus the real time each lease of a server took (milliseconds).
    assert expected_backoff(11, 2) <= ran.meta["capacity_wait_s"] <= expected_backoff(11, 2) + 0.05


# --- a failed retry -------------------------------------------------------------------------------


async def test_a_failed_retry_publishes_nothing_and_keeps_the_first_attempts_sentences_in_meta(
    tmp_path: Path,
) -> None:
    """Attempt 1 stalls (drain) after a complete reply; attempt 2 gets a server error. Nothing is published
    until the final outcome is known, so the sample is failed, and the first attempt's timed sentences stay
    only in the metadata for diagnosis."""
    async with serving(Script(on_commit=("reply", "busy")), Script(on_commit=("error",))) as fake:
        ran = await run_sample(fast_config(fake.url), tmp_path)

    assert not ran.published and ran.result.status == "failed" and ran.result.retried
    assert not ran.run_dir.sample_dir(ran.sample.split, ran.sample.id).exists()
    meta = ran.meta
    assert meta["status"] == "failed" and meta["error"] == "server_error: model_step_failed"
    assert meta["retry_count"] == 1
    first, second = meta["attempts"]
    assert first["error"] == "drain_timeout" and first["response_done"] is False
    assert sentence_texts(first["sentences"]) == REPLY_SENTENCES
    assert all(isinstance(s["start"], float) for s in first["sentences"])
    assert second["error"] == "server_error: model_step_failed" and second["sentences"] == []
    assert len(fake.connections) == 2


# --- media preparation ------------------------------------------------------------------------------


class _SlowMedia:
    """Omni-DuplexEval's hooks, with one sample whose media takes `seconds` of blocking work to prepare
    (as a long video's decode does)."""

    def __init__(self, slow_id: str, seconds: float) -> None:
        self._hooks = get_benchmark(DEFAULT_BENCHMARK)
        self._slow_id, self._seconds = slow_id, seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self._hooks, name)

    def prepare_media(self, sample: Sample, config: RunConfig) -> Any:
        if sample.id == self._slow_id:
            time.sleep(self._seconds)  # blocking, like a decoder: must not run on the event loop
        return self._hooks.prepare_media(sample, config)


async def test_preparing_one_samples_media_does_not_stall_another_sessions_pace(tmp_path: Path) -> None:
    """Sample `a` streams 4 s in real time; `c` is short, and when it ends `b` takes its slot and its
    media takes 1 s of blocking work while `a` is mid-stream. `a` keeps its schedule (no append later
    than a small fraction of that second), because preparation runs off the event loop."""
    samples = [clip_sample("a", 4.0), clip_sample("c", 0.3), clip_sample("b", 0.3)]
    async with serving(Script()) as fake:
        config = fast_config(fake.url, pace="realtime", concurrency=2, drain_timeout_s=3.0)
        runner = BenchmarkRunner(config, RunDir(tmp_path / "run"), benchmark=_SlowMedia("b", 1.0))
        results = await runner.run(samples)
    assert [r.status for r in results] == ["published"] * 3
    meta = json.loads(RunDir(tmp_path / "run").meta_path("RTD_counting", "a").read_text(encoding="utf-8"))
    pacing = meta["stream"]["pacing"]
    assert meta["retry_count"] == 0  # on the loop, the block stalls `a` past its input bound: a retry
    assert pacing["stalls"] == [] and pacing["lag_ms"] == 0.0
    assert pacing["schedule_error_ms"]["max"] < 250.0  # a loop blocked for 1 s would show ~1000 ms
