"""A fake OpenAI-compatible server on a real loopback socket: chat completions (the relevance judge) and
`/v1/audio/transcriptions` (word timing), answering as OpenAI's API reference documents both."""

from __future__ import annotations

import email.parser
import email.policy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.loopback import serve_in_thread

ChatScript = Callable[[dict[str, Any]], str]
"""Request body → the assistant's reply text."""
TranscriptionScript = Callable[[dict[str, Any]], dict[str, Any]]
"""Form fields (the file as bytes under "file") → the verbose_json body."""


def _form_fields(content_type: str, body: bytes) -> dict[str, Any]:
    """A multipart/form-data body's fields (stdlib parser; repeated fields become lists)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        value: Any = part.get_payload(decode=True)
        if part.get_filename() is None:
            value = value.decode()
        if name in fields:
            previous = fields[name]
            fields[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            fields[name] = value
    return fields


@dataclass
class FakeOpenAI:
    url: str = ""
    chat: ChatScript = lambda body: '{"analysis": "on topic", "relevance": 4}'
    transcribe: TranscriptionScript = lambda form: {"text": "", "words": []}
    chat_requests: list[dict[str, Any]] = field(default_factory=list)
    transcription_requests: list[dict[str, Any]] = field(default_factory=list)

    async def handle_chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.chat_requests.append(body)
        text = self.chat(body)
        return JSONResponse(
            {
                "id": "cmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "fake"),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
            }
        )

    async def handle_transcription(self, request: Request) -> JSONResponse:
        form = _form_fields(request.headers["content-type"], await request.body())
        self.transcription_requests.append(form)
        return JSONResponse(self.transcribe(form))


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", fake.handle_chat, methods=["POST"]),
            Route("/v1/audio/transcriptions", fake.handle_transcription, methods=["POST"]),
        ]
    )
    with serve_in_thread(app) as base:
        fake.url = f"{base}/v1"
        yield fake
