"""Pipecat's `OpenAIRealtimeLLMService` (pipecat-ai 1.14, unchanged, `base_url` at our server) makes a tool
call and hears the spoken answer.

Pipecat is installed without its dependencies (the Makefile's NODEPS); its realtime service also imports
`loguru`, `wait_for2`, `loudness` and `sentencex` (pinned in the dev extra). What it needs from a server
(read in its `pipecat/services/openai/realtime/llm.py` and `events.py`): `session.created` before it sends
`session.update`, `session.updated` before its first `response.create`, every event valid for its pydantic
models (`event_id` on each; a GA `audio/pcm` format only at `rate: 24000`, so a GA session must start at
OpenAI's 24 kHz), `conversation.item.added` with the `function_call` before
`response.function_call_arguments.done`, a `response.done` for every `response.create` (it holds the next
one until then; its first follows a text message item, with no audio), and no `error` (any is fatal to it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from duplexkit.models import ModelPlugin
from duplexkit.server import EmbeddedServer
from tests.server.conftest import weather_tool_plugin

pytest.importorskip("loguru", reason="needs Pipecat's imports (dev extra)")
pytest.importorskip("pipecat.services.openai.realtime.llm", reason="needs pipecat-ai (the Makefile's NODEPS)")
from pipecat.adapters.schemas.function_schema import FunctionSchema
from pipecat.adapters.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    LLMContextFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner


@pytest.fixture
def plugin() -> ModelPlugin:
    return weather_tool_plugin()


class _Sink(FrameProcessor):
    """Keeps what comes out of the service; `spoke` once the answer's text names the tool's output."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []
        self.spoke = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        self.frames.append(frame)
        if isinstance(frame, TTSTextFrame) and "degrees" in frame.text:
            self.spoke.set()
        await self.push_frame(frame, direction)


async def test_pipecat_realtime_service_calls_a_tool_and_hears_the_answer(server: EmbeddedServer) -> None:
    weather = FunctionSchema(
        name="get_weather",
        description="The current weather in a city.",
        properties={"city": {"type": "string"}},
        required=["city"],
    )
    context = LLMContext(
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=ToolsSchema(standard_tools=[weather]),
    )
    aggregators = LLMContextAggregatorPair(context)
    service = OpenAIRealtimeLLMService(
        api_key="unused", base_url=server.url, settings=OpenAIRealtimeLLMService.Settings(model="scripted")
    )
    called: list[dict[str, Any]] = []

    async def get_weather(params: FunctionCallParams) -> None:
        called.append(dict(params.arguments))
        await params.result_callback("21 degrees")

    service.register_function("get_weather", get_weather)
    sink = _Sink()
    worker = PipelineWorker(
        Pipeline([aggregators.user(), service, sink, aggregators.assistant()]), cancel_on_idle_timeout=False
    )
    runner = WorkerRunner()
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        await worker.queue_frames([LLMContextFrame(context)])
        await asyncio.wait_for(sink.spoke.wait(), 20)
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(run, 10)
    assert called == [{"city": "Paris"}]
    said = "".join(f.text for f in sink.frames if isinstance(f, TTSTextFrame))
    assert "21 degrees" in said  # the answer speaks the tool's output (Pipecat sends it JSON-encoded)
    assert sum(len(f.audio) for f in sink.frames if isinstance(f, TTSAudioRawFrame)) > 0
    assert not [f for f in sink.frames if isinstance(f, ErrorFrame)]
