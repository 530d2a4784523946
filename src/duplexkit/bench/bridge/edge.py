"""The conversation bridge's asyncio edge: two configured `DuplexClient`s (any protocol the client speaks)
driven by a `core.BridgeCore` on the wall clock.

Each round: the events each server sent since the last round go into the core (audio deltas decoded and
resampled to the timeline's rate, transcript deltas, `audio_text_marks`, responses done or cancelled); the
frames due are cut and appended to both sessions (each resampled to its server's input rate by a
streaming resampler, so a server's media clock counts exactly the frames it was fed); stage boundaries
are sent to the examiner as a new `session.update` of its instructions. Then it sleeps until the next
frame is due. It ends when the core does (its duration, or the stop phrase), when a connection is lost,
or when a send to a server stays blocked past `send_timeout_s`.

The examiner opens the conversation as FDB v2's examiner adapter does: `response.create` once the session
is configured; with `opener`, a user text item first (a server that answers nothing to a bare
`response.create`, such as duplexkit's cascade, needs one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duplexkit.bench.bridge.core import SPEAKERS, BridgeCore, Speaker, StageUpdate
from duplexkit.client import ConnectionLost, DuplexClient
from duplexkit.client.collector import AUDIO_DELTAS, TEXT_DELTAS
from duplexkit.client.events import as_positive_int, as_str, dig, response_id_of, text_marks
from duplexkit.protocol.audio import AudioDecodeError, StreamingResampler, decode_base64_audio, resample

SEND_TIMEOUT_S = 5.0
"""How long one round's appends may wait for a server's socket before the conversation stops."""


@dataclass
class _Side:
    speaker: Speaker
    client: DuplexClient
    to_server: StreamingResampler
    cursor: int = 0
    current: str | None = None
    text_kind: dict[str, str] = field(default_factory=dict)


@dataclass
class ConversationReport:
    """What one conversation did. Times are on the bridge's timeline (`media_s`: seconds of media time
    from the start) unless named otherwise."""

    stop_reason: str
    """`duration`, `stop_phrase`, `<speaker>_connection_lost` or `<speaker>_send_timeout`."""
    media_s: float
    frames: int
    max_late_ms: float
    """The most a frame was cut after its due time (wall clock, `time.monotonic`)."""
    late_frames: int
    stage_updates: list[dict[str, Any]]
    """Each stage sent to the examiner: `stage`, `at_s` (timeline), `sent_wall_s` (monotonic seconds
    after the start when it reached the socket)."""
    resampler_lag_ms: dict[str, float]
    """Per listener, how far its server's input runs behind the timeline at the end: the streaming
    resampler's filter delay (0 where the server takes the timeline's rate)."""
    opened_at_s: float | None
    """Wall seconds from the start to the examiner's opening `response.create` on the wire."""

    @property
    def ok(self) -> bool:
        return self.stop_reason in ("duration", "stop_phrase")

    def to_json(self) -> dict[str, Any]:
        return {
            "stop_reason": self.stop_reason,
            "media_s": round(self.media_s, 3),
            "frames": self.frames,
            "clock": "bridge timeline: 20 ms frames cut on time.monotonic; media time 0 at the start",
            "max_late_ms": round(self.max_late_ms, 3),
            "late_frames": self.late_frames,
            "stage_updates": self.stage_updates,
            "resampler_lag_ms": self.resampler_lag_ms,
            "opened_at_s": self.opened_at_s,
        }


async def run_conversation(
    core: BridgeCore,
    examiner: DuplexClient,
    examinee: DuplexClient,
    *,
    stage_instructions: Callable[[int], str] | None = None,
    opener: str | None = None,
    send_timeout_s: float = SEND_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
) -> ConversationReport:
    """Run the conversation `core` rules between two configured sessions (module docstring);
    `stage_instructions(i)` is the examiner's instructions once stage `i` is due."""
    sides = {
        "examiner": _side("examiner", examiner, core.rate_hz),
        "examinee": _side("examinee", examinee, core.rate_hz),
    }
    start = clock()
    core.start(start)
    stages: list[dict[str, Any]] = []
    opened_at: float | None = None
    stop: str | None = None
    try:
        async with asyncio.timeout(send_timeout_s):
            if opener:
                await examiner.send(_user_text(opener))
            opened_at = await examiner.send({"type": "response.create"}) - start
    except TimeoutError:
        stop = "examiner_send_timeout"
    while stop is None and not core.finished:
        for side in sides.values():
            _take_events(core, side)
        lost = next((s for s in SPEAKERS if sides[s].client.connection_lost), None)
        if lost is not None:
            stop = f"{lost}_connection_lost"
            break
        ticks = core.due(clock())
        try:
            for tick in ticks:
                async with asyncio.timeout(send_timeout_s):
                    await asyncio.gather(
                        *(_append(sides[s], tick.to(s)) for s in SPEAKERS),
                    )
            for update in core.pending_stages():
                if stage_instructions is not None:
                    sent = await _send_stage(examiner, update, stage_instructions, start, send_timeout_s)
                    stages.append(sent)
        except TimeoutError:
            stop = "send_timeout"
            break
        except ConnectionLost:
            continue  # the loss is read from the clients on the next round
        if not core.finished:
            await asyncio.sleep(max(0.0, core.deadline() - clock()))
    for side in sides.values():
        _take_events(core, side)
    return ConversationReport(
        stop_reason=stop or core.stop_reason or "duration",
        media_s=core.media_s,
        frames=core.frames,
        max_late_ms=core.max_late_ms,
        late_frames=core.late_frames,
        stage_updates=stages,
        resampler_lag_ms={
            s: round(1000 * side.to_server.lag_samples / side.to_server.out_rate, 3)
            for s, side in ((s, sides[s]) for s in SPEAKERS)
        },
        opened_at_s=None if opened_at is None else round(opened_at, 3),
    )


def _side(speaker: Speaker, client: DuplexClient, rate_hz: int) -> _Side:
    return _Side(speaker, client, StreamingResampler(rate_hz, client.capabilities.input_sample_rate_hz))


async def _append(side: _Side, frame: np.ndarray) -> None:
    samples = side.to_server.process(frame)
    if samples.size:
        await side.client.append_audio(samples)


async def _send_stage(
    examiner: DuplexClient,
    update: StageUpdate,
    instructions: Callable[[int], str],
    start: float,
    timeout_s: float,
) -> dict[str, Any]:
    sent = await examiner.update_instructions(instructions(update.stage), timeout_s=timeout_s)
    return {"stage": update.stage, "at_s": update.at_s, "sent_wall_s": round(sent - start, 3)}


def _user_text(text: str) -> dict[str, Any]:
    return {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    }


def _take_events(core: BridgeCore, side: _Side) -> None:
    """The events `side`'s server sent since the last call, into the core."""
    events = side.client.events
    while side.cursor < len(events):
        event = events[side.cursor]
        side.cursor += 1
        data, kind = event.data, event.type
        if kind == "response.created":
            side.current = response_id_of(data) or side.current
            continue
        if kind not in AUDIO_DELTAS and kind not in TEXT_DELTAS and kind != "response.done":
            continue
        rid = response_id_of(data) or side.current or "unidentified"
        side.current = rid
        if kind in AUDIO_DELTAS:
            _audio(core, side, rid, data)
        elif kind in TEXT_DELTAS:
            first_kind = side.text_kind.setdefault(rid, kind)
            if first_kind == kind:  # a server sending both text kinds for one response would double it
                core.text(side.speaker, rid, as_str(data.get("delta")) or "")
        elif dig(data, "response", "status") == "cancelled":
            core.withdraw(side.speaker, rid)
        else:
            core.done(side.speaker, rid)


def _audio(core: BridgeCore, side: _Side, rid: str, data: dict[str, Any]) -> None:
    b64 = as_str(data.get("delta"))
    if not b64:
        return
    try:
        samples = decode_base64_audio(b64, side.client.audio_format)
    except AudioDecodeError:
        return
    rate = as_positive_int(data.get("sample_rate_hz")) or side.client.capabilities.output_sample_rate_hz
    if rate != core.rate_hz:
        samples = resample(samples, rate, core.rate_hz)
    core.audio(side.speaker, rid, samples)
    marks = dig(data, "metadata", "audio_text_marks")
    if isinstance(marks, list):
        core.marks(side.speaker, rid, text_marks(marks))
