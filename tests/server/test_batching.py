"""Batched stepping: the gathering rule on a fake clock, and the scheduler inside a real server.

The rule's contract (`BatchGatherer`): a batch leaves when full or when its oldest unit has waited the
budget, units leave in arrival order, a session never has two units pending or in flight. The server's
contract: a batching plugin's sessions get the same decisions as per-session stepping, and one session's
failure fails only its own response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.engine import Decision
from duplexkit.models import BatchItem, BatchPolicy, load_model
from duplexkit.models.scripted import ScriptedModel, ScriptedParams
from duplexkit.server import EmbeddedServer, ServerConfig
from duplexkit.server.batching import BatchGatherer
from duplexkit.server.runner import RunnerLimits
from duplexkit.server.ticker import SessionTicker
from tests.server.conftest import append, connect, spoken_turn, tone_pcm16


def test_a_batch_leaves_as_soon_as_it_is_full() -> None:
    gatherer: BatchGatherer[str] = BatchGatherer(BatchPolicy(max_size=3, max_wait_ms=50))
    for key in "ab":
        gatherer.submit(key, key.upper(), now=0.0)
    assert gatherer.take(0.001) == []
    gatherer.submit("c", "C", now=0.002)
    assert [p.item for p in gatherer.take(0.002)] == ["A", "B", "C"]
    assert len(gatherer) == 0 and gatherer.deadline() is None


def test_a_partial_batch_leaves_when_its_oldest_unit_reaches_the_wait_budget() -> None:
    gatherer: BatchGatherer[str] = BatchGatherer(BatchPolicy(max_size=8, max_wait_ms=20))
    gatherer.submit("a", "A", now=1.000)
    gatherer.submit("b", "B", now=1.015)
    assert gatherer.deadline() == pytest.approx(1.020)
    assert gatherer.take(1.0199) == []
    assert [p.item for p in gatherer.take(1.020)] == ["A", "B"]


def test_a_session_cannot_have_two_units_pending_or_in_flight() -> None:
    gatherer: BatchGatherer[str] = BatchGatherer(BatchPolicy(max_size=1, max_wait_ms=0))
    gatherer.submit("a", "A0", now=0.0)
    with pytest.raises(ValueError, match="already has a unit"):
        gatherer.submit("a", "A1", now=0.0)
    assert [p.item for p in gatherer.take(0.0)] == ["A0"]
    with pytest.raises(ValueError, match="already has a unit"):  # still in flight
        gatherer.submit("a", "A1", now=0.0)
    gatherer.release("a")
    gatherer.submit("a", "A1", now=0.1)
    assert [p.item for p in gatherer.take(0.1)] == ["A1"]


def test_releasing_a_unit_that_has_not_left_withdraws_it() -> None:
    gatherer: BatchGatherer[str] = BatchGatherer(BatchPolicy(max_size=4, max_wait_ms=10))
    gatherer.submit("a", "A", now=0.0)
    gatherer.submit("b", "B", now=0.001)
    gatherer.release("a")
    assert [p.item for p in gatherer.take(1.0)] == ["B"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.floats(0, 0.05)), min_size=1, max_size=60),
    st.integers(1, 6),
    st.floats(0, 30),
)
def test_no_unit_waits_past_the_budget_and_each_sessions_units_keep_their_order(
    arrivals: list[tuple[int, float]], max_size: int, max_wait_ms: float
) -> None:
    """Drive the rule as the scheduler does (take at every arrival and every deadline) on a fake clock."""
    gatherer: BatchGatherer[tuple[int, int]] = BatchGatherer(BatchPolicy(max_size, max_wait_ms))
    now, sent = 0.0, {k: 0 for k in range(6)}
    queued: dict[int, list[int]] = {k: [] for k in range(6)}
    stepped: dict[int, list[int]] = {k: [] for k in range(6)}
    events = sorted((now + gap * i, key) for i, (key, gap) in enumerate(arrivals))

    def drain(at: float) -> None:
        while batch := gatherer.take(at):
            assert len(batch) <= max_size
            assert len({p.key for p in batch}) == len(batch)
            for p in batch:
                assert at - p.due_at <= max_wait_ms / 1000.0 + 1e-9
                key, index = p.item
                stepped[key].append(index)
                gatherer.release(key)  # the step finishes at once: the session submits its next unit
                if queued[key]:
                    gatherer.submit(key, (key, queued[key].pop(0)), at)

    for at, key in events:
        while (deadline := gatherer.deadline()) is not None and deadline < at:
            drain(deadline)
        index = sent[key]
        sent[key] += 1
        try:
            gatherer.submit(key, (key, index), at)
        except ValueError:  # that session's previous unit is still out: it waits its turn, in order
            queued[key].append(index)
        drain(at)
    while (deadline := gatherer.deadline()) is not None:
        drain(deadline)
    for key in range(6):
        assert stepped[key] == list(range(sent[key]))


def _scripted(**args: str) -> ScriptedModel:
    model = load_model("scripted", {"first_output_ms": "30", "token_ms": "5", **args})
    assert isinstance(model, ScriptedModel)
    return model


async def _conversation(plugin: ScriptedModel) -> tuple[list[tuple[str, object]], float]:
    """Three concurrent sessions (speech then a silent unit) and what each was answered, in order; and
    how many `step_batch` calls the server made."""
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=8)) as server:

        async def one(seconds: float) -> list[tuple[str, object]]:
            client = await connect(server.url)
            await client.until("session.created")
            await client.send(append(tone_pcm16(seconds)))
            await client.send(append(bytes(32_000)))  # one silent unit: the reply starts
            done = await client.until("response.done", timeout=10)
            await client.ws.close()
            kinds = ("response.listen", "response.output_audio_transcript.delta", "response.done")
            return [
                (e["type"], e.get("delta") or e.get("response", {}).get("status"))
                for e in client.events
                if e["type"] in kinds
            ] + [("tokens", done["response_request_metrics"]["output_tokens"])]

        results = await asyncio.gather(one(1.0), one(2.0), one(3.0))
        batches = server.duplex.metrics.registry.get_sample_value("duplexkit_batch_size_count") or 0.0
    return [item for r in results for item in r], batches


async def test_the_scripted_model_decides_the_same_batched_or_per_session() -> None:
    per_session, no_batches = await _conversation(_scripted())
    batched, batches = await _conversation(_scripted(batch_size="4", batch_wait_ms="5"))
    assert batched == per_session
    assert any(e[0] == "response.output_audio_transcript.delta" for e in batched)
    assert no_batches == 0 and batches >= 3  # the second run really went through step_batch


class _FailsOneSession(ScriptedModel):
    """Fails any loud unit (near full scale); the rest of its batch is decided as usual."""

    def __init__(self) -> None:
        super().__init__(batching=BatchPolicy(max_size=8, max_wait_ms=30))
        self.batch_sizes: list[int] = []

    async def step_batch(self, items: Sequence[BatchItem]) -> Sequence[Decision | Exception]:
        self.batch_sizes.append(len(items))
        results = list(await super().step_batch(items))
        for i, item in enumerate(items):
            if float(abs(item.unit.samples).max(initial=0.0)) > 0.5:
                results[i] = RuntimeError("this session's unit broke the model")
        return results


async def test_a_failing_session_in_a_batch_fails_only_its_own_response() -> None:
    plugin = _FailsOneSession()
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=8)) as server:
        clients = [await connect(server.url) for _ in range(3)]
        for client in clients:
            await client.until("session.created")
        loud = tone_pcm16(1.0, amplitude=0.9)
        await asyncio.gather(
            *(c.send(append(loud if i == 0 else tone_pcm16(1.0))) for i, c in enumerate(clients))
        )
        failed = await clients[0].until("response.done", timeout=10)  # as OpenAI reports a server fault
        assert failed["response"]["status_details"]["error"]["code"] == "model_step_failed"
        for client in clients[1:]:
            listen = await client.until("response.listen", timeout=10)
            assert listen["response"]["metadata"]["reason"] == "model_listen"
            assert not client.of_type("error")
        done = await spoken_turn(clients[1])
        assert done["response"]["status"] == "completed"
        metrics = server.duplex.metrics.registry
        assert (metrics.get_sample_value("duplexkit_batch_size_count") or 0) >= 2
        assert max(plugin.batch_sizes) >= 2  # the three first units went in one batch


async def test_one_shared_ticker_calls_every_session_and_stops_with_the_last() -> None:
    ticker = SessionTicker(0.01)
    calls: list[str] = []
    three = asyncio.Event()

    def healthy() -> None:
        calls.append("a")
        if calls.count("a") == 3:
            three.set()

    def broken() -> None:
        calls.append("broken")
        raise RuntimeError("one session's tick failed")

    ticker.add(healthy)
    ticker.add(broken)
    await asyncio.wait_for(three.wait(), 5)
    assert calls.count("broken") >= 2  # a failing callback is logged and the others still run
    for callback in list(ticker._callbacks):
        ticker.discard(callback)
    await asyncio.sleep(0.05)
    assert ticker._task is None and len(ticker) == 0


class _StallsOnLoud(ScriptedModel):
    """The first `step_batch` call holding a loud unit takes `stall_s` (longer than the step deadline) to
    return; records any call that would hold a session already inside another call."""

    def __init__(self, stall_s: float) -> None:
        fast = ScriptedParams(first_output_ms=30, token_ms=5)
        super().__init__(fast, batching=BatchPolicy(max_size=8, max_wait_ms=10))
        self.stall_s = stall_s
        self.in_flight: set[int] = set()
        self.overlaps = 0
        self.stalled = 0

    async def step_batch(self, items: Sequence[BatchItem]) -> Sequence[Decision | Exception]:
        sessions = {id(item.session) for item in items}
        self.overlaps += len(sessions & self.in_flight) + (len(items) - len(sessions))
        self.in_flight |= sessions
        try:
            loud = any(float(abs(item.unit.samples).max(initial=0.0)) > 0.5 for item in items)
            if loud and not self.stalled:
                self.stalled += 1
                await asyncio.sleep(self.stall_s)
            return await super().step_batch(items)
        finally:
            self.in_flight -= sessions


async def test_a_batch_past_the_step_deadline_fails_its_session_with_model_step_timeout_only() -> None:
    plugin = _StallsOnLoud(stall_s=2.0)
    config = ServerConfig(max_sessions=8, limits=RunnerLimits(step_deadline_s=0.2))
    async with EmbeddedServer(plugin, config) as server:
        stalled = await connect(server.url)
        await stalled.until("session.created")
        await stalled.send(append(tone_pcm16(1.0, amplitude=0.9)))
        failed = await stalled.until("response.done", timeout=10)  # as OpenAI reports a server fault
        assert failed["response"]["status_details"]["error"]["code"] == "model_step_timeout"
        # Its next unit must not join a batch while the abandoned one is still inside the model.
        await stalled.send(append(tone_pcm16(1.0)))
        # The stalled call does not hold up the scheduler: a session arriving now is served in full.
        healthy = await connect(server.url)
        await healthy.until("session.created")
        done = await spoken_turn(healthy)
        assert done["response"]["status"] == "completed"
        assert not healthy.of_type("error")
        await asyncio.sleep(2.0)  # the stalled call has returned
        assert plugin.stalled == 1 and plugin.overlaps == 0
        await stalled.send({"type": "session.heartbeat"})
        await stalled.until("session.heartbeat_ack", timeout=10)  # the session lives on
        assert not stalled.of_type("session.closed")
        assert not stalled.of_type("error")
        codes = {e["response"]["status_details"]["error"]["code"] for e in stalled.of_type("response.done")}
        assert codes == {"model_step_timeout"}
        metrics = server.duplex.metrics.registry
        assert metrics.get_sample_value("duplexkit_errors_total", {"code": "model_step_timeout"}) >= 1
