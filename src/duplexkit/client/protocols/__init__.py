"""Client protocol adapters: one module per protocol, one interface (`base.ProtocolAdapter`).

`duplex` (ours and vLLM-Omni's), `openai` / `openai-beta` (OpenAI-Realtime-style servers), `moshi`
(the Moshi binary protocol), `webrtc` (a WebRTC call to a calls endpoint, through `client.webrtc`).
`protocol_for` picks one by name, or by the URL when the name is `auto`.
"""

from __future__ import annotations

import urllib.parse

from duplexkit.client.protocols.base import ProtocolAdapter, Wire
from duplexkit.client.protocols.duplex import DuplexProtocol
from duplexkit.client.protocols.moshi import MoshiProtocol
from duplexkit.client.protocols.openai import OpenAIBetaProtocol, OpenAIProtocol
from duplexkit.client.protocols.webrtc import WebRTCProtocol

PROTOCOLS: dict[str, type[ProtocolAdapter]] = {
    cls.name: cls
    for cls in (DuplexProtocol, OpenAIProtocol, OpenAIBetaProtocol, MoshiProtocol, WebRTCProtocol)
}
PROTOCOL_CHOICES = ("auto", *PROTOCOLS)


def detect_protocol(url: str) -> str:
    """`auto`: the URL path decides where it is unambiguous (`/api/chat` is Moshi's), else `duplex`."""
    path = urllib.parse.urlsplit(url).path.rstrip("/")
    return "moshi" if path.endswith("/api/chat") else "duplex"


def protocol_for(name: str, url: str) -> ProtocolAdapter:
    """A fresh adapter (they hold per-connection codec state) for `name`; raises `ValueError` if unknown."""
    resolved = detect_protocol(url) if name == "auto" else name
    if resolved not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; expected one of {', '.join(PROTOCOL_CHOICES)}")
    return PROTOCOLS[resolved]()


__all__ = ["PROTOCOLS", "PROTOCOL_CHOICES", "ProtocolAdapter", "Wire", "detect_protocol", "protocol_for"]
