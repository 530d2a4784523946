"""The wire protocol: typed events in both directions, error codes, audio codecs and unit math. No I/O."""

from duplexkit.protocol.client_events import CLIENT_EVENT_TYPES, ClientEvent, ClientEventBase
from duplexkit.protocol.errors import ERROR_SPECS, ErrorCode, ProtocolError
from duplexkit.protocol.server_events import SERVER_EVENT_TYPES, ServerEvent, ServerEventBase, error_event
from duplexkit.protocol.wire import MAX_EVENT_BYTES, ServerEventStamper, parse_client_event

__all__ = [
    "CLIENT_EVENT_TYPES",
    "ERROR_SPECS",
    "MAX_EVENT_BYTES",
    "SERVER_EVENT_TYPES",
    "ClientEvent",
    "ClientEventBase",
    "ErrorCode",
    "ProtocolError",
    "ServerEvent",
    "ServerEventBase",
    "ServerEventStamper",
    "error_event",
    "parse_client_event",
]
