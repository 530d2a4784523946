"""Benchmarks over a pool of servers: capacity from `/healthz`, refusals spilling over, work stealing, and a
server killed mid-run whose samples are retried on the other one.

The servers are real duplexkit servers (`EmbeddedServer`, scripted model) on loopback; a "killed" server has
its listening socket closed and every connection aborted (TCP reset), as a SIGKILLed process leaves them.
The pool's own bookkeeping is tested first without sockets, through a probe function.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.pool import Health, NoServerUp, Release, ServerPool, healthz_url, probe_healthz
from duplexkit.bench.runner import BenchmarkRunner, SampleResult
from duplexkit.cli import main
from duplexkit.client import DuplexClient, SessionBounds
from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.picows import PicowsEdge
from tests.bench.conftest import clip_sample

FAST = {"first_output_ms": "30", "token_ms": "2", "ms_per_char": "10"}


# --- the pool's bookkeeping ------------------------------------------------------------------------


def probe_of(answers: dict[str, Health | None]) -> Any:
    async def probe(url: str) -> Health | None:
        return answers[url]

    return probe


async def test_capacity_is_the_smaller_of_the_per_server_bound_and_healthz_max_sessions() -> None:
    answers = {"ws://a": Health(200, max_sessions=2), "ws://b": Health(404), "ws://c": None}
    pool = ServerPool(list(answers), per_server=4, probe=probe_of(answers))
    await pool.start()
    try:
        # c's /healthz did not answer: it is tried anyway, its handshake decides
        assert [(s.ceiling, s.state.value) for s in pool.servers] == [(2, "up"), (4, "up"), (4, "up")]
        leases = [await pool.lease(0.1) for _ in range(10)]
        assert Counter(lease.url for lease in leases if lease) == {"ws://a": 2, "ws://b": 4, "ws://c": 4}
        assert await pool.lease(0.05) is None  # every server is full
        c_lease = next(lease for lease in leases if lease and lease.url == "ws://c")
        pool.release(c_lease, Release.UNREACHABLE)
        assert pool.servers[2].state.value == "down"
        assert await pool.lease(0.05) is None  # the down server's freed slot is never offered
    finally:
        await pool.aclose()


async def test_a_refusal_lowers_the_allowance_and_completed_sessions_raise_it_back() -> None:
    answers = {"ws://a": Health(200, max_sessions=3), "ws://b": Health(200, max_sessions=3)}
    pool = ServerPool(list(answers), per_server=3, probe=probe_of(answers))
    await pool.start()
    try:
        a = pool.servers[0]
        held = [await pool.lease(0.1, avoid=pool.servers[1]) for _ in range(3)]
        assert all(lease is not None and lease.server is a for lease in held)
        assert held[0] is not None and held[1] is not None
        pool.release(held[0], Release.REFUSED)
        assert a.limit == 2 and a.free == 0  # two of ours still run there: that is its room now
        assert pool.has_room_elsewhere(held[1])
        pool.release(held[1], Release.COMPLETED)
        assert a.limit == 3 and a.free == 2
        refused = await pool.lease(0.1, avoid=pool.servers[1])
        assert refused is not None
        pool.release(refused, Release.REFUSED)
        assert a.limit == 1  # never below one: the refused attempt's own backoff paces the next try
        again = await pool.lease(0.1, avoid=a)
        assert again is not None and again.url == "ws://b"
    finally:
        await pool.aclose()


async def test_a_lost_server_is_probed_and_one_that_is_down_comes_back_when_it_answers() -> None:
    answers: dict[str, Health | None] = {"ws://a": Health(200), "ws://b": Health(200)}
    pool = ServerPool(list(answers), per_server=1, probe=probe_of(answers), probe_interval_s=0.02)
    await pool.start()
    try:
        lease = await pool.lease(0.1)
        assert lease is not None and lease.url == "ws://a"
        answers["ws://a"] = None
        pool.release(lease, Release.LOST)
        nxt = await pool.lease(0.5)
        assert nxt is not None and nxt.url == "ws://b"
        await asyncio.sleep(0.05)
        assert pool.servers[0].state.value == "down"
        answers["ws://b"] = None
        pool.release(nxt, Release.UNREACHABLE)
        with pytest.raises(NoServerUp):
            await pool.lease(1.0)
        answers["ws://a"] = Health(200)
        await asyncio.sleep(0.1)
        back = await pool.lease(0.1)
        assert back is not None and back.url == "ws://a"
    finally:
        await pool.aclose()


def test_healthz_is_found_at_the_root_of_the_websocket_url() -> None:
    assert healthz_url("ws://10.0.0.2:8000/v1/realtime?model=x") == "http://10.0.0.2:8000/healthz"
    assert healthz_url("wss://gpu.example/v1/duplex") == "https://gpu.example/healthz"


# --- runs against real servers ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def servers(*max_sessions: int, **scripted: str) -> AsyncIterator[list[EmbeddedServer]]:
    plugin_args = {**FAST, **scripted}
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                EmbeddedServer(load_model("scripted", plugin_args), ServerConfig(max_sessions=n))
            )
            for n in max_sessions
        ]


def kill(server: EmbeddedServer) -> None:
    """Die like a killed process: stop listening and reset every connection, with no goodbye."""
    edge = server._running
    assert isinstance(edge, PicowsEdge) and edge._server is not None  # the default edge
    edge._server.close()
    for listener in list(edge._listeners):
        assert listener._transport is not None
        listener._transport.disconnect(graceful=False)


def pool_config(url: str, *, pace: str = "as-fast-as-possible", concurrency: int = 4) -> RunConfig:
    return RunConfig(
        url=url,
        pace=pace,  # type: ignore[arg-type]
        concurrency=concurrency,
        bounds=SessionBounds(settle_s=0.3, drain_timeout_s=10.0, close_timeout_s=2.0),
        keep_audio=False,
        capacity_wait_max_s=20.0,
    )


def rejected(server: EmbeddedServer) -> float:
    samples = server.duplex.metrics.sessions_rejected.labels(reason="capacity")._value.get()
    return float(samples)


async def test_a_pool_keeps_each_server_within_its_capacity_and_records_who_produced_each_sample(
    tmp_path: Path,
) -> None:
    samples = [clip_sample(f"s{i}", 1.0) for i in range(8)]
    async with servers(1, 3) as (small, big):
        urls = [small.url, big.url]
        pool = ServerPool(urls, per_server=4)
        run_dir = RunDir(tmp_path / "run")
        runner = BenchmarkRunner(pool_config(small.url), run_dir, pool=pool)
        results = await runner.run(samples)

    assert all(r.status == "published" for r in results)
    metas = list(run_dir.metas())
    assert sorted(m["id"] for m in metas) == sorted(s.id for s in samples)
    by_server = Counter(m["server_url"] for m in metas)
    assert set(by_server) == set(urls) and sum(by_server.values()) == 8
    assert by_server[big.url] > by_server[small.url]  # three slots take more of the work than one
    assert [s["ceiling"] for s in pool.to_json()] == [1, 3]
    assert rejected(small) == 0 and rejected(big) == 0  # /healthz told the pool; nothing was refused
    assert all(m["attempts"][-1]["server_url"] == m["server_url"] for m in metas)


async def test_a_server_full_of_another_clients_sessions_refuses_and_the_next_connection_goes_elsewhere(
    tmp_path: Path,
) -> None:
    # Another client holds busy's slot: configured, since an `autostart=0` connection is admitted on its
    # first message (which may be a resume, taking no new slot).
    async with servers(1, 2) as (busy, free), DuplexClient(busy.url) as other:
        await other.configure(timeout_s=5)
        for _ in range(200):
            if busy.duplex.manager.active:
                break
            await asyncio.sleep(0.01)
        assert busy.duplex.manager.active == 1
        pool = ServerPool([busy.url, free.url], per_server=2)
        run_dir = RunDir(tmp_path / "run")
        results = await BenchmarkRunner(pool_config(busy.url), run_dir, pool=pool).run(
            [clip_sample("a", 1.0), clip_sample("b", 1.0), clip_sample("c", 1.0)]
        )

    assert all(r.status == "published" for r in results)
    metas = list(run_dir.metas())
    assert {m["server_url"] for m in metas} == {free.url}
    assert rejected(busy) >= 1  # the refusal really happened, and was not an attempt
    assert all(m["retry_count"] == 0 and len(m["attempts"]) == 1 for m in metas)
    first_refused = pool.to_json()[0]
    assert first_refused["refusals"] >= 1 and first_refused["sessions_completed"] == 0


async def test_a_server_killed_mid_run_has_its_samples_retried_on_the_other_and_none_is_lost(
    tmp_path: Path,
) -> None:
    samples = [clip_sample(f"k{i}", 1.5) for i in range(6)]
    results: list[SampleResult] = []
    async with servers(2, 2) as (doomed, survivor):
        pool = ServerPool([doomed.url, survivor.url], per_server=2, probe_interval_s=0.2)
        run_dir = RunDir(tmp_path / "run")
        runner = BenchmarkRunner(pool_config(doomed.url, pace="realtime"), run_dir, pool=pool)
        run = asyncio.create_task(runner.run(samples))
        for _ in range(500):
            if doomed.duplex.manager.active == 2:
                break
            await asyncio.sleep(0.01)
        assert doomed.duplex.manager.active == 2, "the doomed server never held two sessions"
        await asyncio.sleep(0.5)  # mid-stream
        kill(doomed)
        results = await asyncio.wait_for(run, 60)
        assert await probe_healthz(doomed.url) is None  # it really is gone

    assert sorted(r.id for r in results) == sorted(s.id for s in samples)
    assert all(r.status == "published" for r in results), [r.error for r in results]
    metas = list(run_dir.metas())
    assert sorted(m["id"] for m in metas) == sorted(s.id for s in samples)  # each once, none lost
    moved = [m for m in metas if m["retry_count"] == 1]
    assert len(moved) == 2
    for meta in moved:
        first, second = meta["attempts"]
        assert first["server_url"] == doomed.url and first["transport_error"]
        assert second["server_url"] == survivor.url == meta["server_url"]
    assert all(m["server_url"] == survivor.url for m in metas)
    assert pool.to_json()[0]["state"] == "down"


# --- the command -----------------------------------------------------------------------------------


@contextlib.contextmanager
def serve_processes(count: int) -> Iterator[list[str]]:
    """`duplexkit serve --model scripted` subprocesses on free ports (the command runs its own loop)."""
    ports = []
    for _ in range(count):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    serve = [sys.executable, "-m", "duplexkit", "serve", "--model", "scripted", "--max-sessions", "3"]
    procs = [subprocess.Popen([*serve, "--log-level", "warning", "--port", str(port)]) for port in ports]
    try:
        for port in ports:
            deadline = time.monotonic() + 30
            while probe_health_sync(port) is None:
                assert time.monotonic() < deadline, f"duplexkit serve did not start on {port}"
                time.sleep(0.1)
        yield [f"ws://127.0.0.1:{port}/v1/realtime" for port in ports]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def probe_health_sync(port: int) -> Health | None:
    return asyncio.run(probe_healthz(f"ws://127.0.0.1:{port}/v1/realtime"))


def test_bench_drives_a_pool_from_repeated_urls_and_records_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    fast = ["--model", "scripted", "--pace", "as-fast-as-possible", "--settle", "0.3", "--limit", "6"]
    with serve_processes(2) as urls:
        argv = ["bench", "--dataset", "builtin", "--out", str(out), *fast, "--concurrency", "4"]
        assert main([*argv, "--url", urls[0], "--url", urls[1]]) == 0
        run = json.loads((out / "run.json").read_text())
        assert run["server"]["urls"] == urls
        assert [(s["url"], s["max_sessions"], s["ceiling"]) for s in run["server"]["pool"]] == [
            (urls[0], 3, 3),
            (urls[1], 3, 3),
        ]
        assert sum(s["sessions_completed"] for s in run["server"]["pool"]) == 6
        assert {m["server_url"] for m in RunDir(out).metas()} <= set(urls)
        assert main([*argv, "--url", urls[0]]) == 2  # resuming with another pool
        assert "another server" in capsys.readouterr().err
        assert main([*argv, "--url", urls[0], "--url", urls[0]]) == 2
