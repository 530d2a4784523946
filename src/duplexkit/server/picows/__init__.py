"""The picows edge: the core's routes on `picows` (Cython WebSocket framing on the asyncio/uvloop loop, no
ASGI layer); what `duplexkit serve` runs by default, as it costs the least CPU per frame."""

from duplexkit.server.picows.edge import PicowsEdge

__all__ = ["PicowsEdge"]
