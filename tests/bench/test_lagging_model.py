"""A model slower than real time answers its backlog after the commit; the drain must wait for the answer
to the committed unit, not settle on the first late listen of an earlier unit.

The server is duplexkit's own (real sockets), the model the scripted double stepping 200 ms units but
taking 300 ms per step: 1.5x real time, as a loaded GPU server would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.media import prepare_media
from duplexkit.bench.omni_duplex_eval.runner import run_attempt
from duplexkit.client import SessionBounds
from duplexkit.engine import Decision, Unit
from duplexkit.models.base import ModelPlugin, ModelSession, SamplingParams
from duplexkit.models.scripted import ScriptedModel
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.bench.conftest import clip_sample

STEP_S = 0.3
"""Per 200 ms unit: the model falls behind by 100 ms a unit."""


class _LaggingSession(ModelSession):
    def __init__(self, inner: ModelSession) -> None:
        self._inner = inner
        self.sampling = inner.sampling

    def configure(self, sampling: SamplingParams, extra_body: Mapping[str, Any]) -> None:
        self._inner.configure(sampling, extra_body)
        self.sampling = sampling

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        await asyncio.sleep(STEP_S)
        async for decision in self._inner.step(unit, request_started_at):
            yield decision


class _LaggingModel(ModelPlugin):
    name = "lagging"

    def __init__(self, **args: str) -> None:
        self._inner = ScriptedModel.from_args({"chunk_period_ms": "200", "first_output_ms": "0", **args})
        self.capabilities = self._inner.capabilities
        self.default_sampling = self._inner.default_sampling

    def new_session(self) -> ModelSession:
        return _LaggingSession(self._inner.new_session())


async def test_a_model_lagging_behind_real_time_gets_its_reply_to_the_commit_published() -> None:
    # 1.1 s of speech: units 0-4 are listened to, the residual unit 5 (closed by the commit) is answered.
    # The listens of units 3 and 4 arrive after the commit's acknowledgement; with a 0.5 s quiet window,
    # settling on them would end the drain before the reply to unit 5 (due ~0.9 s after the commit).
    sample = clip_sample("lagging", seconds=1.1)
    media = prepare_media(sample, fps=1.0)
    async with EmbeddedServer(_LaggingModel(), ServerConfig(max_sessions=4)) as server:
        config = RunConfig(url=server.url, bounds=SessionBounds(settle_s=0.5, drain_timeout_s=20.0))
        attempt = await run_attempt(sample, media, config)
    assert [s["sentence"] for s in attempt.sentences] == ["This is a scripted reply."]
    assert attempt.outcome.response_done
    assert attempt.meta["drain"]["outcome"] == "settled"
    assert attempt.meta["drain"]["decision_rule"] == "server_unit_end"
    assert attempt.meta["responses"][0]["status"] == "completed"
    # our client connects with duplex=1 and hears vLLM-Omni's (beta) names: the timeline still sees speech
    decisions = {mark["decision"] for mark in attempt.meta["timeline"]["decisions"]}
    assert decisions == {"listen", "speak"}


async def test_a_lagging_model_that_answers_one_unit_after_the_commit_gets_its_reply_published() -> None:
    # Units 0-4 and the residual unit 5 (closed by the commit) are listened to; the model speaks on unit 6,
    # the first padded unit. Its listen on unit 5 arrives ~0.9 s after the commit, when a 0.5 s wall window
    # after the commit has long run out; the reply (~0.3 s later) must still be waited for.
    sample = clip_sample("lagging_late", seconds=1.1)
    media = prepare_media(sample, fps=1.0)
    script = json.dumps([{"listen": True}] * 6 + [{"speak": "A late reply."}])
    async with EmbeddedServer(_LaggingModel(script=script), ServerConfig(max_sessions=4)) as server:
        config = RunConfig(url=server.url, bounds=SessionBounds(settle_s=0.5, drain_timeout_s=20.0))
        attempt = await run_attempt(sample, media, config)
    assert [s["sentence"] for s in attempt.sentences] == ["A late reply."]
    assert attempt.meta["drain"]["outcome"] == "settled"
    assert attempt.meta["drain"]["quiet_rule"] == "units"
