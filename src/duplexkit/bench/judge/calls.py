"""One sample's judge calls with the follow-up rule: a reply that does not parse gets exactly one follow-up
quoting it and the parse error, and both attempts go to the sample's trace (in call order, so the trace file
is deterministic). Shared by every benchmark's LLM judge; each brings its prompts and reply fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from openai.types.chat import ChatCompletionContentPartParam, ChatCompletionMessageParam

from duplexkit.bench.judge.base import ScoringError
from duplexkit.bench.judge.client import ChatClient
from duplexkit.bench.judge.frames import data_url
from duplexkit.bench.judge.parsing import Field, ParseError, Verdict, parse_reply

_ASSISTANT_ECHO_CHARS = 4000


class PromptBook(Protocol):
    """A benchmark's prompt texts: each prompt filled with values, and the follow-up after a bad reply."""

    def render(self, name: str, **values: str) -> str: ...

    def follow_up(self, name: str, error: str, reply: str) -> str: ...


class JudgeCalls:
    """The judge calls of one sample, with the follow-up rule and the sample's parse-failure trace."""

    def __init__(
        self,
        chat: ChatClient,
        prompts: PromptBook,
        fields: Mapping[str, tuple[Field, ...]],
        texts: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self._chat = chat
        self._prompts = prompts
        self._fields = fields
        self._texts = texts or {}
        self._traces: dict[int, list[dict[str, Any]]] = {}

    def trace(self) -> list[dict[str, Any]]:
        """Trace lines in call order (not completion order), so the file is deterministic."""
        return [line for order in sorted(self._traces) for line in self._traces[order]]

    async def ask(
        self, name: str, order: int, label: str, values: Mapping[str, str], images: Sequence[bytes] = ()
    ) -> Verdict:
        """Ask prompt `name` filled with `values` (plus images); one follow-up if the reply does not parse."""
        text = self._prompts.render(name, **values)
        content: str | list[ChatCompletionContentPartParam] = text
        if images:
            content = [{"type": "text", "text": text}]
            content += [{"type": "image_url", "image_url": {"url": data_url(jpeg)}} for jpeg in images]
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": content}]
        reply = await self._chat.complete(messages)
        try:
            return parse_reply(reply, self._fields[name], self._texts.get(name, ()))
        except ParseError as exc:
            first_error = str(exc)
        follow_up = self._prompts.follow_up(name, first_error, reply)
        if reply.strip():
            messages.append({"role": "assistant", "content": reply[:_ASSISTANT_ECHO_CHARS]})
        messages.append({"role": "user", "content": follow_up})
        lines: list[dict[str, Any]] = [
            {"call": label, "attempt": 1, "parse_error": first_error, "reply": reply}
        ]
        self._traces[order] = lines
        second = await self._chat.complete(messages)
        try:
            verdict = parse_reply(second, self._fields[name], self._texts.get(name, ()))
        except ParseError as exc:
            lines.append(
                {
                    "call": label,
                    "attempt": 2,
                    "follow_up": follow_up,
                    "reply": second,
                    "parse_error": str(exc),
                }
            )
            raise ScoringError(f"{label}: the judge's reply did not parse after a follow-up: {exc}") from exc
        lines.append(
            {"call": label, "attempt": 2, "follow_up": follow_up, "reply": second, "parse_error": None}
        )
        return verdict
