"""When have the replies to a commit settled? A Sans-I/O tracker fed with events and asked with `now`.

Settled means: the commit was acknowledged (`input_audio_buffer.committed`), the model decided after it
(a `response.created` or a `response.listen`), every response created before or after the commit is done,
and a quiet window passed with no reply activity. Acknowledgements are not activity: the `response.listen`
a server sends for every padded unit, and the answers to the client's own housekeeping
(`playback.acknowledged`, `session.heartbeat_ack`, `rate_limits.updated`, a benign `error`). So a committed
clip answered only by a model listen settles once the window after the acknowledgement has passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from duplexkit.client.events import ReceivedEvent, is_failure, response_id_of

NOT_ACTIVITY = frozenset(
    {"response.listen", "playback.acknowledged", "session.heartbeat_ack", "rate_limits.updated"}
)


def is_activity(data: dict[str, Any]) -> bool:
    """Whether an event is reply activity that restarts the quiet window."""
    kind = data.get("type")
    if kind in NOT_ACTIVITY:
        return False
    return kind != "error" or is_failure(data)


@dataclass(frozen=True, slots=True)
class DrainStatus:
    settled: bool
    failure: dict[str, Any] | None
    """The first `error` event that failed the session, if one arrived."""
    wake_at: float | None
    """When the answer changes if no event arrives first (`None`: only an event can change it)."""


class DrainTracker:
    """Tracks one commit: created when the commit is queued, fed every event received after that."""

    def __init__(self, committed_at: float, open_responses: Iterable[str]) -> None:
        self.commit_acknowledged = False
        self.decided = False
        self.open_responses = set(open_responses)
        self.last_activity = committed_at
        self.listens = 0
        self.failure: dict[str, Any] | None = None

    def observe(self, event: ReceivedEvent) -> None:
        data, kind = event.data, event.type
        if kind == "input_audio_buffer.committed":
            self.commit_acknowledged = True
        elif kind == "response.created":
            response_id = response_id_of(data)
            if response_id is not None:
                self.open_responses.add(response_id)
            self.decided = self.decided or self.commit_acknowledged
        elif kind == "response.listen":
            self.listens += 1
            self.decided = self.decided or self.commit_acknowledged
        elif kind == "response.done":
            self.open_responses.discard(response_id_of(data) or "")
        elif self.failure is None and is_failure(data):
            self.failure = data
        if is_activity(data):
            self.last_activity = max(self.last_activity, event.received_at)

    def poll(self, now: float, settle_s: float) -> DrainStatus:
        """Whether the replies have settled at `now` with a quiet window of `settle_s` seconds."""
        if self.failure is not None:
            return DrainStatus(False, self.failure, None)
        if not (self.commit_acknowledged and self.decided and not self.open_responses):
            return DrainStatus(False, None, None)
        quiet_until = self.last_activity + settle_s
        if now >= quiet_until:
            return DrainStatus(True, None, None)
        return DrainStatus(False, None, quiet_until)
