"""The WebRTC edge: `POST /v1/realtime/calls` (OpenAI's WebRTC signalling) puts a session on a WebRTC call.

The other edges carry the signalling POST to the core (`server.service`), which authorizes and admits the
call as it does a WebSocket; `signalling` reads the offer (no WebRTC library), `media` places the tracks'
audio (Sans-I/O), and `call` is the call itself as the runner's socket, on `aiortc` (the `webrtc` extra,
imported only when a call comes). `AVAILABLE` says whether the extra is installed.
"""

import importlib.util

AVAILABLE = importlib.util.find_spec("aiortc") is not None
