"""The shared ticker visits a session only when its time-based work is due, and sooner when woken."""

from __future__ import annotations

import asyncio
import math

from duplexkit.server.ticker import SessionTicker


async def test_a_session_with_nothing_due_is_not_visited_until_it_is() -> None:
    ticker = SessionTicker(0.01)
    visits: list[str] = []

    def streaming() -> float:  # input flows, nothing timed pending: next due in 10 s (its idle timeout)
        visits.append("streaming")
        return 10.0

    def replying() -> None:  # a reply continues past the input: every tick
        visits.append("replying")

    ticker.add(streaming)
    ticker.add(replying)
    await asyncio.sleep(0.3)
    assert visits.count("streaming") == 1  # the first tick after it joined, then not before its due time
    assert visits.count("replying") >= 3
    ticker.discard(streaming)
    ticker.discard(replying)


async def test_wake_brings_the_next_visit_forward_and_never_pushes_it_back() -> None:
    ticker = SessionTicker(0.01)
    visited = asyncio.Event()
    calls = 0

    def session() -> float:
        nonlocal calls
        calls += 1
        if calls > 1:
            visited.set()
        return math.inf  # nothing timed until woken

    ticker.add(session)
    await asyncio.sleep(0.05)
    assert calls == 1
    ticker.wake(session, 0.02)  # a step started: its deadline is due in 20 ms
    ticker.wake(session, 60.0)  # a later deadline does not delay it
    await asyncio.wait_for(visited.wait(), 5)
    assert calls == 2
    ticker.discard(session)
    ticker.wake(session, 0.0)  # a discarded session is not brought back
    await asyncio.sleep(0.05)
    assert calls == 2 and len(ticker) == 0
