"""Drivers for the agent frameworks' realtime clients, unchanged: Pipecat's `OpenAIRealtimeLLMService` in
its own pipeline, and LiveKit's `RealtimeModel` session (what they need from a server: the module
docstrings of `tests/server/test_pipecat_tools.py` and `tests/server/test_livekit_tools.py`)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from duplexkit.protocol.audio import resample
from duplexkit.server import EmbeddedServer
from tests.conformance.checks import Samples, Turn, from_pcm16, pcm16

pytest.importorskip("loguru", reason="needs Pipecat's imports (dev extra)")
pytest.importorskip("pipecat.services.openai.realtime.llm", reason="needs pipecat-ai (the Makefile's NODEPS)")
lk_openai = pytest.importorskip("livekit.plugins.openai", reason="needs livekit-plugins-openai (dev extra)")
from livekit import rtc  # noqa: E402
from livekit.agents import llm  # noqa: E402
from pipecat.frames.frames import (  # noqa: E402
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    LLMFullResponseEndFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

CHUNK_S = 0.1


class _Collect(FrameProcessor):
    """What comes out of the service (and the errors it pushes upstream): the reply's text and audio from
    the first TTS audio on, ended by its `LLMFullResponseEndFrame`."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.audio = bytearray()
        self.rate_hz = 24_000
        self.errors: list[ErrorFrame] = []
        self.done = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame):
            self.errors.append(frame)
        elif isinstance(frame, TTSAudioRawFrame):
            self.audio += frame.audio
            self.rate_hz = frame.sample_rate
        elif isinstance(frame, TTSTextFrame):
            self.text.append(frame.text)
        elif isinstance(frame, LLMFullResponseEndFrame) and self.audio:
            self.done.set()
        await self.push_frame(frame, direction)


async def pipecat(server: EmbeddedServer, question: Samples, pacing: str) -> Turn:
    """Pipecat's realtime service with its defaults (OpenAI's server VAD ends the turn), fed the question
    as its transport would: 100 ms `InputAudioRawFrame`s at 16 kHz, in real time."""
    service = OpenAIRealtimeLLMService(
        api_key="unused", base_url=server.url, settings=OpenAIRealtimeLLMService.Settings(model="duplexkit")
    )
    head, tail = _Collect(), _Collect()
    worker = PipelineWorker(Pipeline([head, service, tail]), cancel_on_idle_timeout=False)
    runner = WorkerRunner()
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        data = pcm16(question)
        size = round(16_000 * CHUNK_S) * 2
        start = time.monotonic()
        for k, offset in enumerate(range(0, len(data), size)):
            frame = InputAudioRawFrame(audio=data[offset : offset + size], sample_rate=16_000, num_channels=1)
            await service.queue_frame(frame, FrameDirection.DOWNSTREAM)  # as its transport hands it
            await asyncio.sleep(max(0.0, start + (k + 1) * CHUNK_S - time.monotonic()))
        await asyncio.wait_for(tail.done.wait(), 60)
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(run, 20)
    assert not head.errors and not tail.errors, head.errors + tail.errors
    return Turn("".join(tail.text), from_pcm16(bytes(tail.audio)), tail.rate_hz)


async def livekit(server: EmbeddedServer, question: Samples, pacing: str) -> Turn:
    """LiveKit's realtime model session. In real time with its default turn detection (server VAD): the
    question's frames pushed as a room delivers them, and the generation the server opens. At once, as
    its agent does with turn detection off: every frame pushed, `commit_audio`, then `generate_reply`,
    whose generation must be the answer (it waits for the echo of its request's `client_event_id`)."""
    options = {} if pacing == "realtime" else {"turn_detection": None}
    model = lk_openai.realtime.RealtimeModel(
        base_url=f"{server.http_url}/v1", api_key="unused", model="duplexkit", **options
    )
    session = model.session()
    generations: asyncio.Queue[llm.GenerationCreatedEvent] = asyncio.Queue()
    session.on("generation_created", generations.put_nowait)
    samples = (np.clip(resample(question, 16_000, 24_000), -1, 1) * 32767).astype("<i2")
    size = round(24_000 * CHUNK_S)
    try:
        start = time.monotonic()
        for k, offset in enumerate(range(0, len(samples), size)):
            chunk = samples[offset : offset + size]
            session.push_audio(rtc.AudioFrame(chunk.tobytes(), 24_000, 1, len(chunk)))
            if pacing == "realtime":
                await asyncio.sleep(max(0.0, start + (k + 1) * CHUNK_S - time.monotonic()))
        if pacing == "at-once":
            session.commit_audio()
            generation = await asyncio.wait_for(session.generate_reply(), 30)
        else:
            generation = await asyncio.wait_for(generations.get(), 60)
        text, audio = await asyncio.wait_for(_spoken(generation), 60)
    finally:
        await session.aclose()
        await model.aclose()
    return Turn(text, audio, 24_000)


async def _spoken(generation: llm.GenerationCreatedEvent) -> tuple[str, Samples]:
    """The text and audio of a generation's messages."""
    text: list[str] = []
    frames: list[Samples] = []
    async for message in generation.message_stream:
        async for chunk in message.text_stream:
            text.append(chunk)
        async for frame in message.audio_stream:
            pcm = np.frombuffer(bytes(frame.data), dtype="<i2").astype(np.float32) / 32768.0
            frames.append(resample(pcm, frame.sample_rate, 24_000) if frame.sample_rate != 24_000 else pcm)
    return "".join(text), np.concatenate(frames) if frames else np.zeros(0, np.float32)
