"""The native edge: the core's routes on the `websockets` library's own asyncio server (no ASGI layer);
what `duplexkit serve` runs by default."""

from duplexkit.server.websockets.edge import WebSocketsEdge

__all__ = ["WebSocketsEdge"]
