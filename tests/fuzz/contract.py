"""The contract's event order, checked event by event: what every fuzzer holds a session's output to.

`ContractChecker.feed` takes each server event a session sends, in order (a typed event of
`protocol.server_events`, or the JSON object a socket carried, GA names), and records what breaks the
contract (docs/protocol.md):

* each `response.created` is followed by exactly one `response.done` for it, and at most one response is
  active at a time;
* no event names a response after its `response.done` (a `playback.acknowledged`, the answer to a client's
  report, and the WebRTC edge's `output_audio_buffer.*` excepted);
* `response.output_item.added`/`.done` pair up, and so do `response.content_part.added`/`.done` inside
  them; a delta or a `*.done` of content comes inside its open part (a call's arguments inside its item);
  a response is done only once every item and part it opened is;
* every `error` carries a code of the one code table;
* nothing follows `session.closed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from duplexkit.protocol.errors import ErrorCode

CODES = frozenset(code.value for code in ErrorCode)

_NOT_OF_THE_RESPONSE = frozenset(
    {
        "playback.acknowledged",
        "output_audio_buffer.started",
        "output_audio_buffer.stopped",
        "output_audio_buffer.cleared",
        "rate_limits.updated",
    }
)
_CONTENT = frozenset(
    {
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
        "response.output_text.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.output_text.done",
    }
)
_CALL = frozenset({"response.function_call_arguments.delta", "response.function_call_arguments.done"})


def _get(event: Any, *path: str) -> Any:
    value = event
    for name in path:
        if value is None:
            return None
        value = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
    return value


@dataclass
class ContractChecker:
    """One session's events against the contract; `violations` says what broke it, in order."""

    violations: list[str] = field(default_factory=list)
    active: str | None = None
    created: int = 0
    done: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    closed: bool = False
    _done_ids: set[str] = field(default_factory=set)
    _items: dict[str, str] = field(default_factory=dict)
    """Open output items of the active response: item id → its response."""
    _parts: set[str] = field(default_factory=set)
    """Items of the active response whose content part is open."""

    def feed(self, event: Any) -> None:
        kind = str(_get(event, "type"))
        if self.closed:
            self._broken(f"{kind} after session.closed")
        if kind == "error":
            code = _get(event, "error", "code")
            self.errors[str(code)] = self.errors.get(str(code), 0) + 1
            if code not in CODES:
                self._broken(f"an error without a code of the table: {code!r}")
            return
        if kind == "session.closed":
            self.closed = True
            return
        if kind == "response.created":
            self._created(str(_get(event, "response", "id")))
            return
        if kind == "response.done":
            self._done(str(_get(event, "response", "id")))
            return
        response_id = _get(event, "response_id")
        if response_id is None or kind in _NOT_OF_THE_RESPONSE:
            return
        if response_id != self.active:
            self._broken(f"{kind} for {response_id}, which is not active (active: {self.active})")
            return
        if kind == "response.output_item.added":
            item_id = str(_get(event, "item", "id"))
            if item_id in self._items:
                self._broken(f"output item {item_id} added twice")
            self._items[item_id] = response_id
        elif kind == "response.output_item.done":
            item_id = str(_get(event, "item", "id"))
            if self._items.pop(item_id, None) is None:
                self._broken(f"output item {item_id} done but not open")
            if item_id in self._parts:
                self._broken(f"output item {item_id} done before its content part")
        elif kind == "response.content_part.added":
            item_id = str(_get(event, "item_id"))
            if item_id not in self._items:
                self._broken(f"content part of {item_id}, which is not an open output item")
            if item_id in self._parts:
                self._broken(f"content part of {item_id} added twice")
            self._parts.add(item_id)
        elif kind == "response.content_part.done":
            item_id = str(_get(event, "item_id"))
            if item_id not in self._parts:
                self._broken(f"content part of {item_id} done but not open")
            self._parts.discard(item_id)
        elif kind in _CONTENT:
            if _get(event, "item_id") not in self._parts:
                self._broken(f"{kind} outside an open content part")
        elif kind in _CALL and _get(event, "item_id") not in self._items:
            self._broken(f"{kind} outside an open output item")

    def feed_all(self, events: list[Any]) -> None:
        for event in events:
            self.feed(event)

    def _created(self, response_id: str) -> None:
        self.created += 1
        if self.active is not None:
            self._broken(f"response {response_id} created while {self.active} is active")
        if response_id in self._done_ids:
            self._broken(f"response {response_id} created again after its done")
        self.active = response_id
        self._items.clear()
        self._parts.clear()

    def _done(self, response_id: str) -> None:
        self.done += 1
        if response_id != self.active:
            self._broken(f"response.done for {response_id}, which is not active (active: {self.active})")
        if self._items or self._parts:
            self._broken(f"response {response_id} done with items {sorted(self._items)} still open")
        self._done_ids.add(response_id)
        self.active = None
        self._items.clear()
        self._parts.clear()

    def _broken(self, what: str) -> None:
        self.violations.append(what)
