"""Where a client connects and what the server says it can do."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

from duplexkit.client.events import as_positive_int, dig
from duplexkit.protocol.units import UnitGrid


def build_url(url: str, *, model: str | None = None) -> str:
    """The WebSocket URL for `url`: http(s) becomes ws(s), an empty path becomes `/v1/realtime`, and the
    query gains `model` (when given), `duplex=1` and `autostart=0`. Raises `ValueError` for other schemes."""
    parts = urllib.parse.urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"expected a ws://, wss://, http:// or https:// URL with a host, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else "/v1/realtime"
    ours = {"duplex": "1", "autostart": "0"} | ({"model": model} if model else {})
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k not in ours]
    query += list(ours.items())
    return urllib.parse.urlunsplit((scheme, parts.netloc, path, urllib.parse.urlencode(query), ""))


@dataclass(frozen=True, slots=True)
class ServerCapabilities:
    """What the server advertised in `session.capabilities` (defaults where it said nothing)."""

    chunk_period_ms: int = 1000
    first_unit_ms: int | None = None
    input_sample_rate_hz: int = 16_000
    output_sample_rate_hz: int = 24_000
    advertised: bool = False
    """Whether the server sent a `capabilities` object at all."""

    @classmethod
    def from_session(cls, session: Any) -> ServerCapabilities:
        caps = dig(session, "capabilities")
        if not isinstance(caps, dict):
            return cls()
        return cls(
            chunk_period_ms=as_positive_int(caps.get("chunk_period_ms")) or 1000,
            first_unit_ms=as_positive_int(caps.get("first_unit_ms")),
            input_sample_rate_hz=as_positive_int(caps.get("input_sample_rate_hz")) or 16_000,
            output_sample_rate_hz=as_positive_int(caps.get("output_sample_rate_hz")) or 24_000,
            advertised=True,
        )

    @property
    def grid(self) -> UnitGrid:
        return UnitGrid(self.chunk_period_ms, self.first_unit_ms)
