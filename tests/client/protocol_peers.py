"""Servers of other projects' protocols for the client's protocol adapters, written from their documented
contracts (`shared/reference/protocol.md`), not from our adapters.

* `moshi_server`: a Moshi `/api/chat` server. Binary frames only, first byte = kind; sends the handshake
  (kind 0: u32 protocol version 0 + u32 model version, little endian) when ready; reads Ogg-Opus 24 kHz
  (kind 1) with `sphn`; answers with one continuous stream, one 80 ms Ogg-Opus frame per input frame,
  silence while it listens; text pieces (kind 2) go out with the audio frame they belong to; pings and
  metadata ride along. No commit, no listen, no per-response metric exist.
* `openai_server`: an OpenAI-Realtime-style server: `session.created` on connect, `session.update` →
  `session.updated`, PCM16 at 24 kHz, client commit → `input_audio_buffer.committed`, `response.create`
  → a response in GA or beta names; with `turn_detection: server_vad` it detects the turn itself
  (`speech_started`, then after 500 ms of silence `speech_stopped`, `committed` and its response); no
  `response.listen`, no playback acks, no `session.close`, and unknown events or fields are rejected with
  an `error`, as the OpenAI API does. With `tool_call=(name, arguments)` its first response is that
  function call instead (GA: `response.output_item.added`, `conversation.item.added`,
  `response.function_call_arguments.delta/.done` with `name`, `response.output_item.done`,
  `conversation.item.done`, `response.done` listing the call; beta: `conversation.item.created` and no
  `name` on `arguments.done`); a `conversation.item.create` with a `function_call_output` for a call it
  made is acknowledged (GA `conversation.item.added` + `.done`, beta `conversation.item.created`), one for
  an unknown `call_id` is an `error`; the next `response.create` is the spoken reply.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import threading
from typing import Any

import numpy as np
import sphn
from websockets.asyncio.server import ServerConnection, serve

RATE = 24_000
FRAME = 1_920
MOSHI_MODEL_VERSION = 7
MOSHI_SPEAKS_AT_FRAME = 5
"""The fake Moshi model starts its reply when this many input frames have arrived."""
MOSHI_REPLY = ("Hello", " there.")
MOSHI_REPLY_FRAMES = 10


def tone(samples: int, amplitude: float = 0.2, hz: float = 440.0, start: int = 0) -> np.ndarray:
    t = (np.arange(samples) + start) / RATE
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


class MoshiPeer:
    """Records what the client sent: `kinds` of every message, `text_messages` (must stay 0)."""

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self.text_messages = 0
        self.input_samples = 0
        self.query = ""

    async def __call__(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.query = ws.request.path
        reader, writer = sphn.OpusStreamReader(RATE), sphn.OpusStreamWriter(RATE)
        await ws.send(b"\x00" + struct.pack("<II", 0, MOSHI_MODEL_VERSION))
        await ws.send(b"\x04" + json.dumps({"text_temperature": 0.7}).encode())  # metadata
        frames_out = 0
        async for message in ws:
            if isinstance(message, str):
                self.text_messages += 1
                continue
            self.kinds.append(message[0])
            if message[0] != 1:
                continue
            self.input_samples += len(reader.append_bytes(message[1:]))
            while frames_out < self.input_samples // FRAME:
                speaking = 0 <= frames_out - MOSHI_SPEAKS_AT_FRAME < MOSHI_REPLY_FRAMES
                index = frames_out - MOSHI_SPEAKS_AT_FRAME
                if speaking and index in (0, MOSHI_REPLY_FRAMES // 2):
                    piece = MOSHI_REPLY[0 if index == 0 else 1]
                    await ws.send(b"\x02" + piece.encode())
                pcm = tone(FRAME, start=index * FRAME) if speaking else np.zeros(FRAME, np.float32)
                await ws.send(b"\x01" + writer.append_pcm(pcm))
                if frames_out % 10 == 0:
                    await ws.send(b"\x06")  # ping
                frames_out += 1


OPENAI_GA_NAMES = {
    "audio": "response.output_audio.delta",
    "audio_done": "response.output_audio.done",
    "transcript": "response.output_audio_transcript.delta",
    "transcript_done": "response.output_audio_transcript.done",
}
OPENAI_BETA_NAMES = {
    "audio": "response.audio.delta",
    "audio_done": "response.audio.done",
    "transcript": "response.audio_transcript.delta",
    "transcript_done": "response.audio_transcript.done",
}
OPENAI_REPLY = "Sure, here you go."
_APPEND_FIELDS = {"type", "event_id", "audio"}
_KNOWN = {
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "response.create",
    "response.cancel",
    "conversation.item.create",
}


class OpenAIPeer:
    """An OpenAI-Realtime-style server in GA (`beta=False`) or beta names; records every event read."""

    def __init__(self, *, beta: bool, tool_call: tuple[str, str] | None = None) -> None:
        self.beta = beta
        self.tool_call = tool_call
        self.calls_made: set[str] = set()
        self.tools: list[Any] = []
        self.names = OPENAI_BETA_NAMES if beta else OPENAI_GA_NAMES
        self.events: list[dict[str, Any]] = []
        self.headers: dict[str, str] = {}
        self.buffered = 0
        self.server_vad = False
        self._speech = False
        self._silence_ms = 0.0

    async def send(self, ws: ServerConnection, event_type: str, **fields: Any) -> None:
        await ws.send(json.dumps({"type": event_type, "event_id": f"evt_{len(self.events)}", **fields}))

    async def error(self, ws: ServerConnection, code: str, message: str) -> None:
        await self.send(
            ws, "error", error={"type": "invalid_request_error", "code": code, "message": message}
        )

    async def __call__(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        self.headers = dict(ws.request.headers)
        session: dict[str, Any] = (
            {"id": "sess_oai", "modalities": ["text", "audio"], "input_audio_format": "pcm16"}
            if self.beta
            else {"id": "sess_oai", "type": "realtime", "output_modalities": ["audio"]}
        )
        await self.send(ws, "session.created", session=session)
        async for message in ws:
            event = json.loads(message)
            self.events.append({k: (len(v) if k == "audio" else v) for k, v in event.items()})
            kind = event.get("type")
            if kind not in _KNOWN:
                await self.error(ws, "unknown_event", f"Invalid event type {kind!r}")
            elif kind == "session.update":
                shape = event["session"]
                ga_format = shape.get("audio", {}).get("input", {}).get("format", {}).get("type")
                if (shape.get("input_audio_format") if self.beta else ga_format) != (
                    "pcm16" if self.beta else "audio/pcm"
                ):
                    await self.error(ws, "invalid_value", "unsupported session shape")
                    continue
                turns = (
                    shape.get("turn_detection")
                    if self.beta
                    else shape["audio"]["input"].get("turn_detection")
                )
                self.server_vad = isinstance(turns, dict) and turns.get("type") == "server_vad"
                self.tools = list(shape.get("tools") or [])
                await self.send(ws, "session.updated", session={**session, **event["session"]})
            elif kind == "input_audio_buffer.append":
                unknown = set(event) - _APPEND_FIELDS
                if unknown:
                    await self.error(ws, "unknown_parameter", f"Unknown parameter: {sorted(unknown)[0]}")
                    continue
                pcm = np.frombuffer(base64.b64decode(event["audio"]), dtype="<i2")
                self.buffered += len(pcm)
                if self.server_vad:
                    await self._detect(ws, pcm)
            elif kind == "input_audio_buffer.commit":
                end_ms = self.buffered * 1000 // RATE
                await self.send(ws, "input_audio_buffer.committed", item_id="item_user", audio_end_ms=end_ms)
            elif kind == "response.create":
                await self._respond(ws)
            elif kind == "conversation.item.create":
                item = event.get("item") or {}
                if item.get("type") != "function_call_output" or item.get("call_id") not in self.calls_made:
                    await self.error(ws, "invalid_value", "no function_call with that call_id")
                    continue
                stored = {**item, "id": f"item_out_{len(self.events)}", "object": "realtime.item"}
                if self.beta:
                    await self.send(ws, "conversation.item.created", item=stored, previous_item_id=None)
                else:
                    await self.send(ws, "conversation.item.added", item=stored, previous_item_id=None)
                    await self.send(ws, "conversation.item.done", item=stored, previous_item_id=None)

    async def _detect(self, ws: ServerConnection, pcm: np.ndarray) -> None:
        loud = len(pcm) > 0 and float(np.sqrt(np.mean((pcm / 32768.0) ** 2))) > 0.01
        end_ms = self.buffered * 1000 // RATE
        if loud and not self._speech:
            self._speech = True
            await self.send(
                ws, "input_audio_buffer.speech_started", audio_start_ms=end_ms, item_id="item_user"
            )
        self._silence_ms = 0.0 if loud else self._silence_ms + len(pcm) * 1000 / RATE
        if self._speech and self._silence_ms >= 500:
            self._speech = False
            await self.send(ws, "input_audio_buffer.speech_stopped", audio_end_ms=end_ms, item_id="item_user")
            await self.send(ws, "input_audio_buffer.committed", item_id="item_user", audio_end_ms=end_ms)
            await self._respond(ws)

    async def _call(self, ws: ServerConnection, name: str, arguments: str) -> None:
        call_id, rid = f"call_{len(self.calls_made)}", f"resp_call_{len(self.calls_made)}"
        self.calls_made.add(call_id)
        ids = {"response_id": rid, "item_id": f"item_{call_id}", "output_index": 0}
        base = {
            "id": f"item_{call_id}",
            "object": "realtime.item",
            "type": "function_call",
            "call_id": call_id,
        }
        started = {**base, "name": name, "arguments": "", "status": "in_progress"}
        item = {**base, "name": name, "arguments": arguments, "status": "completed"}
        await self.send(ws, "response.created", response={"id": rid, "status": "in_progress", "output": []})
        await self.send(ws, "response.output_item.added", response_id=rid, output_index=0, item=started)
        await self.send(
            ws, "conversation.item.created" if self.beta else "conversation.item.added", item=started
        )
        half = len(arguments) // 2
        for piece in (arguments[:half], arguments[half:]):
            await self.send(ws, "response.function_call_arguments.delta", **ids, call_id=call_id, delta=piece)
        done = {} if self.beta else {"name": name}
        await self.send(
            ws, "response.function_call_arguments.done", **ids, call_id=call_id, arguments=arguments, **done
        )
        await self.send(ws, "response.output_item.done", response_id=rid, output_index=0, item=item)
        if not self.beta:
            await self.send(ws, "conversation.item.done", item=item)
        await self.send(ws, "response.done", response={"id": rid, "status": "completed", "output": [item]})

    async def _respond(self, ws: ServerConnection) -> None:
        if self.tool_call is not None and not self.calls_made:
            await self._call(ws, *self.tool_call)
            return
        ids = {"response_id": "resp_oai", "item_id": "item_oai", "output_index": 0, "content_index": 0}
        await self.send(ws, "response.created", response={"id": "resp_oai", "status": "in_progress"})
        words = OPENAI_REPLY.split(" ")
        for i, word in enumerate(words):
            audio = tone(RATE // 5, start=i * RATE // 5)
            pcm16 = (audio * 32767).astype("<i2").tobytes()
            await self.send(ws, self.names["audio"], **ids, delta=base64.b64encode(pcm16).decode())
            piece = word if i == len(words) - 1 else word + " "
            await self.send(ws, self.names["transcript"], **ids, delta=piece)
        await self.send(ws, self.names["audio_done"], **ids)
        await self.send(ws, self.names["transcript_done"], **ids, transcript=OPENAI_REPLY)
        await self.send(ws, "response.done", response={"id": "resp_oai", "status": "completed"})


class ServedInThread:
    """`with ServedInThread(handler) as url:` serves `handler` on a loopback port from its own thread and
    event loop, so a synchronous command (`duplexkit talk`, which runs its own loop) can reach it."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: Any = None

    def __enter__(self) -> str:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        port: int = future.result(10)
        return f"ws://127.0.0.1:{port}"

    async def _start(self) -> int:
        self._server = await serve(self.handler, "127.0.0.1", 0, max_size=None, compression=None)
        return int(self._server.sockets[0].getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
