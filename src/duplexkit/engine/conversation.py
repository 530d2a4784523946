"""The conversation: its items in order, each placed where it entered on the input media clock, and which
of them the user's speech is (`UserSpeech`).

OpenAI's contract places an item after `previous_item_id`; a duplex session also places the user's speech
where it was said, however late its transcript completes (before the reply the model opened after it).
Sans-I/O: no clock, no I/O; a refusal is a `ProtocolError` with its code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from duplexkit.engine.decisions import Transcribed
from duplexkit.engine.tools import check_arguments
from duplexkit.protocol import server_events as se
from duplexkit.protocol.errors import ErrorCode, ProtocolError

MAX_CLIENT_ITEMS = 1024
"""Items a client may hold in one conversation (`conversation.item.create`); a deleted one frees its place."""
MAX_CLIENT_ITEM_BYTES = 4 * 1024 * 1024
"""Their JSON size in all: a client's items are context the model carries, and memory the session holds
for its whole life, so a client that sends items without end is refused (`conversation_too_large`), as
input audio is by `input_backpressure`. The items the session makes itself (speech, replies) are not
counted: they grow only with the conversation's own time."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a client's item goes (`Conversation.place`), and its size against the client's bounds."""

    at: int
    """Its index in the conversation."""
    size: int
    """Its JSON size in bytes."""


class Conversation:
    """The session's items, and where each entered the conversation on the input media clock (a reply:
    the end of the unit it opened at)."""

    def __init__(self) -> None:
        self._items: list[se.ConversationItem] = []
        self._entered_ms: dict[str, float] = {}
        self._client_bytes: dict[str, int] = {}
        """The size of each item a client added (`add_client`), by id."""

    def __iter__(self) -> Iterator[se.ConversationItem]:
        return iter(self._items)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._entered_ms

    def append(self, item: se.ConversationItem, entered_ms: float) -> str | None:
        """Add `item` at the end; the id of the item before it."""
        previous = self._items[-1].id if self._items else None
        self._items.append(item)
        self._entered_ms[item.id] = entered_ms
        return previous

    def insert_said(self, item: se.ConversationItem, said_ms: float) -> str | None:
        """Add `item`, said up to `said_ms`, before the items that entered at or after that time (the reply
        to it among them); the id of the item before it."""
        at = len(self._items)
        while at and self._entered_ms[self._items[at - 1].id] >= said_ms:
            at -= 1
        return self.insert(at, item, said_ms)

    def place(self, item: se.ConversationItem, previous_item_id: str | None) -> Placement:
        """Where a client's item goes: after `previous_item_id` (`root`: first; `None`: last). Refused: an id
        in use (`item_create_duplicate_item_id`, OpenAI's code, which LiveKit's item sync takes as "already
        there"), an unknown `previous_item_id` (`unknown_item`), one past the client's bounds
        (`MAX_CLIENT_ITEMS`, `MAX_CLIENT_ITEM_BYTES`: `conversation_too_large`). Once added (`add_client`)
        it counts against those bounds until it is deleted."""
        if item.id in self:
            raise ProtocolError(
                ErrorCode.ITEM_CREATE_DUPLICATE_ITEM_ID, f"item {item.id!r} already exists", param="item.id"
            )
        size = len(item.model_dump_json(exclude_none=True))
        held = sum(self._client_bytes.values())
        if len(self._client_bytes) >= MAX_CLIENT_ITEMS or held + size > MAX_CLIENT_ITEM_BYTES:
            raise ProtocolError(
                ErrorCode.CONVERSATION_TOO_LARGE,
                f"the client's items would exceed {MAX_CLIENT_ITEMS} items or {MAX_CLIENT_ITEM_BYTES} bytes "
                f"(held: {len(self._client_bytes)} items, {held} bytes; this one: {size}); delete some first",
                param="item",
            )
        if previous_item_id is None:
            return Placement(len(self._items), size)
        if previous_item_id == "root":
            return Placement(0, size)
        for index, known in enumerate(self._items):
            if known.id == previous_item_id:
                return Placement(index + 1, size)
        raise ProtocolError(
            ErrorCode.UNKNOWN_ITEM, f"no conversation item {previous_item_id!r}", param="previous_item_id"
        )

    def add_client(self, placed: Placement, item: se.ConversationItem, entered_ms: float) -> str | None:
        """Add a client's item where `place` put it, counted against the client's bounds; the id of the
        item before it."""
        self._client_bytes[item.id] = placed.size
        return self.insert(placed.at, item, entered_ms)

    def insert(self, at: int, item: se.ConversationItem, entered_ms: float) -> str | None:
        """Add `item` at index `at`; the id of the item before it."""
        self._items.insert(at, item)
        self._entered_ms[item.id] = entered_ms
        return self._items[at - 1].id if at else None

    def get(self, item_id: str, unknown: ErrorCode = ErrorCode.UNKNOWN_ITEM) -> se.ConversationItem:
        """The item `item_id`, else a ProtocolError coded `unknown` (a retrieval says OpenAI's code)."""
        for item in self._items:
            if item.id == item_id:
                return item
        raise ProtocolError(unknown, f"no conversation item {item_id!r}", param="item_id")

    def replace(self, item: se.ConversationItem) -> None:
        """The item of the same id becomes `item` (its place is kept)."""
        self._items = [item if known.id == item.id else known for known in self._items]

    def delete(self, item_id: str) -> None:
        self._items.remove(self.get(item_id))
        del self._entered_ms[item_id]
        self._client_bytes.pop(item_id, None)


def client_item(raw: dict[str, Any], default_id: str) -> se.ConversationItem:
    """A client's `conversation.item.create` item, checked for its type: a message needs a `role`; a
    `function_call` a `call_id`, a `name` and JSON-object `arguments`; a `function_call_output` a `call_id`
    and a string `output`."""
    kind = raw.get("type", "message")
    code = (
        {
            "message": ErrorCode.INVALID_VALUE,
            "function_call_output": ErrorCode.INVALID_FUNCTION_CALL_OUTPUT,
        }.get(kind, ErrorCode.INVALID_FUNCTION_CALL)
        if isinstance(kind, str)
        else ErrorCode.INVALID_VALUE  # a type that is no name at all (an object, a list: unhashable)
    )
    try:
        item = se.ConversationItem.model_validate({"id": default_id, **raw})
    except ValidationError as exc:
        where = exc.errors()[0]["loc"][:1]  # the item's field at fault (`item.output`), when there is one
        param = ".".join(["item", *map(str, where)])
        raise ProtocolError(code, f"invalid conversation item: {exc}", param=param) from None
    required = {
        "message": ("role",),
        "function_call": ("call_id", "name", "arguments"),
        "function_call_output": ("call_id", "output"),
    }[item.type]
    missing = [name for name in required if getattr(item, name) is None]
    if missing:
        raise ProtocolError(
            code, f"a {item.type} item needs {', '.join(missing)}", param=f"item.{missing[0]}"
        )
    if item.type == "function_call":
        assert item.arguments is not None
        check_arguments(item.arguments)
    if item.type != "message":
        item.content = None
    return item


class UserSpeech:
    """Which user item the user's speech is: the one server VAD hears now (`speaking`), the latest one
    announced (server VAD's, a commit's) whose transcript has not come, and the one a transcript in
    progress names. Its events say so; its items enter the conversation."""

    def __init__(self, conversation: Conversation, new_id: Callable[[str], str]) -> None:
        self._conversation = conversation
        self._new_id = new_id
        self.speaking: str | None = None
        """Server VAD's item while it hears the user (from speech start to speech stop)."""
        self._unheard: str | None = None
        self._transcribing: str | None = None

    def started(self, audio_start_ms: float) -> se.InputAudioBufferSpeechStarted:
        self.speaking = self._unheard = self._new_id("item")
        return se.InputAudioBufferSpeechStarted(audio_start_ms=round(audio_start_ms), item_id=self.speaking)

    def stopped(self, audio_end_ms: float) -> se.InputAudioBufferSpeechStopped:
        """Speech stopped: its item (server VAD's, else a new one) is the one a commit now makes."""
        item_id, self.speaking = self.speaking or self._new_id("item"), None
        return se.InputAudioBufferSpeechStopped(audio_end_ms=round(audio_end_ms), item_id=item_id)

    def not_heard(self) -> None:
        """Server VAD is off (turned off, or it broke): nobody is heard speaking."""
        self.speaking = None

    def committed(self, item_id: str | None, media_ms: float) -> list[se.ServerEventBase]:
        """The buffered input becomes user item `item_id` (server VAD's speech names it; else a new one),
        at the end of the conversation, awaiting its transcript."""
        item_id = item_id or self._new_id("item")
        item = se.ConversationItem(id=item_id, role="user", content=[se.ItemContent(type="input_audio")])
        previous = self._conversation.append(item, media_ms)
        self._unheard = item_id
        return [
            se.InputAudioBufferCommitted(item_id=item_id, previous_item_id=previous, audio_end_ms=media_ms),
            se.ConversationItemAdded(item=item, previous_item_id=previous),
            se.ConversationItemDone(item=item, previous_item_id=previous),
        ]

    def transcribed(self, heard: Transcribed, media_ms: float) -> list[se.ServerEventBase]:
        """Input transcription events for the utterance being heard. They name the user item of the
        speech: the latest one announced still without a transcript, else a new user item added when the
        transcript completes. That item goes where the speech ended (`heard.speech_end_ms`), before the
        reply the model opened after it, however late the recogniser finished: `previous_item_id` names
        the item before it."""
        if self._transcribing is None:
            self._transcribing = self._unheard or self._new_id("item")
        item_id = self._transcribing
        if not heard.final:
            return [se.InputAudioTranscriptionDelta(item_id=item_id, delta=heard.text)]
        self._transcribing = None
        if self._unheard == item_id:
            self._unheard = None
        events: list[se.ServerEventBase] = []
        known = [item for item in self._conversation if item.id == item_id]
        if known and known[0].content:
            known[0].content[0].transcript = heard.text
        else:
            item = se.ConversationItem(
                id=item_id, role="user", content=[se.ItemContent(type="input_audio", transcript=heard.text)]
            )
            said_ms = media_ms if heard.speech_end_ms is None else heard.speech_end_ms
            previous = self._conversation.insert_said(item, said_ms)
            events.append(se.ConversationItemAdded(item=item, previous_item_id=previous))
            events.append(se.ConversationItemDone(item=item, previous_item_id=previous))
        events.append(
            se.InputAudioTranscriptionCompleted(
                item_id=item_id,
                transcript=heard.text,
                usage=se.TranscriptionUsage(seconds=round(heard.audio_seconds, 3)),
            )
        )
        return events
