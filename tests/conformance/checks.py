"""What each cell of the matrix checks: one spoken turn, as that client's user would check it."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import httpx
import numpy as np
import numpy.typing as npt

from duplexkit.server import EmbeddedServer

QUESTION = "What is the weather like in Paris?"
"""Asked in real time (the project's piper voice)."""
QUESTION_AT_ONCE = "Hello there. Can you tell me what the weather is like in Paris today?"
"""Sent whole at once: espeak-ng's reading, whose pause after the greeting let a model open a reply
inside the question, which the rest of it then cut (the regression the at-once cells were added for)."""
SCRIPTED_REPLY = "This is a scripted reply."
ANSWER_WORDS = ("what", "weather", "like")
"""The cascade's `echo` responder says back what it heard: its answer names the question's words (not
"Paris", which a recogniser hearing the reply back from an 8 kHz phone line takes for "pairs")."""

Samples = npt.NDArray[np.float32]


@dataclass
class Turn:
    """What the client got for its spoken turn."""

    transcript: str
    """The reply's transcript as the client reads it ("" where its protocol carries none: Twilio)."""
    audio: Samples
    """The reply's audio as the client received it (float samples)."""
    rate_hz: int
    events: list[str] = field(default_factory=list)
    """The event types the client read, in order."""


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def voiced_s(audio: Samples, rate_hz: int) -> float:
    """How much of `audio` is voiced: its 20 ms frames louder than a quiet room."""
    frame = rate_hz // 50
    frames = audio[: len(audio) // frame * frame].reshape(-1, frame)
    return float(np.sum(np.sqrt(np.mean(np.square(frames), axis=1)) > 0.01)) * 0.02


def assert_voiced(turn: Turn, *, min_s: float = 0.4) -> None:
    """Reply audio with speech in it, not silence: at least `min_s` of it voiced."""
    seconds = voiced_s(turn.audio, turn.rate_hz)
    assert seconds >= min_s, (
        f"{seconds:.2f} s of voiced reply audio in {len(turn.audio) / turn.rate_hz:.2f} s"
    )


def assert_answers(text: str, model: str) -> None:
    """The reply says what this model says to the question: the scripted reply, the cascade's echo of the
    question (which shows it heard it), anything from the tiny Moshi (its words are noise)."""
    if model == "scripted":
        assert text.strip() == SCRIPTED_REPLY, text
    elif model == "cascade":
        assert set(ANSWER_WORDS) <= set(words(text)), text


async def slot_freed(server: EmbeddedServer, timeout_s: float = 10.0) -> None:
    """The session's slot is back once the client has gone."""
    async with httpx.AsyncClient() as http, asyncio.timeout(timeout_s):
        while True:  # polled: the slot is a server's state, with no event a client can await
            if not (await http.get(f"{server.http_url}/healthz")).json()["sessions"]:
                return
            await asyncio.sleep(0.05)


def pcm16(samples: Samples) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def from_pcm16(data: bytes) -> Samples:
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
