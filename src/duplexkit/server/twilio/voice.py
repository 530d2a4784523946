"""Twilio's HTTP side, pure: the TwiML that connects a call to the stream, and request signatures.

Twilio asks the number's voice webhook (`POST /v1/twilio/voice`) what to do with a call; the answer is TwiML
that connects it, both ways, to this server's Media Stream (`<Connect><Stream url="wss://HOST/v1/twilio/
stream">`). Twilio signs each request with the account's auth token (`X-Twilio-Signature`): base64 of
HMAC-SHA1 over the full URL it requested followed by each POST parameter's name and value, sorted by name
(no parameters for the stream's WebSocket handshake). Twilio's own validator also accepts the URL with its
default port added or removed; so does this one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from xml.sax.saxutils import quoteattr

VOICE_PATH = "/v1/twilio/voice"
STREAM_PATH = "/v1/twilio/stream"


@dataclass(frozen=True)
class TwilioConfig:
    """`public_url`: the server's address as Twilio reaches it (`https://voice.example.com`; the URLs Twilio
    signs and the stream URL in TwiML derive from it; else from the request's `Host`). `auth_token`: the
    Twilio account's auth token: with it, requests without a valid `X-Twilio-Signature` are refused.
    `session`: the session settings every call starts with (a `session` object), before the call's own
    `customParameters`."""

    public_url: str | None = None
    auth_token: str | None = None
    session: Mapping[str, Any] = field(default_factory=dict)


def signature(auth_token: str, url: str, params: Mapping[str, Sequence[str]]) -> str:
    """Twilio's request signature of `url` with POST `params` (name → values)."""
    data = url + "".join(name + value for name in sorted(params) for value in sorted(params[name]))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_valid(auth_token: str, url: str, params: Mapping[str, Sequence[str]], presented: str) -> bool:
    """Whether `presented` is Twilio's signature of this request (the URL as given, or with its default
    port added or removed)."""
    return any(
        hmac.compare_digest(signature(auth_token, candidate, params), presented)
        for candidate in _variants(url)
    )


def _variants(url: str) -> list[str]:
    parts = urlsplit(url)
    default = {"https": 443, "wss": 443, "http": 80, "ws": 80}.get(parts.scheme)
    host = parts.hostname or ""
    if default is None or not host:
        return [url]
    bare = urlunsplit(parts._replace(netloc=host))
    with_port = urlunsplit(parts._replace(netloc=f"{host}:{parts.port or default}"))
    return [url] + [v for v in (bare, with_port) if v != url]


def public_base(config: TwilioConfig, headers: Mapping[str, str]) -> str:
    """`https://host` as Twilio reaches the server: the configured public URL, else the request's `Host`
    (with `X-Forwarded-Proto` when a proxy says so, else https: Twilio only calls https and wss)."""
    if config.public_url:
        return config.public_url.rstrip("/")
    scheme = headers.get("x-forwarded-proto", "https").split(",")[0].strip() or "https"
    return f"{scheme}://{headers.get('host', 'localhost')}"


def websocket_url(base: str, path: str) -> str:
    """`base` (http or https) as a WebSocket URL of `path`."""
    parts = urlsplit(base)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + path, "", ""))


def connect_stream(stream_url: str, parameters: Mapping[str, str] | None = None) -> str:
    """TwiML connecting the call both ways to the Media Stream at `stream_url`, with `parameters` as the
    stream's `<Parameter>`s (they arrive in the `start` message's `customParameters`)."""
    inner = "".join(
        f"<Parameter name={quoteattr(name)} value={quoteattr(value)}/>"
        for name, value in (parameters or {}).items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect><Stream url={quoteattr(stream_url)}>{inner}</Stream></Connect></Response>"
    )


BUSY = '<?xml version="1.0" encoding="UTF-8"?><Response><Reject reason="busy"/></Response>'
"""TwiML for a call that finds every session slot taken: the caller hears a busy signal."""
