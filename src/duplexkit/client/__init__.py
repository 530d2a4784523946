"""The duplex client: drive any duplex realtime server and measure what comes back.

`DuplexClient` connects, configures, streams audio on a media clock, commits, pads silence, drains and
closes, every wait bounded; `converse` runs that whole lifecycle within `SessionBounds`. `EventCollector`
turns the events it receives into per-response and per-session timing (each value labelled with its
clock), timed sentences and the output audio.
"""

from duplexkit.client.client import (
    CapacityTimeout,
    ConfigureTimeout,
    ConnectionLost,
    DuplexClient,
    SessionError,
)
from duplexkit.client.collector import (
    CLIENT_SOURCES,
    COMMIT_SOURCE,
    CREATED_SOURCE,
    SERVER_SOURCE,
    STREAM_SOURCE,
    UNANCHORED_SOURCE,
    EventCollector,
    MetricsSource,
    ResponseMetrics,
    SessionMetrics,
    dump_events,
)
from duplexkit.client.connection import ServerCapabilities, build_url
from duplexkit.client.drain import DrainTracker
from duplexkit.client.events import ReceivedEvent
from duplexkit.client.pacing import DeadlinePacer, PacingReport, Slot
from duplexkit.client.results import CloseResult, DrainResult, Pace, StreamReport
from duplexkit.client.sentences import SentenceBuilder, TimedSentence
from duplexkit.client.session import (
    Conversation,
    SessionBounds,
    SessionProgress,
    Stage,
    close_session,
    converse,
)
from duplexkit.client.tools import ToolBox, ToolCall, ToolCallRecord, load_tools_file

__all__ = [
    "CLIENT_SOURCES",
    "COMMIT_SOURCE",
    "CREATED_SOURCE",
    "SERVER_SOURCE",
    "STREAM_SOURCE",
    "UNANCHORED_SOURCE",
    "CapacityTimeout",
    "CloseResult",
    "ConfigureTimeout",
    "ConnectionLost",
    "Conversation",
    "DeadlinePacer",
    "DrainResult",
    "DrainTracker",
    "DuplexClient",
    "EventCollector",
    "MetricsSource",
    "Pace",
    "PacingReport",
    "ReceivedEvent",
    "ResponseMetrics",
    "SentenceBuilder",
    "ServerCapabilities",
    "SessionBounds",
    "SessionError",
    "SessionMetrics",
    "SessionProgress",
    "Slot",
    "Stage",
    "StreamReport",
    "TimedSentence",
    "ToolBox",
    "ToolCall",
    "ToolCallRecord",
    "build_url",
    "close_session",
    "converse",
    "dump_events",
    "load_tools_file",
]
