"""The Moshi protocol (Kyutai Moshi, NVIDIA PersonaPlex): binary frames, Ogg-Opus audio at 24 kHz.

Every frame is one binary WebSocket message whose first byte is its kind: 0 handshake (server → client
when the session is ready: u32 protocol version + u32 model version, little endian), 1 audio (Ogg pages of
Opus), 2 text (a UTF-8 text piece, server → client), 3 control (start, end turn, pause, restart), 4 metadata
(JSON), 5 error (UTF-8), 6 ping. There is no commit and no listen event: the server streams one continuous
output, about one 80 ms frame per input frame, silence while its model listens.

Sans-I/O: framing, Ogg page splitting and the Opus codec (`sphn`, Kyutai's own Ogg-Opus streaming codec);
both the `/api/chat` server and the client adapter use it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import sphn

SAMPLE_RATE_HZ = 24_000
FRAME_SAMPLES = 1_920
"""One Moshi frame: 80 ms at 24 kHz."""
FRAME_MS = 80
PROTOCOL_VERSION = 0

Float32Array = npt.NDArray[np.float32]


class Kind(IntEnum):
    HANDSHAKE = 0
    AUDIO = 1
    TEXT = 2
    CONTROL = 3
    METADATA = 4
    ERROR = 5
    PING = 6


class Control(IntEnum):
    START = 0
    END_TURN = 1
    PAUSE = 2
    RESTART = 3


class MoshiFrameError(ValueError):
    """A frame that is not valid Moshi protocol; the message says why (sent back as a kind 5 frame)."""


def frame(kind: Kind, payload: bytes = b"") -> bytes:
    return bytes([kind]) + payload


def handshake(model_version: int = 0) -> bytes:
    return frame(Kind.HANDSHAKE, struct.pack("<II", PROTOCOL_VERSION, model_version))


def parse_handshake(payload: bytes) -> tuple[int, int]:
    """`(protocol_version, model_version)`; raises `MoshiFrameError` for a short payload."""
    if len(payload) < 8:
        raise MoshiFrameError(f"handshake payload is {len(payload)} bytes; expected 8")
    versions: tuple[int, int] = struct.unpack("<II", payload[:8])
    return versions


def parse_frame(data: bytes) -> tuple[Kind, bytes]:
    """Split a binary message into its kind and payload; raises `MoshiFrameError` for an unknown kind."""
    if not data:
        raise MoshiFrameError("empty frame: the first byte must be the message kind")
    try:
        return Kind(data[0]), data[1:]
    except ValueError:
        raise MoshiFrameError(f"unknown message kind {data[0]}; kinds are 0-6") from None


class OggPageSplitter:
    """Reassembles a byte stream into whole Ogg pages.

    A sender may cut pages across frames; whatever is not a page (no `OggS` where one must start) is
    skipped up to the next `OggS` and reported, so one bad frame does not poison the stream.
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> tuple[list[bytes], str | None]:
        """Add bytes; return the pages now complete, and what was wrong when bytes had to be dropped."""
        self._buffer += data
        pages: list[bytes] = []
        skipped = 0
        while self._buffer:
            if not self._buffer.startswith(b"OggS"[: len(self._buffer)]):
                resync = self._buffer.find(b"OggS", 1)
                cut = len(self._buffer) if resync < 0 else resync
                skipped += cut
                self._buffer = self._buffer[cut:]
                continue
            size = _page_size(self._buffer)
            if size is None or len(self._buffer) < size:
                break
            pages.append(self._buffer[:size])
            self._buffer = self._buffer[size:]
        problem = f"{skipped} bytes of audio were not Ogg pages and were dropped" if skipped else None
        return pages, problem


def _page_size(data: bytes) -> int | None:
    """The size of the page `data` starts with, or `None` until its header is complete."""
    if len(data) < 27:
        return None
    segments = data[26]
    if len(data) < 27 + segments:
        return None
    return 27 + segments + sum(data[27 : 27 + segments])


class OpusEncoder:
    """Float PCM at 24 kHz in, Ogg-Opus bytes out, in whole 80 ms frames (the rest waits for more)."""

    def __init__(self) -> None:
        self._writer: Any = sphn.OpusStreamWriter(SAMPLE_RATE_HZ)
        self._pending: Float32Array = np.zeros(0, dtype=np.float32)

    def encode(self, pcm: npt.ArrayLike) -> bytes:
        samples = np.concatenate([self._pending, np.asarray(pcm, dtype=np.float32).reshape(-1)])
        whole = len(samples) - len(samples) % FRAME_SAMPLES
        out = b"".join(
            bytes(self._writer.append_pcm(samples[i : i + FRAME_SAMPLES]))
            for i in range(0, whole, FRAME_SAMPLES)
        )
        self._pending = samples[whole:]
        return out


class OpusDecoder:
    """Ogg-Opus bytes in (pages may be cut anywhere), float PCM at 24 kHz out."""

    def __init__(self) -> None:
        self._pages = OggPageSplitter()
        self._reader: Any = sphn.OpusStreamReader(SAMPLE_RATE_HZ)

    def decode(self, data: bytes) -> tuple[Float32Array, str | None]:
        """The audio of the pages now complete, and what was wrong when some bytes were not Ogg or a page
        could not be decoded (dropped: the codec's reader refuses it, and every page after it, so a fresh
        one takes the stream on from the next page)."""
        pages, problem = self._pages.feed(data)
        chunks = []
        for page in pages:
            try:
                chunks.append(np.asarray(self._reader.append_bytes(page), dtype=np.float32).reshape(-1))
            except ValueError as exc:  # a page that is Ogg in shape only ("unsupported ogg version 2")
                self._reader = sphn.OpusStreamReader(SAMPLE_RATE_HZ)
                problem = f"an Ogg page could not be decoded and was dropped: {exc}"
        return (np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)), problem


@dataclass(frozen=True, slots=True)
class QueryMapping:
    """Moshi/PersonaPlex query parameters as session settings: what has a meaning here, and what not."""

    session: dict[str, Any]
    """`session.update` fields."""
    ignored: list[str]
    """Parameters without a meaning on this server (sampling knobs of Moshi's own decoder, unknown keys)."""


_FLOAT_PARAMS = {"text_temperature": "temperature"}
_TEXT_PARAMS = {"text_prompt": "instructions"}
_STRICT_PARAMS = {"voice_prompt": "voice_prompt"}
"""Parameters a client asks for by name, as `extra_body` keys: a model that has them must honour them or
refuse the session (PersonaPlex's client sends `voice_prompt=NATF0.pt`; never silently ignored)."""
_DECODER_PARAMS = {"audio_temperature": "temp", "text_topk": "top_k_text", "audio_topk": "top_k"}
"""Moshi's decoder knobs beyond the text temperature, as `extra_body` keys (the `moshi` model reads them;
other models ignore them)."""


def map_query(query: dict[str, str]) -> QueryMapping:
    """Map query parameters onto session settings; unknown or unusable values are listed, never fatal."""
    session: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in query.items():
        if key in _DECODER_PARAMS:
            number = _decoder_value(key, value)
            if number is None:
                ignored.append(key)
            else:
                session.setdefault("extra_body", {})[_DECODER_PARAMS[key]] = number
        elif key in _FLOAT_PARAMS:
            try:
                number = float(value)
            except ValueError:
                ignored.append(key)
                continue
            if 0.0 <= number <= 2.0:
                session[_FLOAT_PARAMS[key]] = number
            else:
                ignored.append(key)
        elif key in _TEXT_PARAMS and value:
            session[_TEXT_PARAMS[key]] = value
        elif key in _STRICT_PARAMS and value:
            session.setdefault("extra_body", {})[_STRICT_PARAMS[key]] = value
        else:
            ignored.append(key)
    return QueryMapping(session, ignored)


def _decoder_value(key: str, value: str) -> float | int | None:
    """A usable decoder knob's value (a temperature 0-2, a top-k of at least 1), else `None`."""
    try:
        if key == "audio_temperature":
            number = float(value)
            return number if 0.0 <= number <= 2.0 else None
        count = int(value)
    except ValueError:
        return None
    return count if count >= 1 else None
