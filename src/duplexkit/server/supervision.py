"""No task dies in silence: each task a session runs is started through `supervised`.

A supervised task that ends with an unexpected exception (not a cancellation) is handed to its
`on_failure` with the task's name; a session's runner logs it with the session id, counts it
(`duplexkit_task_failures_total{task}`) and ends that session with `internal_error` (close 1011), which
frees its slot; the rest of the server goes on (docs/reliability.md, "Supervision").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

TaskFailed = Callable[[str, BaseException], None]
"""What a supervised task's failure is handed to: the task's name and its exception."""


def supervised(coro: Coroutine[Any, Any, None], name: str, on_failure: TaskFailed) -> asyncio.Task[None]:
    """Run `coro` as a task named `name`; an exception it ends with goes to `on_failure`."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(lambda done: _report(done, on_failure))
    return task


def _report(task: asyncio.Task[None], on_failure: TaskFailed) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        on_failure(task.get_name(), exc)
