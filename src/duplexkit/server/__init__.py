"""The duplex server: the framework-neutral core, its I/O edges, the session manager and the runners."""

from duplexkit.server.runner import RunnerLimits
from duplexkit.server.serve import EDGES, EmbeddedServer, run_server
from duplexkit.server.service import DuplexServer, ServerConfig

__all__ = ["EDGES", "DuplexServer", "EmbeddedServer", "RunnerLimits", "ServerConfig", "run_server"]
