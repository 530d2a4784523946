"""Received server events and lenient readers for their fields.

The client talks to servers other than ours, which send shapes we do not, so incoming frames stay plain
dicts and every field is read defensively: a missing or mistyped field reads as `None`, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from duplexkit.protocol.errors import BENIGN_CODES

BENIGN_ERROR_CODES = frozenset(code.value for code in BENIGN_CODES)
"""Error codes that report a harmless race (an ack after the response settled, a tool's output after a
barge-in retired its call), not a failed session."""


@dataclass(frozen=True, slots=True)
class ReceivedEvent:
    """One server event as the client received it.

    `received_at` is the client's monotonic clock (`time.monotonic()`) at receipt; `media_ms` is where it
    was heard on the input timeline: its arrival on the stream's clock (the stream's start media time plus
    the time since the stream started; `DuplexClient.heard_at_ms`), not the end of the last append sent.
    `sent_ms` is that end: the media clock on the wire when it arrived (`None` where not recorded).
    """

    data: dict[str, Any]
    received_at: float
    media_ms: float
    sent_ms: float | None = None

    @property
    def type(self) -> str:
        value = self.data.get("type")
        return value if isinstance(value, str) else ""


def dig(data: Any, *path: str) -> Any:
    """`data[path[0]][path[1]]...`, or `None` as soon as a step is not a dict holding that key."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_ms(value: Any) -> float | None:
    """A finite, non-negative number (bool excluded) as float; anything else is `None`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def as_positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def text_marks(marks: Sequence[Any]) -> list[tuple[int, float]]:
    """The readable `(text_chars, audio_end_ms)` pairs of an `audio_text_marks` list."""
    out = []
    for mark in marks:
        chars = as_positive_int(mark.get("text_chars")) if isinstance(mark, dict) else None
        audio_ms = as_ms(mark.get("audio_end_ms")) if isinstance(mark, dict) else None
        if chars is not None and audio_ms is not None:
            out.append((chars, audio_ms))
    return out


def response_id_of(data: dict[str, Any]) -> str | None:
    """The response an event belongs to: its `response_id`, else `response.id`."""
    return as_str(data.get("response_id")) or as_str(dig(data, "response", "id"))


def failed_response_error(data: dict[str, Any]) -> dict[str, Any] | None:
    """The error of a `response.done` whose response `failed` (`status_details.error`: where OpenAI, and
    duplexkit, report a failure within a response, such as the model's step failing), else `None`."""
    if data.get("type") != "response.done" or dig(data, "response", "status") != "failed":
        return None
    error = dig(data, "response", "status_details", "error")
    return error if isinstance(error, dict) else None


def error_code_of(data: dict[str, Any]) -> str | None:
    """`error.code` (a failed response's, `failed_response_error`), or the top-level `code` of a flat
    error (vLLM-Omni's handshake errors)."""
    failed = failed_response_error(data)
    if failed is not None:
        return as_str(failed.get("code"))
    return as_str(dig(data, "error", "code")) or (
        as_str(data.get("code")) if isinstance(data.get("error"), str) else None
    )


def error_message_of(data: dict[str, Any]) -> str | None:
    """`error.message` (a failed response's too), or the flat error's `error` string."""
    failed = failed_response_error(data)
    if failed is not None:
        return as_str(failed.get("message"))
    error = data.get("error")
    return error if isinstance(error, str) else as_str(dig(data, "error", "message"))


def is_failure(data: dict[str, Any]) -> bool:
    """An `error` event, or a response that failed with an error, that means the session failed (every
    code but the benign ones)."""
    reported = data.get("type") == "error" or failed_response_error(data) is not None
    return reported and error_code_of(data) not in BENIGN_ERROR_CODES
