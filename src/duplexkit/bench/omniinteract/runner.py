"""OmniInteract's runner hooks: how a case is streamed, listened to and recorded (the reference runners'
behaviour, in our design).

- **Media.** The video's own soundtrack as 16 kHz mono PCM16 (silence when it has none), padded with silence
  to a whole number of seconds; frames at t = (n + 0.5) / fps (1 fps by default) for every such t inside the
  video, fitted in 640x640 keeping the aspect ratio, JPEG.
- **Session.** `session.update` with `turn_detection: null`, `playback_commit_policy: ack_only` (the client's
  configure) and `overlap_policy: listen_only`; the client's own background acks are off, the simulated
  listener acks instead.
- **Stream.** `chunk_ms` (200 ms) appends with `duration_ms` and `audio_end_ms`, each due at stream start +
  its `audio_end_ms` (an absolute schedule, `DeadlinePacer`); frame n rides the first append whose
  `audio_end_ms` ≥ its time. Bounded by the clip's duration + slack (`input_timeout`). Then the commit
  (bounded, `commit_timeout`). No silence padding after the commit: the soundtrack already ends on a whole
  second, and the commit (`final`) flushes any residual unit.
- **Listening** (`listener`): reply audio (resampled to 24 kHz when a delta's `sample_rate_hz`, or the
  session's output rate, says otherwise) on one serialized playback clock, clears truncate, acks as
  playback advances and once more exact before the close.
- **Completion** (`listener.CompletionTracker`), bounded by `drain_timeout` (default
  `COMPLETION_TIMEOUT_S`, the reference's 900 s);
  tolerated errors `playback_ack_too_late` and `playback_item_not_found`. Then `session.close` (bounded).
- **Per case** (`<subset>/<id>/`): `output.wav` (24 kHz, the heard audio on the playback timeline, as long as
  the input), `wav_transcript.json` (one entry per heard response: text, `[start, end]`, `aligned_words`),
  `events.json` (server events, audio replaced by byte counts), `result.json`, and `.done` (or
  `.failed.json`). `<subset>/<id>.json` holds the same chunks as `wav_transcript.json` and is the harness's
  publication mark, which resume keys on.
- **Eligibility.** A case whose responses were cancelled, cleared or clipped (cut by a clear, or audio past
  the end of the input) is not eligible for official scoring; `result.json` and the meta say why.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np

from duplexkit.bench.artifacts import RunDir, write_bytes_atomic, write_json_atomic
from duplexkit.bench.attempt import (
    Attempt,
    RunConfig,
    bounds_record,
    record_close,
    record_resumes,
    refused_for_capacity,
)
from duplexkit.bench.judge.frames import extract_jpegs
from duplexkit.bench.media import TARGET_RATE_HZ, MediaError, decode_audio, video_duration_s
from duplexkit.bench.omniinteract.case import Case
from duplexkit.bench.omniinteract.listener import (
    OUTPUT_RATE_HZ,
    TOLERATED_ERRORS,
    CompletionTracker,
    SimulatedListener,
    is_clear,
    responses_of,
)
from duplexkit.bench.omniinteract.slots import build_slots
from duplexkit.bench.omniinteract.timing import ResponseText, chunk_to_json, response_chunk
from duplexkit.bench.retry import AttemptOutcome
from duplexkit.bench.speech import speech_segments
from duplexkit.client import ConnectionLost, DuplexClient, SessionError, SessionProgress, dump_events
from duplexkit.client.drain import CommitPoint
from duplexkit.client.events import ReceivedEvent, dig, response_id_of
from duplexkit.client.pacing import DeadlinePacer
from duplexkit.client.session import close_session
from duplexkit.client.wavfile import write_wav
from duplexkit.protocol import client_events as ce
from duplexkit.protocol.audio import FORMAT_RATE_HZ, AudioFormat, encode_audio, resample
from duplexkit.protocol.audio import decode_audio as decode_audio_pcm

COMPLETION_TIMEOUT_S = 900.0
"""The completion bound `duplexkit bench` uses unless `--drain-timeout` is given (the reference runners')."""
ARTIFACTS = ("output.wav", "wav_transcript.json", "events.json", "result.json", ".done")
"""A published case's files, withdrawn when a redo of it fails."""
FRAME_SIDE = 640
POLL_S = 0.02
_NO_CLIENT_ACKS_S = 1e9  # the client's own acker never fires: the simulated listener acks


@dataclass(frozen=True)
class CaseMedia:
    """The padded soundtrack (16 kHz PCM16) and the frames with the times they show, in seconds."""

    pcm16: bytes
    duration_ms: float
    video_duration_s: float
    frames: tuple[tuple[float, bytes], ...]


def prepare_case(case: Case, *, fps: float = 1.0) -> CaseMedia:
    """Decode the case's video into streamable media (module docstring); MediaError when it cannot."""
    video = case.video_bytes()
    if video is None:
        raise MediaError(f"case {case.key} has no video")
    label = f"video of {case.key}"
    duration = video_duration_s(video, label)
    if _has_audio(video, label):
        audio = decode_audio(video, label)
    else:
        audio = np.zeros(round(duration * TARGET_RATE_HZ), dtype=np.float32)
    seconds = max(1, math.ceil(max(audio.size / TARGET_RATE_HZ, duration) - 1e-9))
    padded = np.zeros(seconds * TARGET_RATE_HZ, dtype=np.float32)
    padded[: audio.size] = audio[: padded.size]
    times = [(n + 0.5) / fps for n in range(math.ceil(seconds * fps)) if (n + 0.5) / fps < duration]
    jpegs = extract_jpegs(video, times, max_side=FRAME_SIDE) if times else {}
    pcm = (np.clip(padded, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    return CaseMedia(pcm, seconds * 1000.0, duration, tuple((t, jpegs[t]) for t in times))


def _has_audio(data: bytes, label: str) -> bool:
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            return bool(container.streams.audio)
    except av.FFmpegError as exc:
        raise MediaError(f"{label}: cannot decode ({exc})") from exc


class _Pump:
    """Feeds every received event to the listener, the texts and the completion rule; sends the acks."""

    def __init__(self, client: DuplexClient, origin: float) -> None:
        self.client = client
        self.origin = origin
        self.listener = SimulatedListener()
        self.completion = CompletionTracker()
        self.texts: dict[str, ResponseText] = {}
        self.ack_timeouts = 0
        """Periodic acks that did not reach the wire within their bound (later ones are still sent)."""
        self._seen = 0

    def arrival(self, event: ReceivedEvent) -> float:
        return event.received_at - self.origin

    def step(self) -> None:
        """Process the events received since the last step."""
        events = self.client.events
        while self._seen < len(events):
            event = events[self._seen]
            self._seen += 1
            self._observe(event)

    def _observe(self, event: ReceivedEvent) -> None:
        self.completion.observe(event)
        data, kind = event.data, event.type
        rid = response_id_of(data)
        if kind in ("response.output_audio.delta", "response.audio.delta") and rid is not None:
            pcm = base64.b64decode(data.get("delta") or "")
            rate = data.get("sample_rate_hz") or self.client.capabilities.output_sample_rate_hz
            if isinstance(rate, int) and rate > 0 and rate != OUTPUT_RATE_HZ:  # the listener plays 24 kHz
                pcm = encode_audio(resample(decode_audio_pcm(pcm, "pcm16"), rate, OUTPUT_RATE_HZ), "pcm16")
            self.listener.audio(rid, _item_id(data), pcm, self.arrival(event))
            marks = dig(data, "metadata", "audio_text_marks")
            if isinstance(marks, list):
                text = self.texts.setdefault(rid, ResponseText(rid))
                for mark in marks:
                    if isinstance(mark, dict) and isinstance(mark.get("text_chars"), int):
                        text.marks.append((mark["text_chars"], float(mark.get("audio_end_ms") or 0.0)))
        elif _is_text_delta(kind) and rid is not None and isinstance(data.get("delta"), str):
            self.texts.setdefault(rid, ResponseText(rid)).deltas.append((data["delta"], self.arrival(event)))
        if is_clear(event):
            self.listener.clear(self.arrival(event))

    async def ack(self, acks: list[tuple[str, str | None, float]], timeout_s: float) -> None:
        for response_id, item_id, played_ms in acks:
            ack = ce.PlaybackAck(response_id=response_id, item_id=item_id, played_ms=played_ms)
            await self.client.send(ack, timeout_s=timeout_s)

    async def run(self, timeout_s: float) -> None:
        """Step and ack every POLL_S until cancelled or the connection is lost. An ack that times out is
        counted and the next ones still go out: each carries the cumulative played total, so a later ack
        makes up for a lost one."""
        while True:
            self.step()
            try:
                await self.ack(self.listener.acks_due(time.monotonic() - self.origin), timeout_s)
            except ConnectionLost:
                return
            except TimeoutError:
                self.ack_timeouts += 1
            await asyncio.sleep(POLL_S)


def _is_text_delta(kind: str) -> bool:
    return kind.endswith("transcript.delta") or kind in ("response.output_text.delta", "response.text.delta")


def _item_id(data: Mapping[str, Any]) -> str | None:
    value = data.get("item_id")
    return value if isinstance(value, str) else None


async def run_attempt(
    case: Case, media: CaseMedia, config: RunConfig, progress: SessionProgress | None = None
) -> Attempt:
    """One session for one case; raises `CapacityRefused` when the server has no slot. `progress` follows
    the session's steps (the harness reads it when the attempt's outer deadline fires)."""
    progress = progress or SessionProgress()
    outcome = AttemptOutcome()
    bounds = config.bounds
    input_bound = bounds.input_bound_s(media.duration_ms / 1000.0)
    meta: dict[str, Any] = {
        "bounds": bounds_record(
            bounds,
            input_bound,
            "commit",
            "close",
            completion_timeout=bounds.drain_timeout_s,
            quiet=bounds.settle_s,
        ),
        "input_ms": media.duration_ms,
        "frames": len(media.frames),
    }
    # Its output is placed by the case's own media clock (`events.json` `media_ms`), not by the client's.
    client = config.client(bounds, ack_interval_s=_NO_CLIENT_ACKS_S, placement=None)
    async with client:
        progress.client, progress.stage = client, "configure"
        try:
            capabilities = await client.configure(
                extra_body=config.extra_body,
                timeout_s=bounds.configure_timeout_s,
                capacity_timeout_s=bounds.capacity_timeout_s,
            )
            update = ce.SessionUpdate(session=ce.SessionConfig(overlap_policy="listen_only"))
            await client.send(update, timeout_s=bounds.configure_timeout_s)
        except SessionError as exc:
            raise refused_for_capacity(exc) from None
        meta["unit_ms"] = capabilities.chunk_period_ms
        origin = time.monotonic()
        pump = _Pump(client, origin)
        pumping = asyncio.create_task(pump.run(bounds.ack_timeout_s), name="omniinteract-listener")
        sends: list[tuple[float, float]] = []
        try:
            progress.stage = "input"
            stream = await _stream(client, media, config, origin, sends, input_bound)
            if stream["timed_out"]:
                outcome.input_timeout = input_bound
            meta["stream"] = stream
            progress.stage = "commit"
            grid = capabilities.grid
            pump.completion.expect_commit(CommitPoint.at(stream["audio_end_ms"], grid, client.events))
            try:
                pump.completion.commit_sent(await client.commit(timeout_s=bounds.commit_timeout_s))
            except TimeoutError:
                outcome.commit_timeout = bounds.commit_timeout_s
                pump.completion.commit_sent(time.monotonic())
            progress.stage = "drain"
            completion = await _complete(client, pump, config)
        except ConnectionLost as exc:
            outcome.transport_error = f"ConnectionLost: {exc}"
            completion = {"outcome": "connection_closed"}
        finally:
            pumping.cancel()
            await asyncio.gather(pumping, return_exceptions=True)
        pump.step()
        meta["completion"] = completion
        if completion["outcome"] == "timeout":
            outcome.drain_timeout = bounds.drain_timeout_s
        elif completion["outcome"] == "connection_closed" and outcome.transport_error is None:
            outcome.transport_error = "connection closed before the case completed"
        outcome.drain_settled = completion["outcome"] == "complete"
        if outcome.transport_error is None:
            progress.stage = "final_ack"
            final = pump.listener.final_acks(time.monotonic() - origin)
            try:
                await pump.ack(final, bounds.ack_timeout_s)
            except TimeoutError:
                outcome.ack_timeout = bounds.ack_timeout_s
            except ConnectionLost:
                pass  # the close below says the connection is gone
            meta["final_acks"] = [{"response_id": r, "played_ms": ms} for r, _, ms in final]
            progress.stage = "close"
            record_close(await close_session(client, bounds), outcome, meta, bounds)
        record_resumes(client, meta, outcome)
        codes = [str(dig(e.data, "error", "code")) for e in client.events if e.type == "error"]
        outcome.server_errors = [code for code in codes if code not in TOLERATED_ERRORS]
        meta["tolerated_errors"] = sorted({code for code in codes if code in TOLERATED_ERRORS})
        statuses = responses_of(client.events)
        outcome.response_done = not pump.completion.open
        chunks, transcript, timing = _transcript(pump, statuses)
        audio, clipped = _output_audio(pump.listener, media.duration_ms)
        meta.update(
            {
                "timeline_clock": "client_monotonic_since_stream_start",
                "word_timing": timing,
                "responses": [r.to_json() for r in client.collector.responses()],
                "response_status": statuses,
                "session": client.collector.session().to_json(),
                "listener": {
                    "segments": len(pump.listener.segments),
                    "clears_s": [round(t, 3) for t in pump.listener.clears],
                    "truncated": sorted(pump.listener.truncated),
                    "ack_timeouts": pump.ack_timeouts,
                },
                "eligibility": _eligibility(pump.listener, statuses, clipped),
                "timeline": {
                    "input_speech": speech_segments(media.pcm16),
                    "speech": [[c["timestamp"][0], c["timestamp"][1]] for c in transcript],
                    "frames_s": [t for t, _ in media.frames],
                },
            }
        )
        events = _events(client, origin) if config.keep_audio else []
    return Attempt(outcome=outcome, sentences=chunks, meta=meta, events=events, audio=audio)


async def _stream(
    client: DuplexClient,
    media: CaseMedia,
    config: RunConfig,
    origin: float,
    sends: list[tuple[float, float]],
    bound_s: float,
) -> dict[str, Any]:
    """The padded soundtrack as `chunk_ms` appends on an absolute schedule, frames riding (docstring)."""
    samples_per_chunk = config.chunk_ms * TARGET_RATE_HZ // 1000
    total = len(media.pcm16) // 2
    pacer = DeadlinePacer(origin) if config.pace == "realtime" else None
    pending = list(media.frames)
    frames_sent = 0
    timed_out = False
    phone = _phone_track(media.pcm16, config.audio_format)
    try:
        async with asyncio.timeout(bound_s):
            for lo in range(0, total, samples_per_chunk):
                hi = min(total, lo + samples_per_chunk)
                end_ms = hi * 1000 / TARGET_RATE_HZ
                duration_ms = (hi - lo) * 1000 / TARGET_RATE_HZ
                slot = None
                if pacer is not None:
                    slot = pacer.slot(end_ms, duration_ms, time.monotonic())
                    if slot.wait_s > 0:
                        await asyncio.sleep(slot.wait_s)
                riding = [jpeg for t, jpeg in pending if t * 1000 <= end_ms + 1e-6]
                pending = pending[len(riding) :]
                payload: dict[str, Any] = {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(
                        media.pcm16[2 * lo : 2 * hi] if phone is None else phone[lo // 2 : (hi + 1) // 2]
                    ).decode("ascii"),
                    "sample_rate_hz": TARGET_RATE_HZ
                    if phone is None
                    else FORMAT_RATE_HZ[config.audio_format],
                    "duration_ms": duration_ms,
                    "audio_end_ms": end_ms,
                }
                if riding:
                    payload["video_frames"] = [base64.b64encode(j).decode("ascii") for j in riding]
                sent_at = await client.send(payload)
                frames_sent += len(riding)
                sends.append((sent_at, end_ms))
                if pacer is not None and slot is not None:
                    pacer.sent(slot, sent_at)
    except TimeoutError:
        timed_out = True
    return {
        "pace": config.pace,
        "chunk_ms": config.chunk_ms,
        "appends": len(sends),
        "audio_end_ms": sends[-1][1] if sends else 0.0,
        "frames_sent": frames_sent,
        "timed_out": timed_out,
        "pacing": pacer.report().to_json() if pacer is not None else None,
    }


async def _complete(client: DuplexClient, pump: _Pump, config: RunConfig) -> dict[str, Any]:
    bounds = config.bounds
    started = time.monotonic()
    deadline = started + bounds.drain_timeout_s
    while True:
        pump.step()
        now = time.monotonic()
        status = pump.completion.poll(now, bounds.settle_s)
        outcome = None
        if status.complete:
            outcome = "complete"
        elif status.failure is not None:
            outcome = "error"
        elif client.connection_lost:
            outcome = "connection_closed"
        elif now >= deadline:
            outcome = "timeout"
        if outcome is not None:
            return {
                "outcome": outcome,
                "waited_s": round(now - started, 3),
                "commit_acknowledged": pump.completion.commit_acknowledged,
                "decided": pump.completion.decided,
                "open_responses": sorted(pump.completion.open),
            }
        await asyncio.sleep(POLL_S)


def _transcript(
    pump: _Pump, statuses: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    chunks = []
    sources = set()
    order = {rid: i for i, rid in enumerate(dict.fromkeys(s.response_id for s in pump.listener.segments))}
    for rid, text in sorted(pump.texts.items(), key=lambda item: order.get(item[0], len(order))):
        chunk, source = response_chunk(text, pump.listener.segments)
        sources.add(source)
        if chunk is not None:
            chunks.append(chunk_to_json(chunk, rid, statuses.get(rid)))
    chunks.sort(key=lambda c: c["timestamp"][0])
    timing = None if not sources else sources.pop() if len(sources) == 1 else "mixed"
    return chunks, chunks, timing


def _output_audio(listener: SimulatedListener, input_ms: float) -> tuple[np.ndarray, set[str]]:
    """The heard audio on the playback timeline, as long as the input; the responses cut at its end."""
    length = round(input_ms * OUTPUT_RATE_HZ / 1000)
    out = np.zeros(length, dtype=np.float32)
    clipped: set[str] = set()
    for segment in listener.segments:
        if segment.kept == 0:
            continue
        samples = np.frombuffer(segment.pcm[: 2 * segment.kept], dtype="<i2").astype(np.float32) / 32768.0
        at = max(0, round(segment.start_s * OUTPUT_RATE_HZ))
        room = max(0, length - at)
        if samples.size > room:
            clipped.add(segment.response_id)
        out[at : at + min(room, samples.size)] = samples[:room]
    return out, clipped


def _eligibility(
    listener: SimulatedListener, statuses: Mapping[str, str], clipped: set[str]
) -> dict[str, Any]:
    reasons = [
        f"cancelled: response {rid}" for rid, status in sorted(statuses.items()) if status == "cancelled"
    ]
    reasons += [f"cleared at {t:.3f} s" for t in listener.clears]
    reasons += [f"clipped: response {rid} was cut by a clear" for rid in sorted(listener.truncated)]
    reasons += [f"clipped: response {rid} plays past the end of the input" for rid in sorted(clipped)]
    return {"eligible": not reasons, "reasons": reasons}


def _events(client: DuplexClient, origin: float) -> list[dict[str, Any]]:
    """`dump_events` with `media_ms` where each event was heard: its arrival on this runner's stream clock
    (`origin` is media time 0; the client's media clock is unused)."""
    dumped = dump_events(client.events, client.connected_at)
    for entry, event in zip(dumped, client.events, strict=True):
        entry["media_ms"] = round(max(0.0, event.received_at - origin) * 1000.0, 3)
    return dumped


def sample_meta(case: Case) -> dict[str, Any]:
    """What every case's meta records: where it comes from and its slots (the scorer reads them back)."""
    return {
        "task": case.scene_type,
        "family": case.split,
        "subset": case.split,
        "scene_type": case.scene_type,
        "annotation": case.annotation,
        "video": None if case.video is None else case.video.label,
        "sample": {"question_text": case.qas[0].question_text if case.qas else None},
        "slots": [slot.to_json() for slot in build_slots(case)],
    }


def wav_transcript(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """`wav_transcript.json` in the official scorer's shape: `{"text", "chunks": [{"text", "timestamp",
    "aligned_words"?}]}` (a bare list reads as no output there)."""
    return {"text": " ".join(c["text"].strip() for c in chunks if c["text"].strip()), "chunks": chunks}


def write_artifacts(folder: Path, attempt: Attempt) -> None:
    """The case's files into its existing folder; `.done` last, any earlier `.failed.json` removed."""
    if attempt.audio is not None:
        write_wav(folder / "output.wav", attempt.audio, OUTPUT_RATE_HZ)
    write_json_atomic(folder / "wav_transcript.json", wav_transcript(attempt.sentences))
    write_json_atomic(folder / "events.json", attempt.events)
    meta = attempt.meta
    result = {
        "completion": meta.get("completion"),
        "eligibility": meta.get("eligibility"),
        "word_timing": meta.get("word_timing"),
        "responses": len(attempt.sentences),
        "input_ms": meta.get("input_ms"),
        "timeline_clock": meta.get("timeline_clock"),
    }
    write_json_atomic(folder / "result.json", result)
    (folder / ".failed.json").unlink(missing_ok=True)
    write_bytes_atomic(folder / ".done", b"")


OFFICIAL_SCENE_TYPES: Mapping[str, str] = {"multi_turn": "multi_turn", "nested": "nested", "1qna": "1QnA"}
"""Our scene type → the official scorer's spelling (its manifest's `scene_type`)."""


def write_run_files(root: Path, metas: Sequence[Mapping[str, Any]]) -> None:
    """The run-level files the official tools read, beside `run.json`:

    - `batch_summary.json` as upstream's batch runner writes it: `{"total", "success", "incomplete",
      "results": [{"video", "output_dir", "status": "ok" | "incomplete"}]}` (a case is `ok` when its folder
      holds `.done`), absolute paths;
    - `manifest.jsonl`, one official `--manifest` row per published case: `sample_id` (`<subset>__<id>`),
      `gt_json` (the annotation the run read), `model_json` (its `wav_transcript.json`) and `scene_type`
      (`multi_turn`, `nested` or `1QnA`). The official scorer reads the run through it wherever the dataset
      lives; `batch_summary.json` alone needs the dataset under upstream's own `data/` folder.
    """
    run = RunDir(root)
    results, rows = [], []
    for meta in metas:
        folder = run.sample_dir(str(meta["split"]), str(meta["id"])).resolve()
        done = (folder / ".done").is_file()
        results.append(
            {"video": meta.get("video"), "output_dir": str(folder), "status": "ok" if done else "incomplete"}
        )
        if done and meta.get("status") == "published":
            rows.append(
                {
                    "sample_id": f"{meta['split']}__{meta['id']}",
                    "gt_json": str(Path(str(meta.get("annotation"))).resolve()),
                    "model_json": str(folder / "wav_transcript.json"),
                    "scene_type": OFFICIAL_SCENE_TYPES.get(str(meta.get("scene_type")), "multi_turn"),
                }
            )
    ok = sum(r["status"] == "ok" for r in results)
    summary = {"total": len(results), "success": ok, "incomplete": len(results) - ok, "results": results}
    write_json_atomic(root / "batch_summary.json", summary)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    write_bytes_atomic(root / "manifest.jsonl", text.encode("utf-8"))


def write_failure(folder: Path, meta: Mapping[str, Any]) -> None:
    """A failed case's `.failed.json` (its error, attempts and timeouts)."""
    folder.mkdir(parents=True, exist_ok=True)
    keep = ("error", "retry_count", "timeouts", "server_errors", "attempts", "finished_at")
    write_json_atomic(folder / ".failed.json", {k: meta.get(k) for k in keep})


def _phone_track(pcm16: bytes, audio_format: AudioFormat) -> bytes | None:
    """The soundtrack as telephone audio (G.711 at 8 kHz: one byte per two 16 kHz samples), resampled once
    for the whole clip; `None` for PCM16 (sent as it is)."""
    if audio_format == "pcm16":
        return None
    return encode_audio(
        resample(decode_audio_pcm(pcm16, "pcm16"), TARGET_RATE_HZ, FORMAT_RATE_HZ[audio_format]), audio_format
    )
