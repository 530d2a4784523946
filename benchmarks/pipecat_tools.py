"""Pipecat's `OpenAIRealtimeLLMService` (pipecat-ai 1.14, unchanged, `base_url` at our server) making a
tool call: a pipeline with its context aggregators asks for a response, the scripted model calls
`get_weather`, Pipecat runs its registered function, sends the output, asks again, and the spoken answer
should come out as `TTSTextFrame`s and `TTSAudioRawFrame`s. Prints what came back.

Pipecat is installed without its dependencies here (for its model files); its realtime service also needs
`loguru==0.7.3 wait_for2==0.4.1 loudness==0.2.0 sentencex==1.0.32` (small, pure wheels; pinned in the
dev extra). What it needs from a server (its `pipecat/services/openai/realtime/llm.py` and `events.py`):
`session.created` before it sends `session.update`, `session.updated` before its first `response.create`,
every event valid for its pydantic models (`event_id` on each; GA `audio/pcm` formats with `rate: 24000`
only), `conversation.item.added` with the `function_call` before `response.function_call_arguments.done`,
a `response.done` for every `response.create`, and no `error` (any is fatal to it).

Seen (2026-12-02, docs/protocol.md "Clients"): as served, it stops at our `session.created`, which its
receive loop cannot parse: a GA session starts at 16 kHz input (`audio/pcm` rate 16000) until the client
names a rate, and Pipecat's `SessionCreatedEvent` allows only OpenAI's 24000; it prints
`{"function_called_with": [], "said": "", "audio_bytes": 0}`. With the GA dialect's sessions started at
24 kHz instead (`DIALECTS[Dialect.GA]`'s `input_sample_rate_hz=24_000`, as the beta dialect has; tried, not
kept: the suite's raw GA clients send 16 kHz without naming it) the whole round trip runs unchanged:
`{"function_called_with": [{"city": "Paris"}], "said": "It is \"21 degrees\".", "audio_bytes": 9120}`.

    PYTHONPATH=src .venv/bin/python benchmarks/pipecat_tools.py
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pipecat.adapters.schemas.function_schema import FunctionSchema
from pipecat.adapters.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    EndFrame,
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

from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer

CALLS = json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}])


def _plugin() -> ModelPlugin:
    return load_model(
        "scripted",
        {
            "first_output_ms": "50",
            "token_ms": "5",
            "ms_per_char": "10",
            "chunk_period_ms": "200",
            "tool_calls": CALLS,
            "reply": "It is {output}.",
        },
    )


class _Sink(FrameProcessor):
    """Collects what comes out of the pipeline's end."""

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


async def round_trip(server: EmbeddedServer) -> None:
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
    except TimeoutError:
        print("no spoken answer within 20 s (see Pipecat's log above)")
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(run, 10)
    said = "".join(f.text for f in sink.frames if isinstance(f, TTSTextFrame))
    audio = sum(len(f.audio) for f in sink.frames if isinstance(f, TTSAudioRawFrame))
    print(json.dumps({"function_called_with": called, "said": said, "audio_bytes": audio}))


async def main() -> None:
    async with EmbeddedServer(_plugin()) as server:
        await round_trip(server)


if __name__ == "__main__":
    asyncio.run(main())
