"""The Omni-DuplexEval sample runner: the lifecycle of one sample, its retries, and the run around them.

One attempt, every wait bounded (`RunConfig.bounds`; the lifecycle is `duplexkit.client.converse`):
configure → stream on the media clock (bound: clip duration + slack; on a stall `input_timeout` is recorded
and the sample still lands with its transcript) → commit (bound: `commit_timeout`; on a stall the commit
stays queued ahead of the padding and the padding still starts) → pad silence until stopped, while draining
on a quiet window in which `response.listen` acknowledgements are not activity (bound: `drain_timeout`) →
final playback ack → close (bound: `close_timeout`; the outer wait gives the inner one `close_grace` more).
Padding that fails with anything but a closed transport surfaces as the sample's error. The retry policy
is `duplexkit.bench.retry`; artifacts are `duplexkit.bench.artifacts`.

The runner talks to servers only over the wire, through `duplexkit.client`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidStatus

from duplexkit.bench.artifacts import RunDir, write_json_atomic
from duplexkit.bench.datasets import Sample
from duplexkit.bench.media import PreparedMedia, prepare_media
from duplexkit.bench.retry import (
    AttemptOutcome,
    Verdict,
    capacity_backoff_s,
    failure_reason,
    timeout_label,
    verdict,
)
from duplexkit.bench.speech import speech_segments
from duplexkit.client import (
    ConnectionLost,
    DuplexClient,
    SessionBounds,
    SessionError,
    converse,
    dump_events,
)
from duplexkit.client.reconnect import ResumePolicy
from duplexkit.client.wavfile import write_wav
from duplexkit.protocol.errors import ErrorCode

log = logging.getLogger("duplexkit.bench")

CAPACITY_CODES = frozenset({ErrorCode.SESSION_CAPACITY_EXHAUSTED.value, "resource_exhausted"})
"""Refusals that mean "no slot now" (ours, and vLLM-Omni's), not a failed attempt."""
CAPACITY_HTTP_STATUSES = frozenset({429, 503})
"""Handshake statuses that mean the same, from servers that refuse before accepting the socket."""


def _is_capacity_refusal(event: dict[str, Any]) -> bool:
    """A capacity code, or any retryable `rate_limit_error`."""
    error = event.get("error")
    if not isinstance(error, dict):
        return False
    if str(error.get("code")) in CAPACITY_CODES:
        return True
    return error.get("type") == "rate_limit_error" and error.get("retryable") is True


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides how samples are run; recorded whole in `run.json`."""

    url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    pace: Literal["realtime", "as-fast-as-possible"] = "realtime"
    fps: float = 1.0
    chunk_ms: int = 200
    concurrency: int = 4
    bounds: SessionBounds = field(default_factory=SessionBounds)
    capacity_wait_max_s: float = 300.0
    keep_audio: bool = True
    resume: bool = True
    """Resume a session whose connection drops (`ResumePolicy`); the sample records `resumed: N`."""
    extra_body: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The config as recorded in `run.json`, with the bounds' fields inline."""
        data: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if key == "bounds":
                data.update(value)
            else:
                data[key] = value
        data["api_key"] = "***" if self.api_key else None
        return data

    def attempt_deadline_s(self, clip_s: float) -> float:
        """The outer bound of one attempt: the sum of its inner bounds, plus a little."""
        b = self.bounds
        return (
            b.configure_timeout_s
            + b.input_bound_s(clip_s)
            + b.commit_timeout_s
            + b.drain_timeout_s
            + b.close_timeout_s
            + b.close_grace_s
            + 5.0
        )


class CapacityRefused(Exception):
    """The server has no free session slot right now (retryable, not an attempt)."""


@dataclass(slots=True)
class Attempt:
    outcome: AttemptOutcome
    sentences: list[dict[str, Any]]
    meta: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    audio: np.ndarray | None = None


@dataclass(slots=True)
class SampleResult:
    split: str
    id: str
    status: Literal["published", "failed", "skipped"]
    retried: bool = False
    error: str | None = None
    ttfp_ms: float | None = None


async def run_attempt(sample: Sample, media: PreparedMedia, config: RunConfig) -> Attempt:
    """One session for one sample; raises `CapacityRefused` when the server has no slot."""
    outcome = AttemptOutcome()
    bounds = config.bounds
    input_bound = bounds.input_bound_s(media.duration_ms / 1000.0)
    meta: dict[str, Any] = {
        "bounds": {
            "configure_timeout": bounds.configure_timeout_s,
            "input_timeout": input_bound,
            "commit_timeout": bounds.commit_timeout_s,
            "drain_timeout": bounds.drain_timeout_s,
            "close_timeout": bounds.close_timeout_s,
        }
    }
    policy = ResumePolicy() if config.resume else None
    async with DuplexClient(config.url, api_key=config.api_key, model=config.model, resume=policy) as client:
        samples = np.frombuffer(media.pcm16, dtype="<i2").astype(np.float32) / 32768.0
        try:
            conversation = await converse(
                client,
                samples,
                sample_rate_hz=16_000,
                frames=media.frames,
                pace=config.pace,
                chunk_ms=config.chunk_ms,
                bounds=bounds,
                extra_body=config.extra_body,
            )
        except SessionError as exc:
            if _is_capacity_refusal(exc.event or {}):
                raise CapacityRefused(str(exc)) from None
            raise
        if conversation.interrupted is not None:  # a lost connection or a padding failure fails the attempt
            raise conversation.interrupted
        meta["resumed"] = client.resumed
        if client.resync is not None:  # the server could not replay what was missed: events are lost
            outcome.transport_error = f"resync_required: {client.resync.get('reason')}"
        report, drain, close = conversation.stream, conversation.drain, conversation.close
        assert report is not None and drain is not None
        meta["unit_ms"] = conversation.capabilities.chunk_period_ms
        if report.timed_out:
            outcome.input_timeout = input_bound
        if conversation.commit_timed_out:
            outcome.commit_timeout = bounds.commit_timeout_s
        # Conservative: the whole clip went out within its bound, the commit within its bound, and the
        # server acknowledged it; a commit that lands after its bound still counts as not committed.
        meta["input_committed"] = (
            outcome.input_timeout is None
            and outcome.commit_timeout is None
            and conversation.commit_acknowledged
        )
        meta["drain"] = {
            "outcome": drain.outcome,
            "waited_s": round(drain.waited_s, 3),
            "listens": drain.listens,
        }
        if drain.outcome == "timeout":
            outcome.drain_timeout = bounds.drain_timeout_s
        elif drain.outcome == "connection_closed":
            outcome.transport_error = "connection closed during the drain"
        if close is None:
            outcome.close_timeout = bounds.close_timeout_s
            meta["close"] = {"clean": False, "outcome": "timeout"}
        else:
            if not close.clean:
                outcome.close_timeout = bounds.close_timeout_s
            meta["close"] = {
                "clean": close.clean,
                "outcome": close.outcome,
                "elapsed_s": round(close.elapsed_s, 3),
            }

        collector = client.collector
        outcome.server_errors = [str(f.get("error", {}).get("code")) for f in collector.failures()]
        responses = collector.responses()
        outcome.response_done = bool(responses) and not collector.open_responses()
        meta.update(
            {
                "stream": report.to_json(),
                "responses": [r.to_json() for r in responses],
                "session": collector.session().to_json(),
                "pacing": report.pacing.to_json() if report.pacing else None,
                "timeline": {"decisions": _timeline(client), "input_speech": speech_segments(media.pcm16)},
            }
        )
        sentences = [s.to_json() for s in collector.sentences()]
        events = dump_events(client.events, client.connected_at) if config.keep_audio else []
        audio = collector.output_audio() if config.keep_audio else None
    return Attempt(outcome=outcome, sentences=sentences, meta=meta, events=events, audio=audio)


def _timeline(client: DuplexClient) -> list[dict[str, Any]]:
    """The model's decisions on the media clock: a listen per listened unit, speech per audio delta."""
    marks = []
    for event in client.events:
        if event.type == "response.listen":
            marks.append({"t": round(event.media_ms / 1000, 3), "decision": "listen"})
        elif event.type == "response.output_audio.delta":
            marks.append({"t": round(event.media_ms / 1000, 3), "decision": "speak"})
    return marks


class BenchmarkRunner:
    """Runs samples with bounded concurrency and the retry policy, publishing each to the run folder."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: RunDir,
        *,
        on_result: Callable[[SampleResult], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self.on_result = on_result or (lambda _: None)
        self.rng = rng or random.Random()

    async def run(self, samples: list[Sample], *, overwrite: bool = False) -> list[SampleResult]:
        self.run_dir.clean_temporaries()
        gate = asyncio.Semaphore(self.config.concurrency)

        async def one(sample: Sample) -> SampleResult:
            if not overwrite and self.run_dir.is_published(sample.split, sample.id):
                result = SampleResult(sample.split, sample.id, "skipped")
            else:
                async with gate:
                    result = await self.run_sample(sample)
            self.on_result(result)
            return result

        return list(await asyncio.gather(*(one(s) for s in samples)))

    async def run_sample(self, sample: Sample) -> SampleResult:
        """Prepare media off the event loop, run attempts per the retry policy, publish or record failure."""
        started_at = _now_iso()
        try:
            media = await asyncio.to_thread(prepare_media, sample, fps=self.config.fps)
        except Exception as exc:
            meta = self._base_meta(sample, started_at)
            meta.update(status="failed", error=f"media_error: {exc}", attempts=[], retry_count=0)
            self.run_dir.record_failure(sample.split, sample.id, meta)
            return SampleResult(sample.split, sample.id, "failed", error=meta["error"])
        attempts: list[dict[str, Any]] = []
        capacity_wait = 0.0
        attempt_no = 0
        while True:
            attempt_no += 1
            attempt, waited = await self._attempt_with_capacity(sample, media)
            capacity_wait += waited
            decision = verdict(attempt.outcome, attempt_no)
            attempts.append(_attempt_summary(attempt))
            if decision is not Verdict.RETRY:
                break
            attempts[-1]["sentences"] = attempt.sentences  # kept for diagnosis, never published
            log.info("%s/%s: retrying after %s", sample.split, sample.id, failure_reason(attempt.outcome))
        meta = self._base_meta(sample, started_at)
        meta.update(attempt.meta)
        outcome = attempt.outcome
        meta.update(
            {
                "status": "published" if decision is Verdict.PUBLISH else "failed",
                "error": None if decision is Verdict.PUBLISH else failure_reason(outcome),
                "response_done": outcome.response_done,
                "timeouts": {
                    "input_timeout": outcome.input_timeout,
                    "commit_timeout": outcome.commit_timeout,
                    "drain_timeout": outcome.drain_timeout,
                    "close_timeout": outcome.close_timeout,
                },
                "server_errors": outcome.server_errors,
                "retry_count": attempt_no - 1,
                "capacity_wait_s": round(capacity_wait, 3),
                "attempts": attempts,
                "finished_at": _now_iso(),
            }
        )
        retried = attempt_no > 1
        if decision is Verdict.PUBLISH:
            self._write_extras(sample, attempt)
            self.run_dir.publish(sample.split, sample.id, meta, attempt.sentences)
            ttfp = next(
                (r["ttfp_ms"] for r in meta.get("responses", []) if r.get("ttfp_ms") is not None), None
            )
            return SampleResult(sample.split, sample.id, "published", retried, ttfp_ms=ttfp)
        self.run_dir.record_failure(sample.split, sample.id, meta)
        return SampleResult(sample.split, sample.id, "failed", retried, error=meta["error"])

    async def _attempt_with_capacity(self, sample: Sample, media: PreparedMedia) -> tuple[Attempt, float]:
        """One attempt; capacity refusals before it are waited out (jittered, bounded) and not counted."""
        waited = 0.0
        refusals = 0
        deadline_s = self.config.attempt_deadline_s(media.duration_ms / 1000.0)
        while True:
            started = time.monotonic()
            try:
                async with asyncio.timeout(deadline_s):
                    return await run_attempt(sample, media, self.config), waited
            except (CapacityRefused, InvalidStatus) as exc:
                if isinstance(exc, InvalidStatus) and exc.response.status_code not in CAPACITY_HTTP_STATUSES:
                    return _failed_attempt(transport_error=f"handshake refused: {exc}"), waited
                refusals += 1
                remaining = self.config.capacity_wait_max_s - waited
                if remaining <= 0:
                    failed = _failed_attempt()
                    failed.outcome.capacity_exhausted = True
                    return failed, waited
                pause = min(remaining, capacity_backoff_s(refusals, rng=self.rng))
                await asyncio.sleep(pause)
                waited += pause
            except TimeoutError:
                label = timeout_label(time.monotonic() - started, deadline_s)
                if label == "inner_timeout_leaked":
                    log.warning(
                        "%s/%s: an inner wait's TimeoutError leaked out of the attempt",
                        sample.split,
                        sample.id,
                    )
                else:
                    log.warning(
                        "%s/%s: attempt hit its deadline of %.1f s", sample.split, sample.id, deadline_s
                    )
                return _failed_attempt(transport_error=label), waited
            except (ConnectionLost, ConnectionClosed, OSError) as exc:
                return _failed_attempt(transport_error=f"{type(exc).__name__}: {exc}"), waited
            except SessionError as exc:
                code = str((exc.event or {}).get("error", {}).get("code"))
                return _failed_attempt(server_errors=[code]), waited
            except Exception as exc:  # a coding error: fail the sample visibly, keep the run going
                log.exception("%s/%s: the runner failed", sample.split, sample.id)
                failed = _failed_attempt()
                failed.outcome.runner_error = f"{type(exc).__name__}: {exc}"
                return failed, waited

    def _base_meta(self, sample: Sample, started_at: str) -> dict[str, Any]:
        c = self.config
        return {
            "split": sample.split,
            "id": sample.id,
            "task": sample.task,
            "family": sample.family,
            "sample": {
                "question_text": sample.question_text,
                "answer1": sample.answer1,
                "answer2": sample.answer2,
                "reminder1": sample.reminder1,
                "reminder2": sample.reminder2,
                "video_type": sample.video_type,
                "video_duration": sample.video_duration,
            },
            "clock": "media" if c.pace == "realtime" else "invalid",
            "pace": c.pace,
            "fps": c.fps,
            "chunk_ms": c.chunk_ms,
            "model": c.model,
            "server_url": c.url,
            "started_at": started_at,
        }

    def _write_extras(self, sample: Sample, attempt: Attempt) -> None:
        if not self.config.keep_audio:
            return
        folder = self.run_dir.sample_dir(sample.split, sample.id)
        folder.mkdir(parents=True, exist_ok=True)
        if attempt.audio is not None:
            write_wav(folder / "output.wav", attempt.audio, 24_000)
        write_json_atomic(folder / "events.json", attempt.events)


def _failed_attempt(*, transport_error: str | None = None, server_errors: list[str] | None = None) -> Attempt:
    outcome = AttemptOutcome(transport_error=transport_error, server_errors=server_errors or [])
    return Attempt(outcome=outcome, sentences=[], meta={})


def _attempt_summary(attempt: Attempt) -> dict[str, Any]:
    o = attempt.outcome
    return {
        "error": None if verdict(o, 1) is Verdict.PUBLISH else failure_reason(o),
        "response_done": o.response_done,
        "server_errors": o.server_errors,
        "timeouts": {
            "input_timeout": o.input_timeout,
            "commit_timeout": o.commit_timeout,
            "drain_timeout": o.drain_timeout,
            "close_timeout": o.close_timeout,
        },
        "transport_error": o.transport_error,
    }


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
