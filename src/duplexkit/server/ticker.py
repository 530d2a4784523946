"""One timer for every session's passage-of-time work, visiting only the sessions it is due for.

Each session's engine must hear the time when time-based work falls due (an idle timeout, a reply
continuing past its input, a step past its deadline, the resume lease's reaper). A sleeping task per
session cost a wake-up per session per tick: at 1,000 sessions and 10 Hz that was a tenth of a core
doing nothing. One task wakes every `period_s` instead, and calls only the sessions whose next work is due:
a session streaming input with nothing timed pending is not visited until its idle timeout would fall.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable

log = logging.getLogger("duplexkit.server")

TickCallback = Callable[[], float | None]
"""A session's tick: does what is due, and returns in how many seconds its next time-based work falls
due (`math.inf`: none until woken), or `None` to be called again at the next tick."""


class SessionTicker:
    """Calls each registered callback when it is due, checked every `period_s` from one task.

    A callback is first called at the tick after it is added, then when the delay it returned has passed;
    `wake` brings its next call forward when new timed work starts (a reply, a step's deadline). The task
    starts with the first callback and ends when the last is discarded. A callback that raises is logged,
    stays registered and is called again at the next tick; the others are still called.
    """

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._callbacks: dict[TickCallback, float] = {}
        """Each registered callback → when it is next due (this ticker's monotonic clock)."""
        self._due: list[tuple[float, int, TickCallback]] = []
        """A heap of (due, tie-break, callback); entries that no longer match `_callbacks` are stale."""
        self._order = itertools.count()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._callbacks)

    def add(self, callback: TickCallback) -> None:
        self._schedule(callback, time.monotonic())
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="session-ticker")

    def discard(self, callback: TickCallback) -> None:
        self._callbacks.pop(callback, None)

    def wake(self, callback: TickCallback, in_s: float) -> None:
        """Call `callback` at the first tick `in_s` seconds from now, unless it is due sooner already."""
        due = self._callbacks.get(callback)
        at = time.monotonic() + in_s
        if due is not None and at < due:
            self._schedule(callback, at)

    def _schedule(self, callback: TickCallback, at: float) -> None:
        self._callbacks[callback] = at
        if at < math.inf:
            heapq.heappush(self._due, (at, next(self._order), callback))

    async def _run(self) -> None:
        try:
            while self._callbacks:
                await asyncio.sleep(self.period_s)
                now = time.monotonic()
                due_now: list[tuple[float, TickCallback]] = []
                while self._due and self._due[0][0] <= now:
                    at, _, callback = heapq.heappop(self._due)
                    if self._callbacks.get(callback) == at:  # else discarded, or rescheduled since
                        due_now.append((at, callback))
                for at, callback in due_now:
                    if self._callbacks.get(callback) != at:
                        continue  # discarded by an earlier callback this tick
                    try:
                        later = callback()
                    except Exception:
                        log.exception("session tick failed")
                        later = None
                    due = self._callbacks.get(callback)
                    after = now if later is None else now + max(later, 0.0)
                    if due is not None and (due == at or after < due):  # registered; not woken sooner
                        self._schedule(callback, after)
        finally:
            self._task = None
