"""duplexkit: serve, drive and evaluate full-duplex speech and omni models over a realtime WebSocket."""

__version__ = "0.1.0"
