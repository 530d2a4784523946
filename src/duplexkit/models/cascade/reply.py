"""One spoken reply: produced in the background piece by piece, released at the pace of playback.

Production (a task on the event loop): responder deltas → `PhraseSplitter` pieces → synthesis in a worker
thread → one `StreamingResampler` from the synthesizer's rate to the output rate (exact counts over the
whole reply). Release: the plugin advances the reply's playback clock by each stepped unit and lets out
the audio due by then plus `lead_ms`, so the engine's response stays open while the reply plays and a
barge-in can still cut it. The clock never runs past the audio released (a starved client plays nothing).
A piece's words ride with the audio that speaks them (`_Piece.words_spoken`: in proportion to its audio,
by characters), so no client reads a word before its audio is sent, and the engine's audio/text marks
stay truthful; the heard text (`played_text`) follows the same rule. Function calls the responder makes
are collected (`calls`): the last segment then does not end the turn, the calls do (the plugin yields them
once the reply is emitted).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from duplexkit.engine import Speak
from duplexkit.models.cascade.responders import ToolCallRequest
from duplexkit.models.cascade.text import PhraseSplitter, word_tokens
from duplexkit.models.cascade.tts import Synthesizer
from duplexkit.protocol.audio import StreamingResampler


@dataclass(slots=True)
class _Piece:
    text: str
    start: int
    """Output sample where its audio starts."""
    end: int
    itl_ms: tuple[float, ...]
    words: tuple[str, ...] = ()
    sent: int = 0
    """Words released so far."""

    def __post_init__(self) -> None:
        self.words = word_tokens(self.text)

    def words_spoken(self, sample: int) -> int:
        """How many of its words the audio up to output sample `sample` speaks: those whose characters
        (with the ones before) fit in the share of its audio up to there."""
        if sample >= self.end:
            return len(self.words)
        if sample <= self.start:
            return 0
        chars = len(self.text) * (sample - self.start) / (self.end - self.start)
        spoken = 0
        for word in self.words:
            chars -= len(word)
            if chars < 0:
                break
            spoken += 1
        return spoken


@dataclass(slots=True)
class ReplyTiming:
    """When the reply's production reached its milestones (monotonic seconds), for latency breakdowns."""

    started_at: float
    transcript_at: float | None = None
    """When the transcript it answers was known (its decode done)."""
    asked_at: float | None = None
    """When the responder was asked (after the turn's transcript was known)."""
    first_text_at: float | None = None
    """When the responder's first text arrived."""
    first_piece_at: float | None = None
    """When the first piece's text was complete (the first phrase, sent to synthesis)."""
    first_synthesis_ms: float | None = None
    """How long the first piece took to synthesise."""
    first_audio_at: float | None = None
    """When the first piece's audio was ready."""
    released_at: float | None = None
    """When a step released its first audio."""


class Reply:
    """A reply in production; `release` hands out its segments, `played_text` says what was heard."""

    def __init__(
        self,
        text: AsyncIterator[str | ToolCallRequest],
        synthesizer: Synthesizer,
        output_rate_hz: int,
        *,
        lead_ms: float,
        executor: Executor | None = None,
        timing: ReplyTiming | None = None,
    ) -> None:
        """Start producing at once; synthesis runs on `executor` (the loop's default one if `None`);
        `timing` records the milestones (a new one from now if `None`)."""
        self.timing = timing or ReplyTiming(started_at=time.monotonic())
        self._synthesizer = synthesizer
        self._executor = executor
        self._rate = output_rate_hz
        self._lead_ms = lead_ms
        self._resampler = StreamingResampler(synthesizer.sample_rate_hz, output_rate_hz)
        self._pending: list[npt.NDArray[np.float32]] = []
        self._produced = 0
        self._released = 0
        self._played_ms = 0.0
        self._pieces: list[_Piece] = []
        self._done = False
        self._emitted = False
        self._error: BaseException | None = None
        self.calls: list[ToolCallRequest] = []
        """The function calls the responder made, in order (complete once production has ended)."""
        self._progress = asyncio.Event()
        self._task = asyncio.create_task(self._produce(text), name="cascade-reply")

    @property
    def emitted(self) -> bool:
        """The last segment (`end_of_turn`) has been released."""
        return self._emitted

    @property
    def synthesising(self) -> bool:
        """Its first text has arrived (the responder answered): audio is on its way."""
        return self.timing.first_text_at is not None

    @property
    def produced_ms(self) -> float:
        """Audio synthesised so far (released or not)."""
        return 1000.0 * self._produced / self._rate

    @property
    def released_ms(self) -> float:
        return 1000.0 * self._released / self._rate

    @property
    def played_out(self) -> bool:
        """Everything was released and has had the time to play."""
        return self._emitted and self._played_ms >= self.released_ms

    @property
    def text(self) -> str:
        return "".join(piece.text for piece in self._pieces)

    async def wait_for_audio(self) -> None:
        """Wait until some audio is ready or production has ended; re-raise a production failure."""
        while self._produced == self._released and not self._done:
            self._progress.clear()
            await self._progress.wait()
        self._raise_if_failed()

    def advance(self, ms: float) -> None:
        """`ms` of playback time passed (a stepped unit); nothing plays before the first release."""
        self._played_ms = min(self._played_ms + ms, self.released_ms)

    async def produced(self) -> None:
        """Wait until production has ended (successfully or not)."""
        while not self._done:
            self._progress.clear()
            await self._progress.wait()

    def release(self) -> Speak | None:
        """The segment due by the playback clock plus the lead, or `None` if there is nothing to send yet.
        The last segment has `end_of_turn`. Re-raises a production failure."""
        self._raise_if_failed()
        if self._emitted:
            return None
        due = round((self._played_ms + self._lead_ms) * self._rate / 1000.0) - self._released
        audio = self._take(max(0, min(due, self._produced - self._released)))
        final = self._done and self._released == self._produced
        tokens: list[str] = []
        itl_ms: list[float] = []
        for piece in self._pieces:
            due_words = len(piece.words) if final else piece.words_spoken(self._released)
            if due_words > piece.sent:
                if piece.sent == 0:
                    itl_ms.extend(piece.itl_ms)  # with the piece's first words
                tokens.extend(piece.words[piece.sent : due_words])
                piece.sent = due_words
        if len(audio) == 0 and not tokens and not final:
            return None
        if len(audio) and self.timing.released_at is None:
            self.timing.released_at = time.monotonic()
        self._emitted = final
        if final and self.calls and len(audio) == 0 and not tokens:
            return None  # nothing left to say: the calls end the turn
        return Speak(
            tokens=tuple(tokens), audio=audio, end_of_turn=final and not self.calls, itl_ms=tuple(itl_ms)
        )

    def played_text(self, played_ms: float | None = None) -> str:
        """The text spoken by the first `played_ms` (default: as far as the playback clock got): the words
        each piece's played audio speaks (`_Piece.words_spoken`)."""
        played = int((self._played_ms if played_ms is None else played_ms) * self._rate / 1000.0)
        return "".join("".join(p.words[: p.words_spoken(played)]) for p in self._pieces).strip()

    def cancel(self) -> None:
        """Stop producing (a synthesis already running in a thread finishes and is discarded)."""
        self._task.cancel()

    async def _produce(self, text: AsyncIterator[str | ToolCallRequest]) -> None:
        splitter = PhraseSplitter()
        itls: list[float] = []
        last_delta: float | None = None
        try:
            async for delta in text:
                if isinstance(delta, ToolCallRequest):
                    self.calls.append(delta)
                    continue
                now = time.monotonic()
                if last_delta is None:
                    self.timing.first_text_at = now
                else:
                    itls.append(1000.0 * (now - last_delta))
                last_delta = now
                for piece in splitter.feed(delta):
                    await self._speak(piece, tuple(itls))
                    itls.clear()
            for piece in splitter.flush():
                await self._speak(piece, tuple(itls))
                itls.clear()
            self._append(self._resampler.flush())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._error = exc
        finally:
            self._done = True
            self._progress.set()
            if isinstance(text, AsyncGenerator):
                await text.aclose()

    async def _speak(self, text: str, itl_ms: tuple[float, ...]) -> None:
        start = self._ideal_output(self._resampler.total_in)
        audio = np.zeros(0, dtype=np.float32)
        if text.strip():
            timing = self.timing
            began = time.monotonic()
            if timing.first_piece_at is None:
                timing.first_piece_at = began
            loop = asyncio.get_running_loop()
            synthesize = functools.partial(
                self._synthesizer.synthesize, text.strip(), urgent=timing.first_synthesis_ms is None
            )
            audio = await loop.run_in_executor(self._executor, synthesize)
            if timing.first_synthesis_ms is None:
                timing.first_audio_at = time.monotonic()
                timing.first_synthesis_ms = 1000.0 * (timing.first_audio_at - began)
        out = self._resampler.process(audio)
        end = self._ideal_output(self._resampler.total_in)
        self._pieces.append(_Piece(text=text, start=start, end=end, itl_ms=itl_ms))
        self._append(out)

    def _append(self, audio: npt.NDArray[np.float32]) -> None:
        if len(audio):
            self._pending.append(audio)
            self._produced += len(audio)
        self._progress.set()

    def _take(self, count: int) -> npt.NDArray[np.float32]:
        out: list[npt.NDArray[np.float32]] = []
        need = count
        while need:
            head = self._pending[0]
            if len(head) <= need:
                out.append(self._pending.pop(0))
                need -= len(head)
            else:
                out.append(head[:need])
                self._pending[0] = head[need:]
                need = 0
        self._released += count
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def _ideal_output(self, input_samples: int) -> int:
        return input_samples * self._rate // self._resampler.in_rate

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error
