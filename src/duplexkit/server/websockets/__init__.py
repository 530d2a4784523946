"""The `websockets` edge: the core's routes on the `websockets` library's own asyncio server (no ASGI
layer); what `duplexkit serve` runs when `--ws-compression` asks for permessage-deflate."""

from duplexkit.server.websockets.edge import WebSocketsEdge

__all__ = ["WebSocketsEdge"]
