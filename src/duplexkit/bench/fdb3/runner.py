"""FDB-v3's runner hooks: stream a recording as FDB-v3's LiveKit client does, answer the model's function
calls with the twelve mock APIs, and leave the files FDB-v3's scorers read.

One attempt (FDB-v3 `livekit_inference.py`, without the room): configure (the APIs declared as function
tools, FDB-v3's agent instructions, `tool_choice: auto`, model-native turn taking: no commit ever) → stream
`input.wav` in 20 ms frames in real time, then 1.5 s of silence → final playback ack → close. The client
runs every call the server makes (`client.tools`) through `apis.MockApis` while the audio keeps flowing,
sends its output and asks the model to go on. The agent's audio is kept for exactly the input's length, at
24 kHz, where it arrived (FDB-v3's buffer: later audio is dropped).

Files per recording folder (`<run>/<domain>/{example_id}_{speaker_id}/`): the inputs copied
(`input.wav`, `metadata.json`), `output_duplexkit.wav`, `result_duplexkit.json` in FDB-v3's shape (the
fields its scorers read, and its runner's others where duplexkit observes them), `tool_calls.json` (the
client's record of each call) and `events.json`. `write_run_files` writes `benchmark_data_v2.json` (every
scenario run), so FDB-v3's `evaluate_tool_calls.py` / `evaluate_pass_rate.py` score the run folder as they
score their own. docs/fdb3.md lists what is measured differently (no ASR: the words are the server's).
"""

from __future__ import annotations

import datetime
import math
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.bench.artifacts import write_json_atomic
from duplexkit.bench.attempt import (
    Attempt,
    RunConfig,
    bounds_record,
    record_close,
    record_resumes,
    refused_for_capacity,
)
from duplexkit.bench.fdb3 import apis
from duplexkit.bench.fdb3.dataset import SCENARIO_FILE, Sample
from duplexkit.bench.fdb3.metrics import user_speech_end
from duplexkit.bench.retry import AttemptOutcome
from duplexkit.bench.speech import speech_segments
from duplexkit.client import DuplexClient, SessionError, SessionProgress, dump_events
from duplexkit.client.events import error_code_of
from duplexkit.client.session import close_session
from duplexkit.client.wavfile import read_wav, write_wav
from duplexkit.protocol.audio import resample

PROVIDER = "duplexkit"
"""The provider name in the file names (`result_duplexkit.json`, `output_duplexkit.wav`)."""
RESULT_FILE = f"result_{PROVIDER}.json"
OUTPUT_WAV = f"output_{PROVIDER}.wav"
ARTIFACTS = (OUTPUT_WAV, RESULT_FILE, "tool_calls.json", "events.json")
"""A published recording's outputs, withdrawn when a redo of it fails (the copied inputs stay)."""
INPUT_RATE_HZ = 16_000
"""The rate the input is read at before streaming (the client resamples to the server's)."""
OUTPUT_RATE_HZ = 24_000
"""FDB-v3's capture rate, and the client's playback timeline's."""
FRAME_MS = 20
"""FDB-v3 publishes the input in 20 ms frames."""
TRAILING_SILENCE_S = 1.5
"""FDB-v3 sends 1.5 s of silence after the input, "so VAD detects end-of-speech"."""
SILENCE_DBFS = -40.0
"""`latency.first_speech_s`: the first 50 ms of output louder than this (`measure_latency_from_audio`)."""


@dataclass(frozen=True)
class Fdb3Input:
    """`input.wav` at 16 kHz mono, and where its speech is (for `user_speech_end_rel`)."""

    samples: npt.NDArray[np.float32]
    segments: list[list[float]]

    @property
    def duration_ms(self) -> float:
        # the stream carries the trailing silence too
        return 1000.0 * (len(self.samples) / INPUT_RATE_HZ + TRAILING_SILENCE_S)

    @property
    def duration_s(self) -> float:
        return len(self.samples) / INPUT_RATE_HZ


def _pcm16(samples: npt.NDArray[np.float32]) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def prepare_media(sample: Sample) -> Fdb3Input:
    """Read and resample the recording (off the event loop); `ValueError` for an unreadable WAV."""
    samples, rate = read_wav(sample.input_wav)
    if rate != INPUT_RATE_HZ:
        samples = resample(samples, rate, INPUT_RATE_HZ)
    return Fdb3Input(samples, speech_segments(_pcm16(samples), INPUT_RATE_HZ))


def first_speech_s(audio: npt.NDArray[np.float32], rate: int) -> float:
    """The start of the first 50 ms chunk louder than -40 dBFS, else the audio's length (FDB-v3's rule)."""
    chunk = rate // 20
    for start in range(0, len(audio), chunk):
        piece = audio[start : start + chunk]
        rms = float(np.sqrt(np.mean(np.square(piece.astype(np.float64))))) if len(piece) else 0.0
        if rms > 0 and 20 * math.log10(rms) > SILENCE_DBFS:
            return round(start / rate, 3)
    return round(len(audio) / rate, 3)


def fit_to(samples: npt.NDArray[np.float32], length: int) -> npt.NDArray[np.float32]:
    """`samples` cut or zero-padded to exactly `length`."""
    if len(samples) >= length:
        return samples[:length]
    return np.concatenate([samples, np.zeros(length - len(samples), dtype=np.float32)])


async def run_attempt(
    sample: Sample,
    media: Fdb3Input,
    config: RunConfig,
    progress: SessionProgress | None = None,
) -> Attempt:
    """One session over the recording, with the mock APIs' latency profile the sample carries; raises
    `CapacityRefused` when the server has no slot."""
    latency_profile = sample.latency_profile
    extra_body = dict(config.extra_body)
    if sample.oracle_calls:
        extra_body["tool_calls"] = [
            {"name": c["function"], "arguments": c["args"]} for c in sample.expected_calls
        ]
    progress = progress or SessionProgress()
    outcome = AttemptOutcome()
    bounds = config.bounds
    clip = np.concatenate([media.samples, np.zeros(round(TRAILING_SILENCE_S * INPUT_RATE_HZ), np.float32)])
    input_bound = bounds.input_bound_s(len(clip) / INPUT_RATE_HZ)
    started = time.monotonic()
    meta: dict[str, Any] = {
        "bounds": bounds_record(bounds, input_bound),
        "input_s": round(media.duration_s, 3),
        "tool_latency": latency_profile,
        "oracle_calls": sample.oracle_calls,
    }
    client_box: list[DuplexClient] = []

    def stream_clock_s() -> float:
        return client_box[0].heard_at_ms(time.monotonic()) / 1000.0 if client_box else 0.0

    mock = apis.MockApis(clock=stream_clock_s, profile=latency_profile, seed=sample.id)
    client = config.client(tools=mock.toolbox())
    client_box.append(client)
    async with client:
        progress.client, progress.stage = client, "configure"
        try:
            capabilities = await client.configure(
                instructions=apis.INSTRUCTIONS,
                extra_body=extra_body,
                timeout_s=bounds.configure_timeout_s,
                capacity_timeout_s=bounds.capacity_timeout_s,
                tool_choice="auto",
            )
        except SessionError as exc:
            raise refused_for_capacity(exc) from None
        meta["unit_ms"] = capabilities.chunk_period_ms
        progress.stage = "input"
        stream_start_time = time.time()
        report = await client.stream(
            clip, sample_rate_hz=INPUT_RATE_HZ, pace=config.pace, chunk_ms=FRAME_MS, timeout_s=input_bound
        )
        if report.timed_out:
            outcome.input_timeout = input_bound
        progress.stage = "final_ack"
        try:
            await client.ack_playback(timeout_s=bounds.ack_timeout_s)
        except TimeoutError:
            outcome.ack_timeout = bounds.ack_timeout_s
        except SessionError:
            pass  # the connection is gone: recorded just below
        if client.connection_lost:
            outcome.transport_error = "connection closed before the end of the input"
        outcome.drain_settled = not report.timed_out and not client.connection_lost
        progress.stage = "close"
        record_close(await close_session(client, bounds), outcome, meta, bounds)
        record_resumes(client, meta, outcome)
        collector = client.collector
        outcome.server_errors = [str(error_code_of(f)) for f in collector.failures()]
        responses = collector.responses()
        outcome.response_done = bool(responses) and not collector.open_responses()
        audio = fit_to(collector.output_audio(), round(media.duration_s * OUTPUT_RATE_HZ))
        sentences = [s.to_json() for s in collector.sentences() if s.start < media.duration_s]
        result = result_json(
            sample,
            media,
            audio=audio,
            sentences=sentences,
            calls=mock.calls,
            input_transcripts=_input_transcripts(client),
            stream_start_time=stream_start_time,
            inference_time_s=time.monotonic() - started,
            session_id=client.session_id,
            oracle_calls=sample.oracle_calls,
        )
        meta.update(
            {
                "stream": report.to_json(),
                "responses": [r.to_json() for r in responses],
                "session": collector.session().to_json(),
                "tool_calls": len(client.tool_calls),
                "api_calls": len(mock.calls),
                "timeline": {
                    "input_speech": media.segments,
                    "tool_calls": [
                        {"t": c["timestamp_start"], "end": c.get("timestamp_end"), "name": c["function"]}
                        for c in mock.calls
                    ],
                },
            }
        )
        events = dump_events(client.events, client.connected_at, client.tool_calls)
        records = [r.to_json(client.connected_at) for r in client.tool_calls]
    progress.stage = "done"
    return Attempt(
        outcome=outcome,
        sentences=sentences,
        meta=meta,
        events=events,
        audio=audio,
        extras={"result": result, "tool_calls": records},
    )


def _input_transcripts(client: DuplexClient) -> list[str]:
    return [
        str(e.data.get("transcript") or "")
        for e in client.events
        if e.type == "conversation.item.input_audio_transcription.completed"
    ]


def result_json(
    sample: Sample,
    media: Fdb3Input,
    *,
    audio: npt.NDArray[np.float32],
    sentences: Sequence[Mapping[str, Any]],
    calls: Sequence[Mapping[str, Any]],
    input_transcripts: Sequence[str],
    stream_start_time: float,
    inference_time_s: float,
    session_id: str | None,
    oracle_calls: bool = False,
) -> dict[str, Any]:
    """`result_duplexkit.json` in FDB-v3's shape (`run_tool_benchmark.py`'s `process_single`): the same
    fields, from duplexkit's observations (see the `duplexkit` block for each one's source)."""
    user_end = user_speech_end(media.segments)
    chunks = [{"text": s["sentence"], "timestamp": [s["start"], s["end"]]} for s in sentences]
    result: dict[str, Any] = {
        "pid": sample.speaker_id,
        "example_id": sample.example_id,
        "category": sample.scenario.get("domain", "unknown"),
        "title": sample.scenario.get("title"),
        "provider": PROVIDER,
        "evaluated_at": datetime.datetime.now().isoformat(),
        "inference_time_s": round(inference_time_s, 2),
        "room_name": f"duplexkit-{session_id or 'session'}",
        "stream_start_time": stream_start_time,
        "input_transcript": " ".join(t for t in input_transcripts if t).strip(),
        "input_asr_chunks": [],
        "user_speech_end_rel": user_end,
        "latency": {
            "input_duration_s": round(media.duration_s, 3),
            "output_duration_s": round(len(audio) / OUTPUT_RATE_HZ, 3),
            "first_speech_s": first_speech_s(audio, OUTPUT_RATE_HZ),
        },
        "transcript": " ".join(s["sentence"] for s in sentences).strip(),
        "asr_chunks": chunks,
        "actual_tool_calls": [dict(c) for c in calls],
        "status": "completed",
    }
    if user_end:
        result["user_done_unix"] = stream_start_time + user_end
        if chunks:
            agent_start = float(chunks[0]["timestamp"][0])
            result["audio_agent_speech_start"] = agent_start
            result["perceived_total_latency"] = round(agent_start - user_end, 3)
    result["duplexkit"] = {
        "clock": "seconds from the stream's start (the client's stream clock, as FDB-v3's stream_start_time)",
        "user_speech_end_rel": "energy speech segments of input.wav (20 ms frames, gaps under 0.3 s "
        "bridged), FDB-v3's rule: the end before the first gap over 2 s, else the last end",
        "asr_chunks": "the server's transcript as sentences where their audio played (no ASR run)",
        "input_speech": media.segments,
        "oracle_calls": oracle_calls,
    }
    return result


def sample_meta(sample: Sample) -> dict[str, Any]:
    """The dataset fields every `<id>.meta.json` records."""
    scenario = sample.scenario
    user = " ".join(str(t.get("user", "")) for t in scenario.get("dialogue") or [] if isinstance(t, dict))
    return {
        "synthetic": sample.synthetic,
        "sample": {
            "question_text": user or None,
            "folder": str(sample.folder),
            "example_id": sample.example_id,
            "speaker_id": sample.speaker_id,
            "domain": scenario.get("domain"),
            "difficulty": scenario.get("difficulty"),
            "expected_tool_calls": sample.expected_calls,
            "scenario": dict(scenario),
        },
    }


def write_artifacts(folder: Path, sample: Sample, attempt: Attempt) -> None:
    """The recording folder of a published sample: its inputs copied, then FDB-v3's outputs and ours."""
    for name in ("input.wav", "metadata.json"):
        source, target = sample.folder / name, folder / name
        if source.is_file() and source.resolve() != target.resolve():
            shutil.copyfile(source, target)
    if not (folder / "metadata.json").is_file():  # the scenario came from a scenario file
        write_json_atomic(folder / "metadata.json", dict(sample.scenario))
    if attempt.audio is not None:
        write_wav(folder / OUTPUT_WAV, attempt.audio, OUTPUT_RATE_HZ)
    write_json_atomic(folder / RESULT_FILE, attempt.extras["result"])
    write_json_atomic(folder / "tool_calls.json", attempt.extras["tool_calls"])
    write_json_atomic(folder / "events.json", attempt.events)


def write_run_files(root: Path, metas: Sequence[Mapping[str, Any]]) -> None:
    """`benchmark_data_v2.json` in the run folder: the scenarios run (from each sample's meta), for
    FDB-v3's scorers."""
    scenarios: dict[str, Any] = {}
    for meta in metas:
        scenario = (meta.get("sample") or {}).get("scenario")
        if isinstance(scenario, dict) and isinstance(scenario.get("id"), str):
            scenarios.setdefault(scenario["id"], scenario)
    write_json_atomic(
        root / SCENARIO_FILE,
        {"benchmark_name": "duplexkit FDB-v3 run", "scenarios": list(scenarios.values())},
    )
