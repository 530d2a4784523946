"""Batched stepping: units due across sessions go to the model in one `step_batch` call.

`BatchGatherer` is the Sans-I/O rule (fed with `now`, tested with a fake clock): a batch leaves when it is
full or when its oldest unit has waited the policy's budget, and a session never has two units pending
or in flight, so its units are stepped in order. `BatchScheduler` is the asyncio edge: one waiting task
that dispatches batches as they come due and hands each session its own decision or its own failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from duplexkit.engine import Decision, Unit
from duplexkit.models import BatchItem, BatchPolicy, ModelPlugin, ModelSession
from duplexkit.server.metrics import ServerMetrics

log = logging.getLogger("duplexkit.server")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Pending(Generic[T]):
    key: Hashable
    item: T
    due_at: float


class BatchGatherer(Generic[T]):
    """Which units form the next batch, and when it must leave.

    Contract: `take(now)` returns a batch once `max_size` units are pending or once the oldest has been
    pending `max_wait_ms` (`deadline()` says when that is); otherwise nothing. Units leave in arrival
    order. A key (a session) holds at most one unit from `submit` until `release`, so the caller cannot
    reorder a session's units or put two of them in one batch.
    """

    def __init__(self, policy: BatchPolicy) -> None:
        self.policy = policy
        self._pending: list[Pending[T]] = []
        self._waiting: set[Hashable] = set()
        self._in_flight: set[Hashable] = set()

    def __len__(self) -> int:
        return len(self._pending)

    def submit(self, key: Hashable, item: T, now: float) -> None:
        if key in self._waiting or key in self._in_flight:
            raise ValueError(f"{key!r} already has a unit pending or in flight")
        self._waiting.add(key)
        self._pending.append(Pending(key, item, now))

    def deadline(self) -> float | None:
        """When the oldest pending unit's wait budget runs out, or `None` with nothing pending."""
        if not self._pending:
            return None
        return self._pending[0].due_at + self.policy.max_wait_ms / 1000.0

    def take(self, now: float) -> list[Pending[T]]:
        """The batch due at `now` (full, or its oldest unit at its budget), or `[]` if none is due yet."""
        deadline = self.deadline()
        if deadline is None or (len(self._pending) < self.policy.max_size and now < deadline):
            return []
        batch, self._pending = self._pending[: self.policy.max_size], self._pending[self.policy.max_size :]
        for pending in batch:
            self._waiting.discard(pending.key)
            self._in_flight.add(pending.key)
        return batch

    def release(self, key: Hashable) -> None:
        """The key's unit is done (or withdrawn, if it had not left yet): it may submit its next unit."""
        self._in_flight.discard(key)
        if key in self._waiting:
            self._waiting.discard(key)
            self._pending = [p for p in self._pending if p.key != key]


_Entry = tuple[BatchItem, "asyncio.Future[Decision]"]


class BatchScheduler:
    """Steps a batching plugin's sessions through `step_batch`; one per server, shared by its runners.

    A batch whose call outlasts the model's unit period is counted in `duplexkit_batches_slow` and logged;
    each unit's wait for its batch is observed in `duplexkit_batch_wait_seconds`.
    """

    def __init__(
        self,
        plugin: ModelPlugin,
        policy: BatchPolicy,
        metrics: ServerMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plugin = plugin
        self.metrics = metrics
        self.clock = clock
        self._gatherer: BatchGatherer[_Entry] = BatchGatherer(policy)
        self._period_s = plugin.capabilities.chunk_period_ms / 1000.0
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._running: dict[Hashable, asyncio.Event] = {}
        """Sessions whose unit is inside a `step_batch` call, set when the call returns."""

    async def step(
        self, session: ModelSession, unit: Unit, request_started_at: float
    ) -> AsyncIterator[Decision]:
        """The session's decision for `unit` from whichever batch it joins (like `ModelSession.step`).

        Cancelled (the runner's step deadline), a unit still waiting is withdrawn; one already in a batch
        stays the session's unit in flight until that call returns, so the session's next unit waits for
        it (within its own deadline) and the model never holds two units of one session."""
        while (running := self._running.get(session)) is not None:
            await running.wait()
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._gatherer.submit(session, (BatchItem(session, unit, request_started_at), future), self.clock())
        self._wake.set()
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._gather(), name="batch-gatherer")
        try:
            decision = await future
        finally:
            if session not in self._running:  # still waiting (withdrawn), or its batch has returned
                self._gatherer.release(session)
        yield decision

    async def _gather(self) -> None:
        try:
            while len(self._gatherer):
                now = self.clock()
                batch = self._gatherer.take(now)
                if batch:
                    for pending in batch:
                        self._running[pending.key] = asyncio.Event()
                    task = asyncio.create_task(self._dispatch(batch, now), name="batch")
                    self._batches.add(task)
                    task.add_done_callback(self._batches.discard)
                    continue
                deadline = self._gatherer.deadline()
                assert deadline is not None
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.0, deadline - now))
        finally:
            self._loop_task = None

    async def _dispatch(self, batch: list[Pending[_Entry]], started: float) -> None:
        for pending in batch:
            self.metrics.batch_wait_seconds.observe(started - pending.due_at)
        items = [pending.item[0] for pending in batch]
        results: list[Decision | Exception]
        try:
            results = list(await self.plugin.step_batch(items))
            if len(results) != len(items):
                raise RuntimeError(f"step_batch returned {len(results)} results for {len(items)} units")
        except Exception as exc:  # the whole call failed: every unit in it fails, and only those
            log.exception("batch of %d units failed", len(items))
            results = [exc] * len(items)
        finally:  # the call has returned (or was cancelled): its sessions may submit their next units
            for pending in batch:
                self._gatherer.release(pending.key)
                self._running.pop(pending.key).set()
        elapsed = self.clock() - started
        self.metrics.batch_size.observe(len(items))
        self.metrics.batch_step_seconds.observe(elapsed)
        if elapsed > self._period_s:
            self.metrics.batches_slow.inc()
            log.warning(
                "batch of %d units took %.0f ms (unit period %.0f ms)",
                len(items),
                elapsed * 1e3,
                self._period_s * 1e3,
            )
        for pending, result in zip(batch, results, strict=True):
            future = pending.item[1]
            if future.done():  # its session went away meanwhile
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)
