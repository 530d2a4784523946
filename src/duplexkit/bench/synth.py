"""Synthetic media for the built-in datasets: voices to speak questions and an mp4 writer.

Voices, best first: the cascade model's TTS (piper in its deterministic mode, else its espeak-ng) when that
package imports, espeak-ng run directly when on PATH, and always last a synthetic voiced buzz (one syllable
per word). The writer encodes frames drawn by a function as H.264 (single-threaded, bit-exact muxing, so a
generated dataset is reproducible), optionally with a mono AAC soundtrack.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt

from duplexkit.client.wavfile import read_wav
from duplexkit.protocol.audio import resample

AUDIO_RATE_HZ = 16_000

Frame = npt.NDArray[np.uint8]
Audio = npt.NDArray[np.float32]
Voice = Callable[[str], Audio]


def available_voice() -> str:
    """The best voice family this environment offers (`piper`, `espeak`, else `buzz`), without loading it."""
    if importlib.util.find_spec("piper") is not None:
        return "piper"
    return "espeak" if shutil.which("espeak-ng") else "buzz"


def speak_first_fitting(
    texts: list[str], fits: Callable[[list[Audio]], bool], loaders: Iterable[tuple[str, Callable[[], Voice]]]
) -> tuple[str, list[Audio]]:
    """Speak `texts` (16 kHz) with the first voice that loads, speaks and `fits`: (voice name, audio)."""
    for name, load in loaders:
        try:
            speak = load()
            speeches = [speak(text) for text in texts]
        except (ValueError, RuntimeError, OSError, subprocess.SubprocessError):
            continue
        if fits(speeches):
            return name, speeches
    raise AssertionError("the synthetic voice always fits")  # pragma: no cover


def write_mp4(
    path: Path,
    draw: Callable[[float], Frame],
    frames: int,
    *,
    fps: int,
    width: int,
    height: int,
    audio: Audio | None = None,
) -> None:
    """Frame k (`draw(k / fps)`) at k / fps seconds, and `audio` (16 kHz mono) as an AAC track when given."""
    with av.open(str(path), mode="w", format="mp4", options={"fflags": "+bitexact"}) as container:
        stream = container.add_stream("libx264", rate=fps, options={"crf": "18", "preset": "veryfast"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.thread_count = 1
        sound = None
        if audio is not None:
            sound = container.add_stream("aac", rate=AUDIO_RATE_HZ)
            sound.layout = "mono"
        for k in range(frames):
            frame = av.VideoFrame.from_ndarray(draw(k / fps), format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
        if sound is not None and audio is not None:
            block = 1024
            for index, start in enumerate(range(0, audio.size, block)):
                piece = np.zeros(block, dtype=np.float32)
                chunk = audio[start : start + block]
                piece[: chunk.size] = chunk
                samples = av.AudioFrame.from_ndarray(piece.reshape(1, -1), format="flt", layout="mono")
                samples.sample_rate = AUDIO_RATE_HZ
                samples.pts = index * block
                samples.time_base = Fraction(1, AUDIO_RATE_HZ)
                container.mux(sound.encode(samples))
            container.mux(sound.encode(None))


def voice_loaders() -> Iterator[tuple[str, Callable[[], Voice]]]:
    """Voice loaders, best first: the cascade model's TTS (deterministic piper, else its espeak-ng) when that
    package imports, else espeak-ng run directly when on PATH; the synthetic buzz always comes last."""
    try:
        from duplexkit.models.cascade import tts
    except ImportError:
        if shutil.which("espeak-ng"):
            yield "espeak-ng", lambda: espeak
    else:

        def cascade(make: Callable[[], tts.Synthesizer]) -> Callable[[], Voice]:
            def load() -> Voice:
                synthesizer = make()
                return lambda text: resample(
                    synthesizer.synthesize(text), synthesizer.sample_rate_hz, AUDIO_RATE_HZ
                )

            return load

        yield "cascade:piper", cascade(lambda: tts.PiperSynthesizer(deterministic=True))
        yield "cascade:espeak-ng", cascade(tts.EspeakSynthesizer)
    yield "synthetic-buzz", lambda: buzz


def espeak(text: str) -> Audio:
    """espeak-ng's US English voice, resampled to 16 kHz."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        subprocess.run(
            ["espeak-ng", "-v", "en-us", "-w", str(wav)],
            input=text.encode(),  # on stdin, so no text can be read as an option
            check=True,
            capture_output=True,
            timeout=30,
        )
        samples, rate = read_wav(wav)
    return resample(samples, rate, AUDIO_RATE_HZ)


def buzz(text: str) -> Audio:
    """A deterministic speech-like signal: one voiced syllable per word, longer pauses at punctuation.

    Each syllable is a harmonic buzz (ten harmonics falling off as 1/h) whose pitch derives from the word,
    with a raised-sine envelope; the pitch declines slightly over the sentence, as speech does.
    """
    pieces: list[Audio] = []
    words = text.split()
    for index, word in enumerate(words):
        letters = sum(c.isalnum() for c in word)
        length = min(0.36, max(0.14, 0.08 + 0.03 * letters))
        t = np.arange(round(length * AUDIO_RATE_HZ)) / AUDIO_RATE_HZ
        f0 = 105.0 + zlib.crc32(word.lower().encode()) % 40 - 15.0 * index / max(1, len(words))
        phase = 2 * np.pi * f0 * t
        buzz = sum(np.sin(h * phase) / h for h in range(1, 11))
        envelope = np.sin(np.pi * t / length) ** 0.6
        pieces.append((0.25 * buzz * envelope).astype(np.float32))
        pause = 0.18 if word[-1] in ",.;:?!" else 0.05
        pieces.append(np.zeros(round(pause * AUDIO_RATE_HZ), dtype=np.float32))
    return np.concatenate(pieces)
