"""The chat client the LLM judge talks through: any OpenAI-compatible endpoint, via the official `openai` SDK.

- At most `concurrency` requests are in flight; each is bounded by `timeout_s`; temperature 0.1 (the
  Omni-DuplexEval scorer's) unless the benchmark's judge says otherwise, and `max_tokens` and `seed` when
  set (FDB's relevance judge sends `seed: 0`, as upstream does).
- 429, 5xx, timeouts and connection errors are retried `retries` times with exponential backoff
  (`backoff_s` * 2^k, jittered). A judge still unreachable after that raises `JudgeUnreachable` (nothing
  else will get through either); a request still refused or timing out raises `JudgeRequestError`.
- A refusal saying the request exceeds the model's context raises `ContextOverflow` (not retried).
- The reply text is the first choice that carries text, so a reply with several choices (tool calls, empty
  ones) still yields its text; no text at all reads as an empty reply.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

TEMPERATURE = 0.1
_OVERFLOW = re.compile(
    r"context (length|window)|maximum context|too many tokens|prompt is too long|context_length_exceeded"
    r"|exceeds the (model'?s? )?(maximum|max)",
    re.IGNORECASE,
)


class JudgeRequestError(RuntimeError):
    """The judge refused a request for good (a non-retryable status, or retries exhausted on 429/5xx)."""


class ContextOverflow(JudgeRequestError):
    """The request does not fit the judge model's context."""


class JudgeUnreachable(RuntimeError):
    """The judge could not be reached (connection errors or timeouts) after every retry."""


class ChatClient:
    """Chat completions against one model at one OpenAI-compatible base URL (e.g. `http://host:8000/v1`)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        concurrency: int,
        timeout_s: float = 120.0,
        retries: int = 4,
        backoff_s: float = 1.0,
        temperature: float = TEMPERATURE,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self._sdk = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)
        self._slots = asyncio.Semaphore(concurrency)
        self._retries = retries
        self._backoff_s = backoff_s

    async def complete(self, messages: Sequence[ChatCompletionMessageParam]) -> str:
        """The judge's reply text to `messages` (possibly empty); raises as the module docstring says."""
        attempt = 0
        while True:
            last = attempt == self._retries
            try:
                async with self._slots:
                    completion = await self._sdk.chat.completions.create(
                        model=self.model,
                        messages=list(messages),
                        temperature=self.temperature,
                        max_tokens=openai.omit if self.max_tokens is None else self.max_tokens,
                        seed=openai.omit if self.seed is None else self.seed,
                    )
                return reply_text(completion)
            except openai.APITimeoutError as exc:
                if last:
                    raise JudgeRequestError(f"no reply within the timeout, {attempt + 1} attempts") from exc
            except openai.APIConnectionError as exc:
                if last:
                    raise JudgeUnreachable(f"judge at {self.base_url} unreachable: {exc}") from exc
            except openai.APIStatusError as exc:
                if _is_overflow(exc):
                    raise ContextOverflow(f"HTTP {exc.status_code}: {_message(exc)}") from exc
                if not (exc.status_code == 429 or exc.status_code >= 500) or last:
                    raise JudgeRequestError(f"HTTP {exc.status_code}: {_message(exc)}") from exc
            await asyncio.sleep(self._backoff_s * 2**attempt * random.uniform(0.5, 1.0))
            attempt += 1

    async def aclose(self) -> None:
        await self._sdk.close()


def reply_text(completion: ChatCompletion) -> str:
    """The text of the first choice that has any (content given as a string or as text parts)."""
    for choice in completion.choices:
        content: Any = choice.message.content
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if isinstance(content, str) and content.strip():
            return content
    return ""


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        detail = body.get("message") or body.get("error") or body
        if isinstance(detail, dict):
            detail = detail.get("message", detail)
        return str(detail)[:300]
    return str(exc.message)[:300]


def _is_overflow(exc: openai.APIStatusError) -> bool:
    return exc.status_code in (400, 413) and bool(_OVERFLOW.search(f"{exc.message} {exc.body}"))
