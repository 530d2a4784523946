"""FDB's runner hooks: stream a sample's `input.wav` through a server in full duplex and record its side.

One attempt: configure (model-native turn taking, no commit ever: the model decides every unit) → stream
the whole input on the media clock (bound: its duration + slack) while the client acknowledges playback →
final playback ack → close. The model keeps listening to the end; whatever it says is recorded on the
input's timeline. The capacity wait, the attempt deadline, the retry policy and publication are the shared
runner's (`duplexkit.bench.runner`); this module only says what one session does and what it leaves:

- `output.wav`: the reply audio on the playback timeline at 16 kHz, the rate FDB's own example folders
  use and its scorers assume (their Silero call names no rate: a 24 kHz file would stretch every segment
  by 1.5x), cut or padded to exactly the input's length (FDB's scorers read it beside `input.wav`);
- `output.json`: the model side's words timed from the server's transcript and `audio_text_marks`
  (`words.server_words`), cut at the end of the interruption for interruption samples; another source
  can re-time them later (`time_words`);
- `events.json` and copies of the sample's `input.wav` and task files, so the folder is an FDB sample
  folder that FDB's own scorers accept.

`connect` is the one place a client is made, on the run's wire protocol (`--protocol duplex|openai|moshi`):
a full-duplex run needs no commit, so every protocol the client drives can be benchmarked.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.bench.artifacts import write_json_atomic
from duplexkit.bench.attempt import Attempt, RunConfig
from duplexkit.bench.fdb import metrics
from duplexkit.bench.fdb.dataset import Sample
from duplexkit.bench.fdb.words import server_words
from duplexkit.bench.retry import AttemptOutcome
from duplexkit.bench.runner import (
    CapacityRefused,
    is_capacity_refusal,
    record_close,
    record_resumes,
)
from duplexkit.bench.speech import speech_segments
from duplexkit.client import ConnectionLost, DuplexClient, SessionError, SessionProgress, dump_events
from duplexkit.client.session import close_session
from duplexkit.client.wavfile import read_wav, write_wav
from duplexkit.protocol.audio import resample

ARTIFACTS = ("output.wav", "output.json", "events.json")
"""A published sample's outputs, withdrawn when a redo of it fails (the copied inputs stay)."""
INPUT_RATE_HZ = 16_000
"""The rate of the input streamed and of the `output.wav` written (FDB's scorers assume it)."""
OUTPUT_RATE_HZ = 24_000
"""The rate of the client's playback timeline (`collector.output_audio`)."""


@dataclass(frozen=True)
class FdbInput:
    """`input.wav` at 16 kHz mono, ready to stream."""

    samples: npt.NDArray[np.float32]

    @property
    def duration_ms(self) -> float:
        return 1000.0 * len(self.samples) / INPUT_RATE_HZ

    @property
    def duration_s(self) -> float:
        return len(self.samples) / INPUT_RATE_HZ


def prepare_media(sample: Sample) -> FdbInput:
    """Read and resample the sample's input (off the event loop); `ValueError` for an unreadable WAV."""
    samples, rate = read_wav(sample.input_wav)
    return FdbInput(resample(samples, rate, INPUT_RATE_HZ) if rate != INPUT_RATE_HZ else samples)


def connect(config: RunConfig) -> DuplexClient:
    """The client for `config`'s server, on its wire protocol (`--protocol`), its handshake bounded."""
    return DuplexClient(
        config.url,
        api_key=config.api_key,
        model=config.model,
        protocol=config.protocol,
        open_timeout_s=config.bounds.open_timeout_s,
        resume=config.resume_policy(),
        placement=config.placement,
        audio_format=config.audio_format,
    )


def fit_to(samples: npt.NDArray[np.float32], length: int) -> npt.NDArray[np.float32]:
    """`samples` cut or zero-padded to exactly `length`."""
    if len(samples) >= length:
        return samples[:length]
    return np.concatenate([samples, np.zeros(length - len(samples), dtype=np.float32)])


async def run_attempt(
    sample: Sample, media: FdbInput, config: RunConfig, progress: SessionProgress | None = None
) -> Attempt:
    """One full-duplex session over the whole input; raises `CapacityRefused` when the server has no slot.
    `progress` follows the session's steps (the harness reads it when the outer deadline fires)."""
    progress = progress or SessionProgress()
    outcome = AttemptOutcome()
    bounds = config.bounds
    input_bound = bounds.input_bound_s(media.duration_s)
    meta: dict[str, Any] = {
        "bounds": {
            "configure_timeout": bounds.configure_timeout_s,
            "input_timeout": input_bound,
            "ack_timeout": bounds.ack_timeout_s,
            "close_timeout": bounds.close_timeout_s,
        },
        "input_s": round(media.duration_s, 3),
    }
    async with connect(config) as client:
        progress.client, progress.stage = client, "configure"
        try:
            capabilities = await client.configure(
                extra_body=config.extra_body,
                timeout_s=bounds.configure_timeout_s,
                capacity_timeout_s=bounds.capacity_timeout_s,
            )
        except SessionError as exc:
            if is_capacity_refusal(exc.event or {}):
                raise CapacityRefused(str(exc)) from None
            raise
        meta["unit_ms"] = capabilities.chunk_period_ms
        progress.stage = "input"
        report = await client.stream(
            media.samples,
            sample_rate_hz=INPUT_RATE_HZ,
            pace=config.pace,
            chunk_ms=config.chunk_ms,
            timeout_s=input_bound,
        )
        if report.timed_out:
            outcome.input_timeout = input_bound
        progress.stage = "final_ack"
        try:
            await client.ack_playback(timeout_s=bounds.ack_timeout_s)
        except TimeoutError:
            outcome.ack_timeout = bounds.ack_timeout_s
        except ConnectionLost:
            pass  # recorded just below
        if client.connection_lost:
            outcome.transport_error = "connection closed before the end of the input"
        # No drain in full duplex: what is observed is the input's own span, complete once all of it was
        # streamed; a close that stalls after that is then advisory, as after a settled drain.
        outcome.drain_settled = not report.timed_out and not client.connection_lost
        progress.stage = "close"
        record_close(await close_session(client, bounds), outcome, meta, bounds)
        record_resumes(client, meta, outcome)
        collector = client.collector
        outcome.server_errors = [str(f.get("error", {}).get("code")) for f in collector.failures()]
        responses = collector.responses()
        outcome.response_done = bool(responses) and not collector.open_responses()
        timed = server_words(client.events, collector.audio_placements(), until_s=media.duration_s)
        words, source = timed.words, dict(timed.source)
        if sample.task == "interruption" and sample.span is not None:
            words = metrics.cut_after(words, sample.span[1])
            source["cut_at_s"] = sample.span[1]
        meta.update(
            {
                "stream": report.to_json(),
                "responses": [r.to_json() for r in responses],
                "session": collector.session().to_json(),
                "word_timing": source,
                "words": len(words),
            }
        )
        meta["timeline"] = {
            "input_speech": speech_segments(_pcm16(media.samples)),
            "decisions": [
                {"t": round(chunk.start / OUTPUT_RATE_HZ, 3), "decision": "speak"}
                for chunk in collector.audio_placements()
                if chunk.start / OUTPUT_RATE_HZ < media.duration_s
            ],
        }
        meta["sentences_timing"] = "playback: the words grouped, before any interruption cut"
        audio = fit_to(resample(collector.output_audio(), OUTPUT_RATE_HZ, INPUT_RATE_HZ), len(media.samples))
        events = dump_events(client.events, client.connected_at)
        sentences = sentences_of(timed.words)
    progress.stage = "done"
    extras = {"output_json": metrics.output_json(words, source=source)}
    return Attempt(outcome=outcome, sentences=sentences, meta=meta, events=events, audio=audio, extras=extras)


def _pcm16(samples: npt.NDArray[np.float32]) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def sentences_of(words: list[metrics.Word]) -> list[dict[str, Any]]:
    """The published `<id>.json`: the words grouped into sentences (split after . ? !), each from its first
    word's start to its last word's end, so the report's reply lane shows what played, where it played."""
    out: list[dict[str, Any]] = []
    current: list[metrics.Word] = []
    for word in words:
        current.append(word)
        if word.text.endswith((".", "?", "!")) or word is words[-1]:
            last = current[-1]
            out.append(
                {
                    "sentence": " ".join(w.text for w in current),
                    "start": current[0].start,
                    "end": last.end if last.end is not None else last.start,
                }
            )
            current = []
    return out


def sample_meta(sample: Sample) -> dict[str, Any]:
    """The dataset fields every `<id>.meta.json` records."""
    return {
        "task": sample.task,
        "version": sample.version,
        "synthetic": sample.synthetic,
        "sample": {
            "question_text": None
            if sample.task != "interruption"
            else f"{sample.context} (interrupted by: {sample.interrupt})",
            "folder": str(sample.folder),
            "span": None if sample.span is None else list(sample.span),
            "context": sample.context,
            "interrupt": sample.interrupt,
        },
    }


def write_artifacts(folder: Path, sample: Sample, attempt: Attempt) -> None:
    """The FDB sample folder of a published sample: its inputs copied, `output.wav`, `output.json`,
    `events.json`."""
    for name in sample.task_files:
        source, target = sample.folder / name, folder / name
        if source.resolve() != target.resolve():
            shutil.copyfile(source, target)
    if attempt.audio is not None:
        write_wav(folder / "output.wav", attempt.audio, INPUT_RATE_HZ)
    write_json_atomic(folder / "output.json", attempt.extras["output_json"])
    write_json_atomic(folder / "events.json", attempt.events)
