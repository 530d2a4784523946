"""duplexkit on Ray Serve: a local cluster on loopback, two replicas of the same app behind the Serve proxy.

One cluster for the module (about 12 s to start on 2 cores, shut down at the end): 2 replicas of the
scripted model, 2 sessions each; the Moshi test redeploys the app in place as 2 replicas of `--model
moshi` (a tiny checkpoint, 1 slot each), and a scripted test after it would put the scripted app back.
Which replica holds a session is read from the cluster's `/healthz`
(`per_replica` sessions), never from our own router's state. Routing keys are sent the way a client
carries them: Ray Serve's `x-session-id` header (raw `websockets` client, as any peer would), or the
`session_id` query parameter (`DuplexClient`, as a browser would: browsers cannot set WebSocket headers).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytest.importorskip("ray.serve", reason="the `ray` extra is not installed (pip install 'duplexkit[ray]')")

import ray
from ray import serve
from websockets.asyncio.client import ClientConnection, connect

from duplexkit.client import DuplexClient, SessionBounds, converse
from duplexkit.client.reconnect import ResumePolicy
from duplexkit.server.cluster import REPORT_INTERVAL_S, SESSION_HEADER
from duplexkit.server.ray_serve import APP_NAME, DEPLOYMENT_NAME, RayServeOptions, build_app, ray_serve
from tests.bench.conftest import speech_like
from tests.chaos import scenarios
from tests.chaos.proxy import Fault, FaultProxy

MAX_SESSIONS = 2
FAST = {"first_output_ms": "30", "token_ms": "2", "ms_per_char": "10"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SCRIPTED = RayServeOptions(
    model="scripted", model_args=FAST, replicas=2, max_sessions=MAX_SESSIONS, replica_cpus=0.5
)


@pytest.fixture(scope="module")
def serving() -> Iterator[dict[str, Any]]:
    """The module's cluster: its URL, and the options of the app it serves now (tests redeploy it in place
    when they need another model, which is cheaper than a second cluster)."""
    with ray_serve(SCRIPTED, port=free_port()) as url:
        yield {"url": url, "options": SCRIPTED}


def deployed(serving: dict[str, Any], options: RayServeOptions) -> str:
    """The cluster's URL once it serves `options` (redeployed in place unless it already does)."""
    if serving["options"] != options:
        serve.run(build_app(options), name=APP_NAME, route_prefix="/")
        serving["options"] = options
    url: str = serving["url"]
    return url


@pytest.fixture
def cluster(serving: dict[str, Any]) -> str:
    return deployed(serving, SCRIPTED)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("moshi")
    from duplexkit.models.moshi.tiny import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("moshi") / "tiny")


@pytest.fixture
def moshi_cluster(serving: dict[str, Any], tiny_checkpoint: Path) -> str:
    """`--model moshi` on a tiny checkpoint, 1 slot per replica (fewer than `max_sessions`)."""
    moshi = RayServeOptions(
        model="moshi",
        model_args={"checkpoint": str(tiny_checkpoint), "slots": "1"},
        replicas=2,
        max_sessions=MAX_SESSIONS,
        replica_cpus=0.5,
    )
    return deployed(serving, moshi)


def healthz(url: str) -> dict[str, Any]:
    http = url.replace("ws://", "http://").removesuffix("/v1/realtime")
    try:
        with urllib.request.urlopen(f"{http}/healthz", timeout=5) as response:
            return dict(json.load(response))
    except urllib.error.HTTPError as exc:
        return dict(json.load(exc))


def metric_samples(url: str) -> dict[str, float]:
    """The cluster's /metrics, unlabelled samples by name."""
    http = url.replace("ws://", "http://").removesuffix("/v1/realtime")
    with urllib.request.urlopen(f"{http}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.labels
    }


async def until(url: str, holds: Callable[[list[int]], bool], timeout_s: float = 8.0) -> list[int]:
    """Poll the cluster's /healthz until the replicas' session counts (in replica order) satisfy `holds`."""
    deadline = time.monotonic() + timeout_s
    while True:
        body = await asyncio.to_thread(healthz, url)
        counts = [r["sessions"] for r in body["per_replica"]]
        if len(counts) == 2 and holds(counts):
            return counts
        assert time.monotonic() < deadline, f"replica sessions stayed at {counts}"
        await asyncio.sleep(0.2)


async def open_session(url: str, *, key: str | None = None) -> tuple[ClientConnection, dict[str, Any]]:
    """A raw connection (the server autostarts it); returns it with its first event."""
    headers = {SESSION_HEADER: key} if key else None
    ws = await connect(url, additional_headers=headers, open_timeout=10)
    first = json.loads(await asyncio.wait_for(ws.recv(), 10))
    return ws, first


async def open_admitted(url: str, *, key: str | None = None, tries: int = 5) -> tuple[ClientConnection, str]:
    """Open a session, reconnecting after a retryable refusal as a benchmark client does."""
    for _ in range(tries):
        ws, first = await open_session(url, key=key)
        if first["type"] == "session.created":
            return ws, first["session"]["id"]
        assert first["error"]["code"] == "session_capacity_exhausted", first
        await ws.close()
        await asyncio.sleep(0.3)
    raise AssertionError(f"no replica admitted a session in {tries} tries")


async def end(ws: ClientConnection) -> None:
    """Leave as an OpenAI-dialect client does: close the socket (that ends the session and frees its slot)."""
    await ws.close()


def test_a_local_clusters_processes_give_the_serve_proxy_a_minute_to_start(cluster: str) -> None:
    """Ray's 5 s for a proxy to become ready killed it on a loaded machine (`serve.start` failed with
    `ActorDiedError`, the whole module with it): the cluster's processes start with a minute, and the
    driver's environment is as it was."""

    @ray.remote(num_cpus=0)
    def ready_check_timeout() -> str | None:
        return os.environ.get("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S")

    assert ray.get(ready_check_timeout.remote(), timeout=60) == "60"
    assert "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S" not in os.environ


async def test_a_spoken_turn_through_the_serve_proxy(cluster: str) -> None:
    async with DuplexClient(cluster) as client:
        conversation = await converse(
            client,
            speech_like(1.5),
            sample_rate_hz=16_000,
            pace="as-fast-as-possible",
            bounds=SessionBounds(settle_s=0.3, drain_timeout_s=10.0),
        )
        responses = client.collector.responses()
        audio = client.collector.output_audio()
    assert conversation.interrupted is None
    assert responses and all(r.status == "completed" for r in responses)
    assert client.collector.sentences(), "the reply's transcript did not come back through the proxy"
    assert audio is not None and np.abs(audio).max() > 0


async def test_a_full_replica_spills_over_to_the_other_and_a_full_cluster_refuses_retryably(
    cluster: str,
) -> None:
    await until(cluster, lambda c: sum(c) == 0)
    held = [await open_admitted(cluster) for _ in range(2 * MAX_SESSIONS)]
    try:
        assert await until(cluster, lambda c: sum(c) == 4) == [MAX_SESSIONS, MAX_SESSIONS]
        body = await asyncio.to_thread(healthz, cluster)
        assert (body["sessions"], body["max_sessions"], body["replicas"]) == (4, 4, 2)
        # What each replica serves, as one server says it: the same in every replica's report.
        assert body["model_identity"]["id"].startswith("scripted@sha256:")
        assert [r["model_identity"] for r in body["per_replica"]] == [body["model_identity"]] * 2
        metrics = await asyncio.to_thread(metric_samples, cluster)
        assert metrics["duplexkit_replicas"] == 2 and metrics["duplexkit_sessions_active"] == 4
        ws, first = await open_session(cluster)
        await ws.close()
        assert first["type"] == "error"
        assert first["error"]["code"] == "session_capacity_exhausted"
        assert first["error"]["type"] == "rate_limit_error"  # retryable: come back later
    finally:
        for ws, _ in held:
            await end(ws)


async def test_a_reconnection_carrying_its_session_id_reaches_the_replica_holding_that_session(
    cluster: str,
) -> None:
    """The key is the id the server announced; the replica reports it (routing stats), so the second
    connection joins it although the other replica is emptier, for each replica in turn."""
    await until(cluster, lambda c: sum(c) == 0)
    first_ws, first_id = await open_admitted(cluster)
    opened = [first_ws]
    try:
        await until(cluster, lambda c: sorted(c) == [0, 1])
        await asyncio.sleep(2.5 * REPORT_INTERVAL_S)  # the holder's routing stats name the session
        again, _ = await open_admitted(cluster, key=first_id, tries=1)
        opened.append(again)
        await until(cluster, lambda c: sorted(c) == [0, 2])  # joined the holder, not the empty one
        second_ws, second_id = await open_admitted(cluster, tries=1)  # least loaded: the other replica
        opened.append(second_ws)
        await until(cluster, lambda c: sorted(c) == [1, 2])
        await asyncio.sleep(2.5 * REPORT_INTERVAL_S)
        back, _ = await open_admitted(cluster, key=second_id, tries=1)
        opened.append(back)
        assert await until(cluster, lambda c: sum(c) == 4) == [2, 2]
    finally:
        for ws in opened:
            await end(ws)


async def test_a_key_the_client_chose_in_the_query_sticks_without_waiting_for_a_report(cluster: str) -> None:
    await until(cluster, lambda c: sum(c) == 0)
    url = f"{cluster}?session_id=client-chosen-key-1"
    async with DuplexClient(url) as one:
        await one.configure()
        before = await until(cluster, lambda c: sorted(c) == [0, 1])
        async with DuplexClient(url) as two:  # at once: the router remembers where it placed the key
            await two.configure()
            after = await until(cluster, lambda c: sum(c) == 2)
    holder = before.index(1)
    assert after[holder] == 2 and after[1 - holder] == 0


async def test_bursts_of_the_cluster_capacity_are_admitted_and_spread_again_and_again(cluster: str) -> None:
    """Four connections at once on 2 replicas x 2 slots, before any replica reported them: each admitted
    at the first try, two per replica. Then all leave, and as soon as the cluster's /healthz says the
    slots are free, the next burst: three times in a row."""
    for _ in range(3):
        await until(cluster, lambda c: sum(c) == 0)
        opened = await asyncio.gather(*(open_session(cluster) for _ in range(2 * MAX_SESSIONS)))
        try:
            assert [first["type"] for _, first in opened] == ["session.created"] * 4, [f for _, f in opened]
            assert await until(cluster, lambda c: sum(c) == 4) == [MAX_SESSIONS, MAX_SESSIONS]
            # What the router reads of a replica (any: both are full): its answered connections, by id.
            handle = serve.get_deployment_handle(DEPLOYMENT_NAME, app_name=APP_NAME)
            stats = await handle.record_routing_stats.remote()
            assert stats["sessions"] == MAX_SESSIONS
            assert len(stats["answered"]) == MAX_SESSIONS and all(stats["answered"])
        finally:
            await asyncio.gather(*(end(ws) for ws, _ in opened))


async def test_a_dropped_session_resumes_on_its_replica_through_the_router(cluster: str) -> None:
    """The whole path at once: a session through the Serve proxy, its connection reset mid-reply (no close
    frame: it detaches), and `DuplexClient`'s resume routed by its session id to the replica holding it,
    though the other replica is emptier; the reply arrives whole."""
    await until(cluster, lambda c: sum(c) == 0)
    target = urlsplit(cluster)
    assert target.hostname is not None and target.port is not None
    async with FaultProxy(target.hostname, target.port) as proxy:
        proxy.plan(Fault("reset", "down", marker=b'"response.audio.delta"'), None)
        policy = ResumePolicy(backoff_s=0.5, backoff_max_s=2.0)
        async with DuplexClient(proxy.url(), resume=policy) as client:
            conversation = await converse(
                client,
                speech_like(2.5),  # in real time: the replica has reported the session when the drop comes
                sample_rate_hz=16_000,
                bounds=SessionBounds(settle_s=0.3, drain_timeout_s=15.0),
            )
            responses = client.collector.responses()
        assert proxy.triggered == 1 and client.resumed == 1
    assert conversation.interrupted is None and conversation.close is not None and conversation.close.clean
    assert responses and all(r.status == "completed" for r in responses)
    assert client.collector.sentences(), "the reply's transcript did not come back"


async def test_a_burst_beyond_the_cluster_capacity_is_admitted_or_refused_retryably(cluster: str) -> None:
    """The chaos scenario at small counts: twice the capacity at once, twice; none lost, and exactly the
    capacity admitted each time."""
    report = await scenarios.cluster_burst(cluster, 2 * MAX_SESSIONS, 4 * MAX_SESSIONS, rounds=2, hold_s=0.3)
    assert report.lost == 0, report.outcomes_lost
    assert report.admitted_per_round == [2 * MAX_SESSIONS] * 2
    assert report.refused_retryable == 2 * 2 * MAX_SESSIONS


async def _moshi_audio(ws: ClientConnection) -> float:
    """Speak to a Moshi session for 1.2 s; the peak of the reply audio it streams back."""
    t = np.arange(round(1.2 * 24_000)) / 24_000
    pcm = (0.2 * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2").tobytes()
    await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}))
    peak = 0.0
    async with asyncio.timeout(20):
        while peak == 0.0:
            event = json.loads(await ws.recv())
            assert event["type"] != "error", event
            if event["type"] == "response.output_audio.delta":
                delta = np.frombuffer(base64.b64decode(event["delta"]), "<i2")
                peak = float(np.abs(delta).max()) / 32768 if len(delta) else 0.0
    return peak


async def test_moshi_replicas_each_hear_their_sessions_and_report_their_slots_as_capacity(
    moshi_cluster: str,
) -> None:
    await until(moshi_cluster, lambda c: sum(c) == 0, timeout_s=30)
    body = await asyncio.to_thread(healthz, moshi_cluster)
    assert body["max_sessions"] == 2  # 1 slot per replica, not `max_sessions` 2 each
    assert {r["max_sessions"] for r in body["per_replica"]} == {1}
    # The router ranks replicas by their own capacity, as each reports it, not by the deployment's option.
    stats = await serve.get_deployment_handle(
        DEPLOYMENT_NAME, app_name=APP_NAME
    ).record_routing_stats.remote()
    assert stats["max_sessions"] == 1
    held = [await open_admitted(moshi_cluster) for _ in range(2)]
    try:
        assert await until(moshi_cluster, lambda c: sum(c) == 2) == [1, 1]  # one session on each replica
        peaks = await asyncio.gather(*(_moshi_audio(ws) for ws, _ in held))
        assert all(peak > 0 for peak in peaks), peaks
        ws, first = await open_session(moshi_cluster)  # every slot of the cluster is taken
        await ws.close()
        assert first["type"] == "error" and first["error"]["code"] == "session_capacity_exhausted"
    finally:
        for ws, _ in held:
            await end(ws)
