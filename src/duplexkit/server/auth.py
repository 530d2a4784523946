"""API-key checks for the WebSocket handshake: a bearer header or the browsers' subprotocol form."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

SUBPROTOCOL_KEY_PREFIX = "openai-insecure-api-key."


def presented_keys(authorization: str | None, subprotocols: Iterable[str]) -> list[str]:
    """Every key the client offered: `Authorization: Bearer <key>` and `openai-insecure-api-key.<key>`."""
    keys = []
    if authorization and authorization.lower().startswith("bearer "):
        keys.append(authorization[7:].strip())
    keys.extend(
        p[len(SUBPROTOCOL_KEY_PREFIX) :] for p in subprotocols if p.startswith(SUBPROTOCOL_KEY_PREFIX)
    )
    return keys


def is_authorized(allowed: frozenset[str], offered: Iterable[str]) -> bool:
    """True when no keys are configured, or an offered key matches one (compared in constant time)."""
    if not allowed:
        return True
    matched = False
    for key in offered:
        for candidate in allowed:
            matched |= hmac.compare_digest(key.encode(), candidate.encode())
    return matched
