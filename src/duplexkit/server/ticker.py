"""One timer for every session's passage-of-time tick.

Each session's engine must hear the time every `tick_s` (idle timeout, a reply continuing past its input).
A sleeping task per session costs a wake-up per session per tick: at 1,000 sessions and 10 Hz that was
a tenth of a core doing nothing. One task wakes instead and calls every registered session in turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("duplexkit.server")


class SessionTicker:
    """Calls each registered callback every `period_s`, in registration order, from one task.

    The task starts with the first callback and ends when the last is discarded. A callback that raises
    is logged and stays registered; the others are still called.
    """

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._callbacks: dict[Callable[[], None], None] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._callbacks)

    def add(self, callback: Callable[[], None]) -> None:
        self._callbacks[callback] = None
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="session-ticker")

    def discard(self, callback: Callable[[], None]) -> None:
        self._callbacks.pop(callback, None)

    async def _run(self) -> None:
        try:
            while self._callbacks:
                await asyncio.sleep(self.period_s)
                for callback in list(self._callbacks):
                    if callback in self._callbacks:  # not discarded by an earlier callback this tick
                        try:
                            callback()
                        except Exception:
                            log.exception("session tick failed")
        finally:
            self._task = None
