"""A stateful fuzzer of the Moshi door (`/api/chat`): the protocol's framing and Ogg-Opus decoding
(`protocol.moshi`) as `server.moshi.MoshiSocket` applies them, on a fake connection. The client sends random
frames (Ogg-Opus audio cut anywhere, corrupted, interleaved with junk; every kind, unknown kinds, empty
frames, text messages), the session sends its events (the handshake's `session.created`, reply audio and
its transcript, listens, cancelled replies, errors).

Invariants: the socket hands the runner only typed events (an append of decoded audio, a commit) and never
raises; every frame that is not Moshi protocol is answered by one kind 5 error frame and the connection
kept; what it sends is Moshi frames of the server's kinds, the handshake first; the input clock is the
audio decoded; the Ogg reassembly holds at most one page's bytes; output frames never run ahead of the
input the model has stepped.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from duplexkit.engine import EngineConfig, EngineSession
from duplexkit.protocol import client_events as ce
from duplexkit.protocol import moshi
from duplexkit.protocol import server_events as se
from duplexkit.protocol.audio import EncodedAudio
from duplexkit.protocol.errors import ErrorCode
from duplexkit.server.moshi import MoshiSocket, session_from_query
from tests.fuzz.strategies import examples

SETTINGS = settings(
    max_examples=examples(40),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
MAX_PAGE = 27 + 255 + 255 * 255
"""The largest Ogg page: a header, 255 lacing values, 255 segments of 255 bytes."""


def _stream(seconds: float) -> bytes:
    t = np.arange(round(seconds * moshi.SAMPLE_RATE_HZ)) / moshi.SAMPLE_RATE_HZ
    return moshi.OpusEncoder().encode((0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))


OGG = _stream(2.0)


class FakeConnection:
    def __init__(self) -> None:
        self.inbox: list[str | bytes | None] = []
        self.sent: list[bytes] = []
        self.close_code: int | None = None

    async def receive(self) -> str | bytes | None:
        return self.inbox.pop(0) if self.inbox else None

    async def send_text(self, data: str) -> None:
        raise AssertionError("the Moshi door sends binary frames only")

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.close_code = code


class MoshiFuzz(RuleBasedStateMachine):
    messages = 0
    """Client messages delivered by every run so far (the long run's figure)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.ws = FakeConnection()
        self.socket = MoshiSocket(self.ws, session_from_query({"text_temperature": "0.7"}))  # type: ignore[arg-type]
        first = self.run(self.socket.receive_event())
        assert isinstance(first, ce.SessionUpdate)
        self.offset = 0
        """Where the next audio frame cuts the Ogg stream."""
        self.decoded_ms = 0.0
        self.stepped_ms = 0.0
        self.ready = False
        self.replies = 0

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        self.loop.close()

    def frames(self, *messages: str | bytes, bad: int = 0) -> None:
        """Deliver `messages`, each answered within itself; `bad` of them must be answered by an error."""
        MoshiFuzz.messages += len(messages)
        before = len(self.ws.sent)
        self.ws.inbox.extend(messages)
        while self.ws.inbox:
            event = self.run(self.socket.receive_event())
            assert event is None or isinstance(event, ce.InputAudioBufferAppend | ce.InputAudioBufferCommit)
            if isinstance(event, ce.InputAudioBufferAppend):
                assert event.audio_end_ms is not None and event.audio_end_ms >= self.decoded_ms
                self.decoded_ms = event.audio_end_ms
        errors = [f for f in self.ws.sent[before:] if f[:1] == bytes([moshi.Kind.ERROR])]
        assert len(errors) >= bad, "a frame that is not Moshi protocol went unanswered"

    # --- the client -----------------------------------------------------------------------------------

    @rule(size=st.sampled_from([1, 27, 100, 400, 5_000]))
    def audio(self, size: int) -> None:
        piece = OGG[self.offset : self.offset + size]
        self.offset = (self.offset + size) % len(OGG)
        self.frames(moshi.frame(moshi.Kind.AUDIO, piece))

    @rule(data=st.binary(min_size=1, max_size=300), where=st.integers(0, 1_000))
    def corrupted_audio(self, data: bytes, where: int) -> None:
        piece = bytearray(OGG[where : where + 600])
        piece[len(piece) // 3 : len(piece) // 3 + len(data)] = data
        self.frames(moshi.frame(moshi.Kind.AUDIO, bytes(piece)))

    @rule(
        header=st.sampled_from([b"OggS", b"OggS\x00", b"OggS" + bytes(22) + b"\xff" + b"\xff" * 255, b"Og"]),
        tail=st.binary(max_size=100),
    )
    def ogg_fragments(self, header: bytes, tail: bytes) -> None:
        self.frames(moshi.frame(moshi.Kind.AUDIO, header + tail))

    @rule(kind=st.integers(0, 255), payload=st.binary(max_size=40))
    def any_frame(self, kind: int, payload: bytes) -> None:
        unknown = kind > max(moshi.Kind)
        client_only = kind in (moshi.Kind.TEXT, moshi.Kind.HANDSHAKE, moshi.Kind.ERROR)
        if kind == moshi.Kind.AUDIO:
            payload = b"OggS" + payload  # junk audio: answered as such or kept for the page to come
        self.frames(bytes([kind]) + payload, bad=int(unknown or client_only))

    @rule(message=st.sampled_from([b"", "hello", "{}", b"\x03\x01", b"\x03", b"\x06", b"\x04{}"]))
    def odd_messages(self, message: str | bytes) -> None:
        self.frames(message, bad=int(message in (b"", "hello", "{}")))

    # --- the session ----------------------------------------------------------------------------------

    @rule()
    def created(self) -> None:
        self.run(self.socket.send_event(se.SessionCreated(session=_session())))
        self.ready = True

    @rule(ms=st.sampled_from([0, 40, 80, 1000]), advance=st.sampled_from([0, 80, 200, 1000]))
    def reply(self, ms: int, advance: int) -> None:
        self.replies += 1
        response_id = f"resp_{self.replies}"
        self.stepped_ms += advance
        audio = np.full(ms * 24, 0.1, dtype=np.float32)
        delta = se.ResponseOutputAudioDelta.of_audio(
            EncodedAudio.of_samples(audio, "pcm_f32le"),
            response_id=response_id,
            item_id="item_1",
            sample_rate_hz=moshi.SAMPLE_RATE_HZ,
            unit_end_ms=self.stepped_ms,
            metadata=se.AudioDeltaMetadata(
                audio_duration_ms=float(ms), end_of_turn=False, audio_text_marks=[]
            ),
        )
        self.run(self.socket.send_event(delta))
        text = se.ResponseOutputAudioTranscriptDelta(
            response_id=response_id, item_id="item_1", delta="hi ", unit_end_ms=self.stepped_ms
        )
        self.run(self.socket.send_event(text))

    @rule(advance=st.sampled_from([0, 80, 160, 2000]))
    def listen(self, advance: int) -> None:
        self.stepped_ms += advance
        info = se.ListenInfo(metadata=se.ListenMetadata(reason="model_listen", model_listen=True))
        self.run(self.socket.send_event(se.ResponseListen(unit_end_ms=self.stepped_ms, response=info)))

    @rule()
    def cancelled(self) -> None:
        info = se.ResponseInfo(id=f"resp_{self.replies}", status="cancelled")
        self.run(self.socket.send_event(se.ResponseDone(response=info)))

    @rule()
    def error(self) -> None:
        self.run(self.socket.send_event(se.error_event(ErrorCode.INVALID_VALUE, "nope")))

    # --- invariants -------------------------------------------------------------------------------------

    @invariant()
    def frames_are_the_servers(self) -> None:
        kinds = [frame[0] for frame in self.ws.sent]
        assert all(
            kind in (moshi.Kind.HANDSHAKE, moshi.Kind.AUDIO, moshi.Kind.TEXT, moshi.Kind.ERROR)
            for kind in kinds
        )
        output = [k for k in kinds if k in (moshi.Kind.AUDIO, moshi.Kind.TEXT)]
        if output:
            assert self.ready and kinds.index(moshi.Kind.HANDSHAKE) < kinds.index(output[0])

    @invariant()
    def bounded(self) -> None:
        assert len(self.socket._decoder._pages._buffer) <= MAX_PAGE + 5_000
        assert self.socket._frames_out <= self.stepped_ms / moshi.FRAME_MS + 1e-9


def _session() -> se.SessionInfo:
    return EngineSession("sess_fuzz", EngineConfig(model="moshi", chunk_period_ms=80)).session_info()


TestMoshiFuzz = MoshiFuzz.TestCase
TestMoshiFuzz.settings = SETTINGS
