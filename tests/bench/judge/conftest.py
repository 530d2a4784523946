"""A fake OpenAI-compatible judge on a real loopback socket, a tiny test video, and run-folder builders."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from duplexkit.bench.judge import ChatClient
from duplexkit.bench.omni_duplex_eval import BUILTIN_PROMPTS, LLMJudge, PromptSet
from tests.loopback import serve_in_thread

Reply = tuple[int, dict[str, Any]]
Script = Callable[[dict[str, Any]], Reply]

TEMPORAL, CONTENT, CORRECTION, REMINDER = "temporal", "content", "correction", "reminder"
_KINDS = {
    "You are grading one sentence": TEMPORAL,
    "You are grading everything": CONTENT,
    "corrected a mistake": CORRECTION,
    "alerted the user": REMINDER,
}


def completion(*contents: str | None) -> Reply:
    """A 200 chat completion with one choice per content (None: a choice without text)."""
    choices = [
        {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": "stop"}
        for i, c in enumerate(contents)
    ]
    body = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-judge",
        "choices": choices,
    }
    return 200, body


def error(status: int, message: str) -> Reply:
    return status, {"object": "error", "message": message, "type": "BadRequestError", "code": status}


def user_text(request: dict[str, Any], index: int = 0) -> str:
    """The text of the `index`-th user message of a recorded request."""
    users = [m for m in request["messages"] if m["role"] == "user"]
    content = users[index]["content"]
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content if part["type"] == "text")


def image_count(request: dict[str, Any]) -> int:
    content = request["messages"][0]["content"]
    return 0 if isinstance(content, str) else sum(part["type"] == "image_url" for part in content)


def kind_of(request: dict[str, Any]) -> str:
    text = user_text(request)
    return next((kind for phrase, kind in _KINDS.items() if phrase in text), "other")


def is_follow_up(request: dict[str, Any]) -> bool:
    return len([m for m in request["messages"] if m["role"] == "user"]) > 1


def valid_replies(request: dict[str, Any]) -> Reply:
    """Every prompt answered with valid JSON: temporal 2/relevant, content 2.5, success 1."""
    kind = kind_of(request)
    if kind == TEMPORAL:
        return completion('{"temporal_score": 2, "is_relevant": 1, "reasoning": "fits"}')
    if kind == CONTENT:
        return completion('{"content_score": 2.5, "reasoning": "mostly right"}')
    return completion('{"success_score": 1, "reasoning": "reminded"}')


@dataclass
class FakeJudge:
    """Answers POST /v1/chat/completions with `script(request_json)`; records every request."""

    url: str = ""
    script: Script = valid_replies
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def reset(self) -> None:
        self.script, self.delay_s = valid_replies, 0.0
        self.requests.clear()
        self.in_flight = self.max_in_flight = 0

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if kind_of(r) == kind]

    async def handle(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            status, payload = self.script(body)
        finally:
            self.in_flight -= 1
        return JSONResponse(payload, status_code=status)


@pytest.fixture(scope="session")
def _judge_server() -> Iterator[FakeJudge]:
    fake = FakeJudge()
    app = Starlette(routes=[Route("/v1/chat/completions", fake.handle, methods=["POST"])])
    with serve_in_thread(app) as base:
        fake.url = f"{base}/v1"
        yield fake


@pytest.fixture
def fake_judge(_judge_server: FakeJudge) -> Iterator[FakeJudge]:
    _judge_server.reset()
    yield _judge_server
    _judge_server.reset()


def make_judge(
    fake: FakeJudge, *, model: str = "fake-judge", concurrency: int = 4, prompts: PromptSet = BUILTIN_PROMPTS
) -> LLMJudge:
    chat = ChatClient(base_url=fake.url, model=model, api_key="test", concurrency=concurrency, backoff_s=0.01)
    return LLMJudge(chat, prompts)


# --------------------------------------------------------------------------------------------------
# Video
# --------------------------------------------------------------------------------------------------

SECOND_COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
"""Second k of the test video is filled with SECOND_COLOURS[k % 3]."""


def make_video(seconds: int, fps: int = 4, size: tuple[int, int] = (64, 48)) -> bytes:
    width, height = size
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(seconds * fps):
            image = np.zeros((height, width, 3), np.uint8)
            image[:, :] = SECOND_COLOURS[index // fps % 3]
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


@pytest.fixture(scope="session")
def video12() -> bytes:
    return make_video(12)


# --------------------------------------------------------------------------------------------------
# Run folders
# --------------------------------------------------------------------------------------------------


@dataclass
class FakeSample:
    """A dataset sample as scoring sees it."""

    split: str
    id: str
    video: bytes | None = None
    ground_truth: dict[str, Any] | None = None

    def video_bytes(self) -> bytes | None:
        return self.video


def sentences(*items: tuple[str, float, float]) -> list[dict[str, Any]]:
    return [{"sentence": s, "start": a, "end": b} for s, a, b in items]


def write_sample(
    run_dir: Path,
    split: str,
    sample_id: str,
    response: list[dict[str, Any]] | None,
    *,
    question: str = "Describe the video.",
    answer1: str | None = "ref one",
    answer2: str | None = "ref two",
    reminders: tuple[float | None, float | None] = (None, None),
    duration: float = 12.0,
    clock: str = "media",
) -> None:
    """One sample of a run folder as docs/run-format.md lays it out; `response=None` makes it failed."""
    family = "rtd" if split.startswith("RTD_") else "pr"
    task = split
    if family == "pr":
        task = (
            "correction"
            if "correction" in split.lower()
            else "post_event_reminder"
            if "post_event" in split.lower()
            else "event_reminder"
        )
    meta = {
        "split": split,
        "id": sample_id,
        "task": task,
        "family": family,
        "status": "failed" if response is None else "published",
        "error": "drain_timeout" if response is None else None,
        "sample": {
            "question_text": question,
            "answer1": answer1,
            "answer2": answer2,
            "reminder1": reminders[0],
            "reminder2": reminders[1],
            "video_type": "test",
            "video_duration": duration,
        },
        "clock": clock,
        "pace": "realtime" if clock == "media" else "as-fast-as-possible",
    }
    folder = run_dir / "records" / split
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{sample_id}.meta.json").write_text(json.dumps(meta), encoding="utf-8")
    if response is not None:
        (folder / f"{sample_id}.json").write_text(json.dumps(response), encoding="utf-8")


def write_run_json(run_dir: Path, source: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "dataset": {"source": source, "fingerprint": "x", "selection": {"family": "all"}, "samples": 0}
    }
    (run_dir / "run.json").write_text(json.dumps(payload), encoding="utf-8")
