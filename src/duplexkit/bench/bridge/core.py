"""The conversation bridge's rules, Sans-I/O: two speakers, one media clock, one timeline. No I/O, no
asyncio: every input carries the caller's `now` (monotonic seconds), so a fake clock drives it in tests.

The clock. Media time 0 is `start(now)`; frame `k` covers `[k·F, (k+1)·F)` (F = `frame_ms`, 20 ms) and is
due at `start + (k+1)·F`, the moment its audio has happened. `due(now)` returns every frame due and not yet
returned, each as one `Tick` carrying both directions of frame `k`: what the examiner says into the
examinee's input and what the examinee says into the examiner's. Both directions are cut from the same frame
index in the same call, so the two sides can never drift apart, whatever the caller's lateness: a late
caller gets several ticks at once (the media clock stays tied to the wall clock; `late_ms` says by how much
each was late).

Playback. What a speaker's server sends (faster than real time, in bursts) waits in that speaker's queue;
each frame takes the next `F` of it (silence when empty), exactly as a listener plays it. So a speaker's
audio sits on the timeline where the other side heard it: the recording of a speaker is the concatenation
of the frames fed to the other side, sample for sample. A response the speaker's server withdrew
(`withdraw`: cancelled by a barge-in) loses what had not been played yet.

Transcripts. A response's text is timed by where its own audio played (`client.voicing`: characters spread
over the audio, or placed by the server's `audio_text_marks`); text never voiced is kept, untimed (`None`).

Stages. The examiner's task may come in stages: stage 0 with its instructions, stage `i + 1` once the
examinee has finished its `i`-th turn (its response done and all of its audio played to the examiner).
Each boundary queues a `StageUpdate` for the edge to send.

The end. At `duration_s` of media time (`stop_reason` `duration`), or, with a `stop_phrase`, once an
examiner response that said it has been played out, plus `tail_s` (`stop_phrase`).
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from duplexkit.client.voicing import TIMELINE_RATE_HZ, voicings

Speaker = Literal["examiner", "examinee"]
SPEAKERS: tuple[Speaker, Speaker] = ("examiner", "examinee")
FRAME_MS = 20
RATE_HZ = TIMELINE_RATE_HZ
"""The timeline's rate (24 kHz, the client's playback timeline's): both recordings are at it."""
StopReason = Literal["duration", "stop_phrase"]

Samples = npt.NDArray[np.float32]


def other(speaker: Speaker) -> Speaker:
    return "examinee" if speaker == "examiner" else "examiner"


@dataclass(frozen=True, slots=True)
class Tick:
    """Frame `index` of both directions: `to_examinee` is the examiner's audio the examinee hears now,
    `to_examiner` the examinee's audio the examiner hears. `late_ms`: how long after its due time the
    frame was cut (the caller's lateness)."""

    index: int
    to_examinee: Samples
    to_examiner: Samples
    late_ms: float

    def to(self, listener: Speaker) -> Samples:
        return self.to_examinee if listener == "examinee" else self.to_examiner


@dataclass(frozen=True, slots=True)
class StageUpdate:
    """Stage `stage` of the examiner's task is due (revealed at `at_s` on the timeline)."""

    stage: int
    at_s: float


@dataclass
class _Response:
    id: str
    text: list[str] = field(default_factory=list)
    marks: list[tuple[int, float]] = field(default_factory=list)
    received: int = 0
    """Samples received."""
    played: list[tuple[int, int]] = field(default_factory=list)
    """`(timeline sample, length)` of each played piece."""
    played_samples: int = 0
    counted: bool = False
    """Counted as an examinee turn (a stage boundary)."""
    done: bool = False
    withdrawn: bool = False
    first_received_s: float | None = None
    """Media time when its first audio arrived (where the edge's clock stood)."""

    @property
    def queued(self) -> int:
        return self.received - self.played_samples


@dataclass
class _Side:
    queue: deque[tuple[str, Samples]] = field(default_factory=deque)
    responses: dict[str, _Response] = field(default_factory=dict)
    frames: list[Samples] = field(default_factory=list)
    """What this speaker said, frame by frame, as the other side heard it."""


class BridgeCore:
    """One conversation's clock, playback queues, recordings, transcripts, stages and end (module
    docstring)."""

    def __init__(
        self,
        *,
        duration_s: float,
        stages: int = 1,
        stop_phrase: str | None = None,
        tail_s: float = 2.0,
        frame_ms: int = FRAME_MS,
        rate_hz: int = RATE_HZ,
    ) -> None:
        if duration_s <= 0 or frame_ms <= 0 or rate_hz <= 0 or stages < 1:
            raise ValueError("duration_s, frame_ms, rate_hz and stages must be positive")
        if (rate_hz * frame_ms) % 1000:
            raise ValueError(f"a {frame_ms} ms frame is not a whole number of samples at {rate_hz} Hz")
        self.frame_ms = frame_ms
        self.rate_hz = rate_hz
        self.frame_samples = rate_hz * frame_ms // 1000
        self.total_frames = math.ceil(duration_s * 1000 / frame_ms)
        self.stages = stages
        self.stage = 0
        self.stage_updates: list[StageUpdate] = []
        """Every boundary passed, in order (the edge sends each; `pending_stages` hands them over)."""
        self._unsent_stages: list[StageUpdate] = []
        self._examinee_turns_done = 0
        self.stop_phrase = _normalise(stop_phrase) if stop_phrase else None
        self.tail_frames = math.ceil(tail_s * 1000 / frame_ms)
        self._stop_at: int | None = None
        self.stop_reason: StopReason | None = None
        self.started_at: float | None = None
        self.frames = 0
        """Frames cut so far (in both directions: one count)."""
        self.max_late_ms = 0.0
        self.late_frames = 0
        """Frames cut more than one frame after their due time."""
        self._sides: dict[Speaker, _Side] = {s: _Side() for s in SPEAKERS}

    # --- the clock ------------------------------------------------------------------------------------

    def start(self, now: float) -> None:
        """Media time 0 is `now`."""
        if self.started_at is not None:
            raise RuntimeError("the conversation already started")
        self.started_at = now

    @property
    def media_s(self) -> float:
        """The timeline's length so far (the frames cut)."""
        return self.frames * self.frame_ms / 1000

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    def deadline(self) -> float:
        """When the next frame is due (monotonic seconds)."""
        if self.started_at is None:
            raise RuntimeError("start() first")
        return self.started_at + (self.frames + 1) * self.frame_ms / 1000

    def due(self, now: float) -> list[Tick]:
        """Every frame due by `now` and not cut yet, both directions at once; none after the end."""
        ticks: list[Tick] = []
        while not self.finished and now >= self.deadline():
            late_ms = (now - self.deadline()) * 1000
            self.max_late_ms = max(self.max_late_ms, late_ms)
            self.late_frames += late_ms > self.frame_ms
            index = self.frames
            to_examinee = self._play("examiner", index)
            to_examiner = self._play("examinee", index)
            self.frames += 1
            ticks.append(Tick(index, to_examinee, to_examiner, late_ms))
            self._after_frame()
        return ticks

    # --- what the servers said ------------------------------------------------------------------------

    def audio(self, speaker: Speaker, response_id: str, samples: npt.ArrayLike) -> None:
        """Output audio of `speaker`'s response `response_id`, at `rate_hz`, queued for playback."""
        chunk = np.asarray(samples, dtype=np.float32).reshape(-1)
        response = self._response(speaker, response_id)
        if response.withdrawn or chunk.size == 0:
            return
        if response.first_received_s is None:
            response.first_received_s = self.media_s
        response.received += chunk.size
        self._sides[speaker].queue.append((response_id, chunk))

    def text(self, speaker: Speaker, response_id: str, delta: str) -> None:
        """Transcript text of `speaker`'s response."""
        if delta:
            self._response(speaker, response_id).text.append(delta)

    def marks(self, speaker: Speaker, response_id: str, marks: Sequence[tuple[int, float]]) -> None:
        """The server's `audio_text_marks` for the response: `(text_chars, audio_end_ms)`."""
        self._response(speaker, response_id).marks.extend(marks)

    def done(self, speaker: Speaker, response_id: str) -> None:
        """The response is complete (nothing more will come for it)."""
        self._response(speaker, response_id).done = True
        self._check_turn_end()
        self._check_stop_phrase()

    def withdraw(self, speaker: Speaker, response_id: str) -> None:
        """The server withdrew the response (a barge-in cancelled it): what was not played yet is dropped,
        and nothing more of it is queued."""
        response = self._response(speaker, response_id)
        response.withdrawn = response.done = True
        side = self._sides[speaker]
        dropped = sum(len(chunk) for rid, chunk in side.queue if rid == response_id)
        side.queue = deque((rid, chunk) for rid, chunk in side.queue if rid != response_id)
        response.received -= dropped
        self._check_turn_end()

    def pending_stages(self) -> list[StageUpdate]:
        """The stage updates due and not handed over yet (each once)."""
        out, self._unsent_stages = self._unsent_stages, []
        return out

    # --- results --------------------------------------------------------------------------------------

    def recording(self, speaker: Speaker) -> Samples:
        """Everything `speaker` said, on the timeline (as the other side heard it), `rate_hz` mono."""
        frames = self._sides[speaker].frames
        return np.concatenate(frames) if frames else np.zeros(0, dtype=np.float32)

    def stereo(self) -> npt.NDArray[np.float32]:
        """`(samples, 2)`: the examiner left, the examinee right, one timeline."""
        return np.stack([self.recording("examiner"), self.recording("examinee")], axis=1)

    def turns(self, speaker: Speaker) -> list[dict[str, object]]:
        """`speaker`'s responses in order: text, where its audio played (`start_s`/`end_s` on the
        timeline, `None` for a response never played), whether it was withdrawn."""
        out: list[dict[str, object]] = []
        for response in self._sides[speaker].responses.values():
            start = end = None
            if response.played:
                first, last = response.played[0], response.played[-1]
                start = round(first[0] / self.rate_hz, 3)
                end = round((last[0] + last[1]) / self.rate_hz, 3)
            out.append(
                {
                    "response_id": response.id,
                    "text": "".join(response.text).strip(),
                    "start_s": start,
                    "end_s": end,
                    "withdrawn": response.withdrawn,
                    "played_s": round(response.played_samples / self.rate_hz, 3),
                }
            )
        return out

    def words(self, speaker: Speaker) -> list[dict[str, object]]:
        """`speaker`'s words with `[start, end]` in timeline seconds where their audio played (`None` for a
        word never voiced), as FDB v2's transcripts hold them (`{text, timestamp}`)."""
        side = self._sides[speaker]
        scale = RATE_HZ / self.rate_hz  # the voicing rule works on a 24 kHz timeline
        chunks = [
            (rid, round(start * scale), round(length * scale))
            for rid, response in side.responses.items()
            for start, length in response.played
        ]
        texts = {rid: "".join(r.text) for rid, r in side.responses.items()}
        marks = {rid: r.marks for rid, r in side.responses.items() if r.marks}
        placed = voicings(chunks, texts, marks)
        out: list[dict[str, object]] = []
        for rid, text in texts.items():
            voicing = placed.get(rid)
            for match in re.finditer(r"\S+", text):
                timestamp: list[float] | None = None
                if voicing is not None and match.start() < voicing.voiced_chars:
                    start = voicing.timeline_ms(match.start(), opening=True)
                    end = max(start, voicing.timeline_ms(match.end(), opening=False))
                    timestamp = [round(start / 1000, 3), round(end / 1000, 3)]
                out.append({"text": match.group(0), "timestamp": timestamp})
        return out

    # --- internals ------------------------------------------------------------------------------------

    def _response(self, speaker: Speaker, response_id: str) -> _Response:
        responses = self._sides[speaker].responses
        if response_id not in responses:
            responses[response_id] = _Response(response_id)
        return responses[response_id]

    def _play(self, speaker: Speaker, index: int) -> Samples:
        """Frame `index` of `speaker`'s queue (silence where it runs out), recorded as heard."""
        side = self._sides[speaker]
        frame = np.zeros(self.frame_samples, dtype=np.float32)
        filled = 0
        while filled < self.frame_samples and side.queue:
            rid, chunk = side.queue[0]
            take = min(len(chunk), self.frame_samples - filled)
            frame[filled : filled + take] = chunk[:take]
            response = side.responses[rid]
            response.played.append((index * self.frame_samples + filled, take))
            response.played_samples += take
            filled += take
            if take == len(chunk):
                side.queue.popleft()
            else:
                side.queue[0] = (rid, chunk[take:])
        side.frames.append(frame)
        return frame

    def _after_frame(self) -> None:
        self._check_turn_end()
        self._check_stop_phrase()
        if self._stop_at is not None and self.frames >= self._stop_at:
            self.stop_reason = "stop_phrase"
        elif self.frames >= self.total_frames:
            self.stop_reason = "duration"

    def _check_stop_phrase(self) -> None:
        """The end is `tail_frames` after an examiner response that said the stop phrase played out."""
        if self.stop_phrase is None or self._stop_at is not None:
            return
        for response in self._sides["examiner"].responses.values():
            said = _normalise("".join(response.text))
            if response.done and not response.queued and self.stop_phrase in said:
                self._stop_at = self.frames + self.tail_frames
                return

    def _check_turn_end(self) -> None:
        """A stage boundary for each examinee turn fully played out since the last one."""
        for response in self._sides["examinee"].responses.values():
            if response.counted or not response.done or response.withdrawn:
                continue
            if response.queued or not response.played:
                continue
            response.counted = True
            self._examinee_turns_done += 1
            if self.stage + 1 < self.stages:
                self.stage += 1
                update = StageUpdate(self.stage, round(self.media_s, 3))
                self.stage_updates.append(update)
                self._unsent_stages.append(update)


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())
