"""The duplex server: ASGI app, session manager and per-session runners around the engine."""

from duplexkit.server.app import DuplexServer, ServerConfig
from duplexkit.server.runner import RunnerLimits
from duplexkit.server.serve import EmbeddedServer, run_server

__all__ = ["DuplexServer", "EmbeddedServer", "RunnerLimits", "ServerConfig", "run_server"]
