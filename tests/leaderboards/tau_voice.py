"""τ-Voice's audio-native agent client (tau2-bench `--audio-native --audio-native-provider openai`), ported
from its own code to drive a server in tests: the same connection, `session.update`, ticks, event reading,
tool results, barge-in truncation and proportional transcript, nothing of duplexkit's client.

Written from sierra-research/tau2-bench (MIT) @ a2c024725189473d2d7cea3a5cfdbcc67478e41f:
- `src/tau2/voice/audio_native/openai/provider.py` (`OpenAIRealtimeProvider`: the `pine-` model hook on
  `PINE_REALTIME_BASE_URL` + `PINE_API_KEY`, URL `f"{base}?model={model}"`, only an `Authorization`
  header, `session.created` first or `RuntimeError`, `configure_session` waiting for `session.updated`
  and raising on `error`, `send_audio`, `send_tool_result`, `truncate_item`, `receive_events` with its
  10 ms `recv` timeouts, `ConnectionClosed` → `RuntimeError`, any other failure → an `error` event);
- `src/tau2/voice/audio_native/openai/events.py` (`parse_realtime_event`: the event names it knows, the
  fields it reads, `UnknownEvent` for any other name, a validation failure for a known one);
- `src/tau2/voice/audio_native/openai/discrete_time_adapter.py` (`_execute_tick`, `_process_event`);
- `src/tau2/voice/audio_native/adapter.py` (`_async_run_tick`, `_send_audio_chunked`: 160 B every 20 ms);
- `src/tau2/voice/audio_native/tick_result.py` (`TickResult.get_played_agent_audio`,
  `truncate_agent_audio`, `buffer_excess_audio`, `get_proportional_transcript`, `UtteranceTranscript`);
- `src/tau2/voice/utils/transcript_utils.py` (`get_proportional_text`);
- `src/tau2/config.py` (0.2 s ticks, `\\x7f` μ-law silence, 20 ms VoIP packets).

The `session.update` it sends is not rebuilt here: `data/tau_voice_retail_session_update.json` is the exact
text tau2's own `DiscreteTimeAudioNativeAgent` (retail domain: its policy and 16 tools, provider `openai`,
model `pine-duplexkit`) sent to a recording socket, captured with tau2 at that commit (docs/leaderboards.md).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websockets

SESSION_UPDATE = (Path(__file__).parent / "data" / "tau_voice_retail_session_update.json").read_text()
"""τ-Voice's retail `session.update`, byte for byte."""

TICK_MS = 200
BYTES_PER_SECOND = 8000  # 8 kHz μ-law, one byte a sample
BYTES_PER_TICK = BYTES_PER_SECOND * TICK_MS // 1000
CHUNK = BYTES_PER_SECOND * 20 // 1000  # one 20 ms VoIP packet
SILENCE = b"\x7f"

# events.py: the names it parses, and the fields each requires (pydantic, no default).
_KNOWN = {
    "response.text.delta": ("delta",),
    "response.text.done": (),
    "response.output_audio.delta": (),
    "response.output_audio.done": (),
    "response.output_audio_transcript.delta": ("delta",),
    "response.output_audio_transcript.done": (),
    "response.function_call_arguments.delta": ("delta",),
    "response.function_call_arguments.done": (),
    "response.output_item.added": (),
    "response.output_item.done": (),
    "response.done": (),
    "response.cancelled": (),
    "response.created": (),
    "response.content_part.added": (),
    "response.content_part.done": (),
    "input_audio_buffer.speech_started": (),
    "input_audio_buffer.speech_stopped": (),
    "input_audio_buffer.committed": (),
    "input_audio_buffer.cleared": (),
    "conversation.item.truncated": (),
    "conversation.item.created": (),
    "conversation.item.input_audio_transcription.completed": (),
    "session.created": (),
    "session.updated": (),
    "rate_limits.updated": (),
    "error": (),
}


def parse_realtime_event(raw: dict[str, Any]) -> dict[str, Any]:
    """events.py's `parse_realtime_event`, as plain dicts: unknown names become `{"type": name,
    "unknown": True}`; a known event without a field its model requires raises (as `model_validate`)."""
    kind = raw.get("type", "unknown")
    if kind not in _KNOWN:
        return {"type": kind, "unknown": True, "raw": raw}
    for name in _KNOWN[kind]:
        if not isinstance(raw.get(name), str):
            raise ValueError(f"{kind}: {name} is required")
    if kind == "response.done":
        response = raw.get("response", {})
        return {"type": kind, "response_id": response.get("id"), "status": response.get("status"),
                "usage": response.get("usage")}  # fmt: skip
    if kind == "error":
        error = raw.get("error", {})
        return {"type": kind, "code": error.get("code"), "message": error.get("message")}
    return raw


class TauVoiceProvider:
    """`OpenAIRealtimeProvider` with a `pine-` model: one socket, τ-Voice's frames on it."""

    def __init__(self, base_url: str, api_key: str, model: str = "pine-duplexkit") -> None:
        self.base_url, self.api_key, self.model = base_url, api_key, model
        self.ws: websockets.ClientConnection | None = None
        self.sent: list[dict[str, Any]] = []
        """Every client event sent after the `session.update`, decoded (for the tests' eyes)."""

    async def connect(self) -> None:
        url = f"{self.base_url}?model={self.model}"
        self.ws = await websockets.connect(
            url, additional_headers={"Authorization": f"Bearer {self.api_key}"}
        )
        data = json.loads(await self.ws.recv())
        if data.get("type") != "session.created":
            raise RuntimeError(f"Expected session.created, got {data.get('type')}")

    async def configure_session(self, session_update: str = SESSION_UPDATE) -> None:
        assert self.ws is not None
        await self.ws.send(session_update)
        while True:
            data = json.loads(await self.ws.recv())
            if data.get("type") == "session.updated":
                return
            if data.get("type") == "error":
                raise RuntimeError(f"Session configuration failed: {data.get('error', {}).get('message')}")

    async def _send(self, event: dict[str, Any]) -> None:
        assert self.ws is not None
        self.sent.append(event)
        await self.ws.send(json.dumps(event))

    async def send_audio(self, audio: bytes) -> None:
        await self._send({"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()})

    async def send_tool_result(self, call_id: str, result: str, request_response: bool = True) -> None:
        item = {"type": "function_call_output", "call_id": call_id, "output": result}
        await self._send({"type": "conversation.item.create", "item": item})
        if request_response:
            await self._send({"type": "response.create"})

    async def truncate_item(self, item_id: str, content_index: int, audio_end_ms: int) -> None:
        await self._send(
            {
                "type": "conversation.item.truncate",
                "item_id": item_id,
                "content_index": content_index,
                "audio_end_ms": audio_end_ms,
            }
        )

    async def receive_events_for_duration(self, seconds: float) -> list[dict[str, Any]]:
        """`receive_events` collected until the time is up: 10 ms `recv` timeouts, a closed socket is a
        `RuntimeError`, any other failure an `error` event (which τ-Voice only logs)."""
        assert self.ws is not None
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        events: list[dict[str, Any]] = []
        while True:
            try:
                raw = await asyncio.wait_for(self.ws.recv(), timeout=0.01)
                events.append(parse_realtime_event(json.loads(raw)))
            except TimeoutError:
                pass
            except websockets.ConnectionClosed as exc:
                raise RuntimeError(f"WebSocket connection closed unexpectedly (code={exc.code})") from exc
            except Exception as exc:
                events.append({"type": "error", "parse_failure": f"{type(exc).__name__}: {exc}"})
            if loop.time() >= end:
                return events

    async def disconnect(self) -> None:
        if self.ws is not None:
            await self.ws.close()


@dataclass
class Utterance:
    """tick_result.py's `UtteranceTranscript`."""

    audio_received: int = 0
    text_received: str = ""
    audio_played: int = 0
    chars_shown: int = 0

    def for_audio(self, nbytes: int) -> str:
        self.audio_played += nbytes
        if self.audio_received == 0 or not self.text_received:
            return ""
        ratio = min(1.0, self.audio_played / self.audio_received)
        end = max(self.chars_shown, math.ceil(ratio * len(self.text_received)))
        text, self.chars_shown = self.text_received[self.chars_shown : end], end
        return text


@dataclass
class Tick:
    """tick_result.py's `TickResult`, the parts a caller reads."""

    number: int
    user_audio_ms_at_start: int
    events: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[tuple[bytes, str | None]] = field(default_factory=list)
    vad_events: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    usage: list[dict[str, Any]] = field(default_factory=list)
    was_truncated: bool = False
    skip_item_id: str | None = None
    interruption_audio_start_ms: int | None = None
    truncated_audio_bytes: int = 0
    proportional_transcript: str = ""

    @property
    def agent_audio(self) -> bytes:
        return b"".join(data for data, _ in self.chunks)

    def played_agent_audio(self) -> bytes:
        """`get_played_agent_audio`: exactly one tick, cut at the interruption and padded with silence."""
        raw = self.agent_audio
        if self.was_truncated and self.interruption_audio_start_ms is not None:
            at_ms = max(0, min(self.interruption_audio_start_ms - self.user_audio_ms_at_start, TICK_MS))
            played = raw[: int(at_ms * BYTES_PER_SECOND / 1000)]
            return played + SILENCE * (BYTES_PER_TICK - len(played))
        return raw[:BYTES_PER_TICK] + SILENCE * max(0, BYTES_PER_TICK - len(raw))


class TauVoiceAdapter:
    """`DiscreteTimeOpenAIAdapter` (and the `DiscreteTimeAdapter` template it runs in)."""

    def __init__(self, provider: TauVoiceProvider) -> None:
        self.provider = provider
        self.user_audio_ms = 0
        self.buffered: list[tuple[bytes, str | None]] = []
        self.utterances: dict[str, Utterance] = {}
        self.skip_item_id: str | None = None
        self.pending_tool_results: list[tuple[str, str, bool]] = []

    def send_tool_result(self, call_id: str, result: str, request_response: bool = True) -> None:
        self.pending_tool_results.append((call_id, result, request_response))

    async def run_tick(self, user_audio: bytes, number: int) -> Tick:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for call_id, result, request_response in self.pending_tool_results:
            await self.provider.send_tool_result(call_id, result, request_response)
        self.pending_tool_results.clear()
        tick = Tick(number, self.user_audio_ms, chunks=list(self.buffered), skip_item_id=self.skip_item_id)
        self.buffered = []

        async def send_chunked() -> None:
            for offset in range(0, len(user_audio), CHUNK):
                await self.provider.send_audio(user_audio[offset : offset + CHUNK])
                await asyncio.sleep(0.02)

        async def receive() -> list[dict[str, Any]]:
            remaining = max(0.01, TICK_MS / 1000 - (loop.time() - start))
            return await self.provider.receive_events_for_duration(remaining)

        _, events = await asyncio.gather(send_chunked(), receive())
        for event in events:
            await self._process_event(tick, event)
        self.buffered = self._cap(tick)
        tick.proportional_transcript = self._proportional(tick)
        self.skip_item_id = tick.skip_item_id
        self.user_audio_ms += len(user_audio) * 1000 // BYTES_PER_SECOND
        remaining = TICK_MS / 1000 - (loop.time() - start)
        if remaining > 0:
            await asyncio.sleep(remaining)
        return tick

    async def _process_event(self, tick: Tick, event: dict[str, Any]) -> None:
        tick.events.append(event)
        kind = event["type"]
        if kind == "response.output_audio.delta":
            item_id = event.get("item_id")
            decoded = base64.b64decode(event.get("delta", ""))
            if tick.skip_item_id is not None:
                if item_id == tick.skip_item_id:
                    tick.truncated_audio_bytes += len(decoded)
                    return
                tick.skip_item_id = None
            tick.chunks.append((decoded, item_id))
            if item_id:
                self.utterances.setdefault(item_id, Utterance()).audio_received += len(decoded)
        elif kind == "response.output_audio_transcript.delta":
            item_id = event.get("item_id")
            if item_id and event["delta"]:
                self.utterances.setdefault(item_id, Utterance()).text_received += event["delta"]
        elif kind == "input_audio_buffer.speech_started":
            tick.vad_events.append("speech_started")
            if tick.chunks or self.buffered:
                last_item_id = tick.chunks[-1][1] if tick.chunks else self.buffered[-1][1]
                if self.buffered:
                    tick.truncated_audio_bytes += sum(len(c) for c, _ in self.buffered)
                    self.buffered.clear()
                tick.was_truncated = True
                tick.skip_item_id = last_item_id
                tick.interruption_audio_start_ms = event.get("audio_start_ms") or 0
                if last_item_id is not None:
                    played = tick.played_agent_audio()
                    audio_end_ms = int(len(played) / BYTES_PER_SECOND * 1000)
                    await self.provider.truncate_item(last_item_id, 0, audio_end_ms)
        elif kind == "input_audio_buffer.speech_stopped":
            tick.vad_events.append("speech_stopped")
        elif kind == "response.function_call_arguments.done":
            if event.get("call_id") and event.get("name"):
                try:
                    arguments = json.loads(event.get("arguments") or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                tick.tool_calls.append((event["call_id"], event["name"], arguments))
        elif kind == "response.done" and event.get("usage"):
            tick.usage.append(event["usage"])

    @staticmethod
    def _cap(tick: Tick) -> list[tuple[bytes, str | None]]:
        """`buffer_excess_audio`: one tick's worth kept, the rest carried over (dropped after a barge-in)."""
        keep: list[tuple[bytes, str | None]] = []
        excess: list[tuple[bytes, str | None]] = []
        total = 0
        for data, item_id in tick.chunks:
            room = BYTES_PER_TICK - total
            if len(data) <= room:
                keep.append((data, item_id))
                total += len(data)
                continue
            if room > 0:
                keep.append((data[:room], item_id))
            excess.append((data[max(room, 0) :], item_id))
            total = BYTES_PER_TICK
        tick.chunks = keep
        if tick.was_truncated:
            tick.truncated_audio_bytes += sum(len(data) for data, _ in excess)
            return []
        return excess

    def _proportional(self, tick: Tick) -> str:
        """`get_proportional_transcript`: each item's text in proportion to its audio played over its audio
        received so far."""
        by_item: dict[str, int] = {}
        for data, item_id in tick.chunks:
            if item_id:
                by_item[item_id] = by_item.get(item_id, 0) + len(data)
        parts = [self.utterances[i].for_audio(n) for i, n in by_item.items() if i in self.utterances]
        return " ".join(p for p in parts if p)
