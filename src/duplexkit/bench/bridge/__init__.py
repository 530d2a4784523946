"""The conversation bridge: two realtime sessions, an examiner and an examinee, talking to each other on one
media clock, both recorded on one timeline.

`core` holds the rules, Sans-I/O (the clock and its 20 ms frames, each side's playback queue, recordings,
transcripts timed where their audio played, the examiner's task stages, the end); `edge` drives two
configured `DuplexClient`s with it on the wall clock (any protocol the client speaks for the examinee;
the examiner needs one that takes instructions: duplexkit's dialects or OpenAI's); `record` writes the
recordings (FDB v2's `A.wav`, `B.wav`, `combined.wav`). A benchmark package builds its sessions and calls
`edge.run_conversation` inside its `run_attempt`, so the shared runner bounds, retries and resumes each
conversation as it does any sample.
"""

from duplexkit.bench.bridge.core import FRAME_MS, RATE_HZ, SPEAKERS, BridgeCore, Speaker, StageUpdate, Tick
from duplexkit.bench.bridge.edge import ConversationReport, run_conversation

__all__ = [
    "FRAME_MS",
    "RATE_HZ",
    "SPEAKERS",
    "BridgeCore",
    "ConversationReport",
    "Speaker",
    "StageUpdate",
    "Tick",
    "run_conversation",
]
