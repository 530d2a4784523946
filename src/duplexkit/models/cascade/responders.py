"""Responders: what the cascade says back, streamed as text deltas.

A responder gets the conversation so far (the user's transcripts and what the assistant actually got to
say before it finished or was cut off), ending with the new user message, and yields the reply as it is
produced. `echo` repeats what it heard; `openai` streams a chat completion from any OpenAI-compatible
endpoint token by token, so the first audio can follow the first sentence rather than the whole answer.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from duplexkit.models.base import SamplingParams

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletionMessageParam

DEFAULT_INSTRUCTIONS = (
    "You are a voice assistant in a spoken conversation. Answer briefly, in one to three plain sentences "
    "with no lists, markup or emoji."
)


@dataclass(frozen=True, slots=True)
class Message:
    role: Literal["user", "assistant"]
    content: str


class Responder(Protocol):
    name: str

    def reply(self, history: Sequence[Message], sampling: SamplingParams) -> AsyncIterator[str]:
        """The reply to `history` (its last message is the user's), as text deltas."""
        ...


class EchoResponder:
    """Says back what it heard: "You said: <transcript>."."""

    name = "echo"

    async def reply(self, history: Sequence[Message], sampling: SamplingParams) -> AsyncIterator[str]:
        heard = history[-1].content.strip().rstrip(".!?")
        yield f"You said: {heard}."


class OpenAIResponder:
    """A streamed chat completion; `sampling` gives the temperature, token limit and system instructions."""

    name = "openai"

    def __init__(self, client: AsyncOpenAI, model: str) -> None:
        self._client = client
        self._model = model

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

    async def reply(self, history: Sequence[Message], sampling: SamplingParams) -> AsyncIterator[str]:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": sampling.instructions or DEFAULT_INSTRUCTIONS}
        ]
        for message in history:
            if message.role == "user":
                messages.append({"role": "user", "content": message.content})
            else:
                messages.append({"role": "assistant", "content": message.content})
        stream = await self._client.chat.completions.create(
            model=self._model,
            messages=messages,
            stream=True,
            temperature=sampling.temperature,
            max_tokens=sampling.max_tokens,
        )
        try:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
        finally:
            await stream.close()
