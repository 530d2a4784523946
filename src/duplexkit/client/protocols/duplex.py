"""`duplex`: our protocol and vLLM-Omni's duplex contract (`?duplex=1`): events go out as they are."""

from __future__ import annotations

import json
from typing import Any

from duplexkit.client.connection import build_url
from duplexkit.client.protocols.base import ProtocolAdapter, Wire


class DuplexProtocol(ProtocolAdapter):
    name = "duplex"

    def url(self, url: str, *, model: str | None) -> str:
        return build_url(url, model=model)

    def encode(self, event: dict[str, Any]) -> list[Wire]:
        return [json.dumps(event)]

    def decode(self, message: Wire) -> list[dict[str, Any]] | None:
        try:
            data = json.loads(message)
        except ValueError:
            return None
        return [data] if isinstance(data, dict) else None
