"""Omni-DuplexEval's runner hooks: one session per sample, what it records, and the sample's extras.

One attempt, every wait bounded (`RunConfig.bounds`; the lifecycle is `duplexkit.client.converse`):
configure → stream on the media clock (bound: clip duration + slack; on a stall `input_timeout` is recorded
and the sample still lands with its transcript) → commit (bound: `commit_timeout`; on a stall the commit
stays queued ahead of the padding and the padding still starts) → pad silence until stopped, while draining
on a quiet window of units the model decides without speaking (`client.drain`; bound: `drain_timeout`) →
final playback ack → close (bound: `close_timeout`; the outer wait gives the inner one `close_grace` more).
Padding that fails with anything but a closed transport surfaces as the sample's error. The retry policy
around attempts is the shared runner's (`duplexkit.bench.runner`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from duplexkit.bench.artifacts import write_json_atomic
from duplexkit.bench.attempt import Attempt, RunConfig
from duplexkit.bench.media import PreparedMedia
from duplexkit.bench.omni_duplex_eval.dataset import Sample
from duplexkit.bench.retry import AttemptOutcome
from duplexkit.bench.runner import (
    CapacityRefused,
    is_capacity_refusal,
    record_close,
    record_resumes,
)
from duplexkit.bench.speech import speech_segments
from duplexkit.client import DuplexClient, SessionError, SessionProgress, converse, dump_events
from duplexkit.client.collector import AUDIO_DELTAS
from duplexkit.client.wavfile import write_wav

ARTIFACTS = ("output.wav", "events.json")
"""A published sample's extras (kept unless `--no-audio`), withdrawn when a redo of it fails."""


async def run_attempt(
    sample: Sample, media: PreparedMedia, config: RunConfig, progress: SessionProgress | None = None
) -> Attempt:
    """One session for one sample; raises `CapacityRefused` when the server has no slot. `progress`
    follows the session's steps (the harness reads it when the attempt's outer deadline fires)."""
    outcome = AttemptOutcome()
    bounds = config.bounds
    input_bound = bounds.input_bound_s(media.duration_ms / 1000.0)
    meta: dict[str, Any] = {
        "sentence_timing": config.sentence_timing,
        "bounds": {
            "configure_timeout": bounds.configure_timeout_s,
            "input_timeout": input_bound,
            "commit_timeout": bounds.commit_timeout_s,
            "drain_timeout": bounds.drain_timeout_s,
            "close_timeout": bounds.close_timeout_s,
        },
    }
    async with DuplexClient(
        config.url,
        api_key=config.api_key,
        model=config.model,
        protocol=config.protocol,
        open_timeout_s=bounds.open_timeout_s,
        resume=config.resume_policy(),
        placement=config.placement,
        sentence_timing=config.sentence_timing,
    ) as client:
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
                progress=progress,
            )
        except SessionError as exc:
            if is_capacity_refusal(exc.event or {}):
                raise CapacityRefused(str(exc)) from None
            raise
        if conversation.interrupted is not None:  # a lost connection or a padding failure fails the attempt
            raise conversation.interrupted
        record_resumes(client, meta, outcome)
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
            "decision_rule": drain.decision_rule,
            "quiet_rule": drain.quiet_rule,
        }
        outcome.drain_settled = drain.settled
        if conversation.ack_timed_out:
            outcome.ack_timeout = bounds.ack_timeout_s
        if drain.outcome == "timeout":
            outcome.drain_timeout = bounds.drain_timeout_s
        elif drain.outcome == "connection_closed":
            outcome.transport_error = "connection closed during the drain"
        record_close(close, outcome, meta, bounds)

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
        elif event.type in AUDIO_DELTAS:  # either dialect's name
            marks.append({"t": round(event.media_ms / 1000, 3), "decision": "speak"})
    return marks


def sample_meta(sample: Sample) -> dict[str, Any]:
    """The dataset fields every `<id>.meta.json` records (the judge reads them back)."""
    return {
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
    }


def write_artifacts(folder: Path, attempt: Attempt) -> None:
    """`output.wav` (24 kHz) and `events.json` of a published sample, into its existing folder."""
    if attempt.audio is not None:
        write_wav(folder / "output.wav", attempt.audio, 24_000)
    write_json_atomic(folder / "events.json", attempt.events)
