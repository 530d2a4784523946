"""`bench` against a server that serves one session at a time, written from Kyutai's `moshi.server` as
`shared/reference/models.md` and `protocol.md` document it (not from our server): one `asyncio.Lock`;
every other socket is accepted and stays silent until the lock frees; the handshake (kind 0) is sent once
the lock is held; no `/healthz`. A socket that is open without a handshake is waiting for capacity."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.runner import BenchmarkRunner, RunConfig
from duplexkit.client import SessionBounds
from duplexkit.client.client import SOCKET_CLOSE_GRACE_S
from tests.bench.conftest import clip_sample
from tests.client.fakes import FakeServer, FakeSession
from tests.client.protocol_peers import MoshiPeer

CLIP_S = 2.0


class OneLockMoshiServer:
    """`moshi.server`'s admission: one lock around the whole session; the session itself is `MoshiPeer`
    (handshake, then one 80 ms output frame per input frame)."""

    def __init__(self) -> None:
        self.peer = MoshiPeer()
        self.sessions = 0
        self._lock: asyncio.Lock | None = None

    async def __call__(self, ws: ServerConnection) -> None:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:  # silent until then: no handshake, nothing read
            self.sessions += 1
            await self.peer(ws)


def read_meta(run_dir: RunDir, sample_id: str) -> dict[str, Any]:
    return json.loads(run_dir.meta_path("RTD_counting", sample_id).read_text(encoding="utf-8"))


async def test_a_one_session_moshi_server_gets_every_sample_published_and_the_wait_is_capacity(
    tmp_path: Path,
) -> None:
    server_impl = OneLockMoshiServer()
    bounds = SessionBounds(configure_timeout_s=0.5, settle_s=0.3, drain_timeout_s=15.0, close_timeout_s=1.0)
    async with serve(server_impl, "127.0.0.1", 0, max_size=None, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        config = RunConfig(
            url=f"ws://127.0.0.1:{port}/api/chat",
            chunk_ms=80,
            concurrency=2,
            bounds=bounds,
            capacity_wait_max_s=60.0,
        )
        run_dir = RunDir(tmp_path / "run")
        results = await BenchmarkRunner(config, run_dir).run(
            [clip_sample("a", CLIP_S), clip_sample("b", CLIP_S)]
        )
    assert [r.status for r in results] == ["published", "published"]
    assert server_impl.sessions == 2
    metas = [read_meta(run_dir, "a"), read_meta(run_dir, "b")]
    # One sample's socket stayed open, silent, while the other streamed its whole clip: capacity wait,
    # not a configure timeout (its 0.5 s bound would have run out long before).
    assert max(m["capacity_wait_s"] for m in metas) >= CLIP_S
    for meta in metas:
        assert meta["retry_count"] == 0 and meta["timeouts"]["configure_timeout"] is None
        assert meta["audio_placement"] == "concatenated"  # Full-Duplex-Bench's Moshi client rule
        wire = meta["wire"]
        assert wire["protocol"] == "moshi" and wire["input_frames"] > CLIP_S / 0.08
        assert wire["output_frames_missed"] == max(0, wire["input_frames"] - wire["output_frames"])
        assert meta["close"]["bound_s"] == SOCKET_CLOSE_GRACE_S  # the socket's handshake is the close


async def test_a_configure_timeout_is_recorded_as_such(tmp_path: Path) -> None:
    async def never_configures(s: FakeSession) -> None:
        while True:
            await s.recv()

    bounds = SessionBounds(configure_timeout_s=0.3)
    async with FakeServer(never_configures) as fake:
        config = RunConfig(url=fake.url, bounds=bounds, capacity_wait_max_s=5.0)
        run_dir = RunDir(tmp_path / "run")
        [result] = await BenchmarkRunner(config, run_dir).run([clip_sample("a", 0.5)])
    meta = read_meta(run_dir, "a")
    assert result.status == "failed" and result.error == "configure_timeout"
    assert meta["timeouts"]["configure_timeout"] == 0.3
    assert [a["error"] for a in meta["attempts"]] == ["configure_timeout", "configure_timeout"]
