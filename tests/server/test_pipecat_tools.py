"""Pipecat's `OpenAIRealtimeLLMService` (pipecat-ai 1.14, unchanged, `base_url` at our server) makes a tool
call and hears the spoken answer.

Pipecat is installed without its dependencies (the Makefile's NODEPS); its realtime service also imports
`loguru`, `wait_for2`, `loudness` and `sentencex` (pinned in the dev extra). What it needs from a server
(read in its `pipecat/services/openai/realtime/llm.py` and `events.py`): `session.created` before it sends
`session.update`, `session.updated` before its first `response.create`, every event valid for its pydantic
models (`event_id` on each; a GA `audio/pcm` format only at `rate: 24000`, so a GA session must start at
OpenAI's 24 kHz), `conversation.item.added` with the `function_call` before
`response.function_call_arguments.done`, a `response.done` for every `response.create` (it holds the next
one until then; its first follows a text message item, with no audio), and no `error` (any is fatal to it)
but OpenAI's `response_cancel_not_active` and `conversation_already_has_active_response`, which it logs:
with its own turn detection it sends `response.cancel` at every interruption, a response active or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from duplexkit.models import ModelPlugin
from duplexkit.models.scripted import ScriptedModel, ScriptedParams, ScriptedSession
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.server.conftest import FailsOnceModel, tone_pcm16, weather_tool_plugin

pytest.importorskip("loguru", reason="needs Pipecat's imports (dev extra)")
pytest.importorskip("pipecat.services.openai.realtime.llm", reason="needs pipecat-ai (the Makefile's NODEPS)")
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
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
from pipecat.services.openai.realtime.events import (
    AudioConfiguration,
    AudioInput,
    ConversationItem,
    ConversationItemCreateEvent,
    ItemContent,
    SessionProperties,
)
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner


@pytest.fixture
def plugin() -> ModelPlugin:
    return weather_tool_plugin()


class _Errors(FrameProcessor):
    """At the pipeline's head: keeps the `ErrorFrame`s the service pushes upstream (a fatal server error)."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[ErrorFrame] = []
        self.seen = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame):
            self.errors.append(frame)
            self.seen.set()
        await self.push_frame(frame, direction)


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


WEATHER = FunctionSchema(
    name="get_weather",
    description="The current weather in a city.",
    properties={"city": {"type": "string"}},
    required=["city"],
)


@contextlib.asynccontextmanager
async def _pipeline(
    service: OpenAIRealtimeLLMService, context: LLMContext
) -> AsyncIterator[tuple[PipelineWorker, _Sink, _Errors]]:
    """The service in Pipecat's pipeline between its context aggregators, running, with the context
    queued (its first `response.create`); ended with an `EndFrame` on the way out."""
    aggregators = LLMContextAggregatorPair(context)
    errors, sink = _Errors(), _Sink()
    worker = PipelineWorker(
        Pipeline([errors, aggregators.user(), service, sink, aggregators.assistant()]),
        cancel_on_idle_timeout=False,
    )
    runner = WorkerRunner()
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        await worker.queue_frames([LLMContextFrame(context)])
        yield worker, sink, errors
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(run, 10)


async def _ask_the_weather(
    server: EmbeddedServer,
    settings: OpenAIRealtimeLLMService.Settings,
    after: Callable[[OpenAIRealtimeLLMService, PipelineWorker], Awaitable[None]] | None = None,
) -> tuple[list[dict[str, Any]], _Sink, _Errors]:
    """Pipecat asks the weather in Paris through the real service and pipeline, answers the call with
    "21 degrees" and waits for the spoken answer; then `after` runs with the pipeline still up. Returns the
    calls made, what came out of the service and the errors it pushed upstream."""
    context = LLMContext(
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=ToolsSchema(standard_tools=[WEATHER]),
    )
    service = OpenAIRealtimeLLMService(api_key="unused", base_url=server.url, settings=settings)
    called: list[dict[str, Any]] = []

    async def get_weather(params: FunctionCallParams) -> None:
        called.append(dict(params.arguments))
        await params.result_callback("21 degrees")

    service.register_function("get_weather", get_weather)
    async with _pipeline(service, context) as (worker, sink, errors):
        await asyncio.wait_for(sink.spoke.wait(), 20)
        if after is not None:
            await after(service, worker)
    return called, sink, errors


async def test_pipecat_realtime_service_calls_a_tool_and_hears_the_answer(server: EmbeddedServer) -> None:
    settings = OpenAIRealtimeLLMService.Settings(model="scripted")
    called, sink, errors = await _ask_the_weather(server, settings)
    assert called == [{"city": "Paris"}]
    said = "".join(f.text for f in sink.frames if isinstance(f, TTSTextFrame))
    assert "21 degrees" in said  # the answer speaks the tool's output (Pipecat sends it JSON-encoded)
    assert sum(len(f.audio) for f in sink.frames if isinstance(f, TTSAudioRawFrame)) > 0
    assert not errors.errors and not [f for f in sink.frames if isinstance(f, ErrorFrame)]


async def test_pipecat_survives_an_interruption_with_no_response_active_and_a_failed_retrieval(
    server: EmbeddedServer,
) -> None:
    """With server turn detection off, Pipecat answers an interruption with `input_audio_buffer.clear`,
    the pre-roll again and `response.cancel`, whether a response is active or not. After the answer has
    been spoken none is: the server must say so with OpenAI's `response_cancel_not_active`, the one code
    Pipecat tolerates there; any other error ends its connection. So for a retrieval of an unknown item:
    `item_retrieve_invalid_item_id` fails that retrieval alone. The connection is shown alive by what
    comes after: a message item Pipecat sends then is announced back (`on_conversation_item_created`)."""
    manual = SessionProperties(audio=AudioConfiguration(input=AudioInput(turn_detection=False)))
    settings = OpenAIRealtimeLLMService.Settings(model="scripted", session_properties=manual)
    announced = asyncio.Event()

    async def interrupt_then_append(service: OpenAIRealtimeLLMService, worker: PipelineWorker) -> None:
        @service.event_handler("on_conversation_item_created")
        async def created(_service: object, _item_id: str, item: Any) -> None:
            if getattr(item, "role", None) == "system":
                announced.set()

        await worker.queue_frame(InterruptionFrame())
        # A retrieval of an item that is not there fails on OpenAI's code; on any other it would hang.
        with pytest.raises(Exception, match="no conversation item"):
            await asyncio.wait_for(service.retrieve_conversation_item("item_gone"), 10)
        note = ItemContent(type="input_text", text="Be brief.")
        item = ConversationItem(type="message", role="system", content=[note])
        await service.send_client_event(ConversationItemCreateEvent(item=item))
        await asyncio.wait_for(announced.wait(), 10)

    called, _, errors = await _ask_the_weather(server, settings, interrupt_then_append)
    assert called == [{"city": "Paris"}] and announced.is_set()
    assert not errors.errors, errors.errors


async def test_pipecat_hears_a_failed_response_and_keeps_its_connection() -> None:
    """A model failure within a response is reported as OpenAI does, on the `response.done` (`failed`,
    `status_details.error`): Pipecat pushes it as one non-fatal `ErrorFrame` naming the message and keeps
    its connection, shown alive by what comes after: a message item it sends is announced back. An
    `error` event instead would end its receive loop, and the item would never be announced."""
    weather = weather_tool_plugin()
    assert isinstance(weather, ScriptedModel)
    announced = asyncio.Event()
    async with EmbeddedServer(
        FailsOnceModel(weather.params, fail_at=1), ServerConfig(max_sessions=4)
    ) as server:
        context = LLMContext(messages=[{"role": "user", "content": "What is the weather in Paris?"}])
        settings = OpenAIRealtimeLLMService.Settings(model="scripted")
        service = OpenAIRealtimeLLMService(api_key="unused", base_url=server.url, settings=settings)

        @service.event_handler("on_conversation_item_created")
        async def created(_service: object, _item_id: str, item: Any) -> None:
            if getattr(item, "role", None) == "system":
                announced.set()

        async with _pipeline(service, context) as (_, _, errors):
            await asyncio.wait_for(errors.seen.wait(), 10)
            note = ItemContent(type="input_text", text="Be brief.")
            item = ConversationItem(type="message", role="system", content=[note])
            await service.send_client_event(ConversationItemCreateEvent(item=item))
            await asyncio.wait_for(announced.wait(), 10)
            await asyncio.sleep(0.2)  # an error event right behind the failure would be in by now
    [failed] = errors.errors
    assert "model step failed: RuntimeError: boom" in failed.error and not failed.fatal


class _BargedIn(ScriptedSession):
    def interrupt(self) -> None:
        super().interrupt()
        assert isinstance(self._plugin, _BargeInModel)
        self._plugin.interrupted.set()


class _BargeInModel(ScriptedModel):
    """The weather tool model, whose sessions say when the server cut them (`interrupted`)."""

    def __init__(self, params: ScriptedParams) -> None:
        super().__init__(params)
        self.interrupted = threading.Event()  # (set on the server's loop, which may be another thread's)

    def new_session(self) -> ScriptedSession:
        return _BargedIn(self)


async def test_pipecat_keeps_its_connection_when_a_tool_result_comes_after_a_barge_in() -> None:
    """The user speaks while a slow tool runs: the model barges in on the call and the server retires it.
    The tool's result comes after: OpenAI takes a `function_call_output` for any call, so Pipecat's
    item is announced back and nothing is an `error` (Pipecat pushes a fatal `ErrorFrame` on any but two
    codes and its receive loop ends). The connection is shown alive by a message item announced back."""
    weather = weather_tool_plugin()
    assert isinstance(weather, ScriptedModel)
    model = _BargeInModel(weather.params)
    release, running, announced = asyncio.Event(), asyncio.Event(), asyncio.Event()
    outputs: list[Any] = []
    async with EmbeddedServer(model, ServerConfig(max_sessions=4)) as server:
        context = LLMContext(
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=ToolsSchema(standard_tools=[WEATHER]),
        )
        settings = OpenAIRealtimeLLMService.Settings(model="scripted")
        service = OpenAIRealtimeLLMService(api_key="unused", base_url=server.url, settings=settings)

        async def get_weather(params: FunctionCallParams) -> None:
            running.set()
            await release.wait()
            await params.result_callback("21 degrees")

        service.register_function("get_weather", get_weather)

        @service.event_handler("on_conversation_item_created")
        async def created(_service: object, _item_id: str, item: Any) -> None:
            if getattr(item, "type", None) == "function_call_output":
                outputs.append(item)
            if getattr(item, "role", None) == "system":
                announced.set()

        async with _pipeline(service, context) as (_, _, errors):
            await asyncio.wait_for(running.wait(), 20)
            speech = tone_pcm16(0.2)  # "hello?" while the tool runs (16 kHz; Pipecat resamples it)
            for _ in range(10):  # (more than the model's first unit holds)
                frame = InputAudioRawFrame(audio=speech, sample_rate=16_000, num_channels=1)
                await service.queue_frame(frame, FrameDirection.DOWNSTREAM)  # as its transport hands it
            assert await asyncio.to_thread(model.interrupted.wait, 20)  # the call is retired
            release.set()
            note = ItemContent(type="input_text", text="Be brief.")
            item = ConversationItem(type="message", role="system", content=[note])
            await asyncio.sleep(0.5)  # the result goes out first (Pipecat sends it on its own task)
            await service.send_client_event(ConversationItemCreateEvent(item=item))
            await asyncio.wait_for(announced.wait(), 10)
    assert not errors.errors, errors.errors
    assert [o.call_id for o in outputs] != []  # the late result was taken as an item
