"""PersonaPlex's prompt phase, as NVIDIA's server steps it (NVIDIA/personaplex `moshi/models/lm.py`:
`step_system_prompts`; `server.py`: `wrap_with_system_tags`): every transformer call of a slot's prompt
reads the tokens NVIDIA's `LMGen` reads at the same call (`nvidia_reference`, written from their code):
the voice prompt's frames (agent = the voice's codes, text = 3), 0.5 s of silence frames (agent = the
silence codes), the text prompt in `<system>` tags one token per frame, 0.5 s of silence; the user's
channel carries the sine codes in every frame; each token at its codebook's delay, and NVIDIA's first
frame written but never read. A WAV voice is read as NVIDIA's `LMGen.load_voice_prompt` reads it
(`load_audio`: `sphn.read`, `sphn.resample`; `normalize_audio`: -24 LUFS with pyloudnorm) and encoded as
`_encode_voice_prompt_frames` does (`_iterate_audio(pad=True)`: 1920-sample frames, the last padded with
zeros; `encode_from_sphn`: one frame at a time)."""

from __future__ import annotations

import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from duplexkit.models import load_model
from duplexkit.models.moshi.plugin import MoshiModel, system_prompt
from tests.models.moshi import nvidia_reference as nvidia


@pytest.mark.parametrize("text", ["you are a pirate", "<system> you are a pirate <system>"])
async def test_the_prompt_phase_feeds_nvidias_tokens(
    tiny_checkpoint_dep16: Path, tmp_path: Path, text: str
) -> None:
    voices = tmp_path / "voices"
    voices.mkdir()
    _write_voice(voices / "NATF0.wav")
    plugin = load_model(
        "moshi", {"checkpoint": str(tiny_checkpoint_dep16), "slots": "2", "voices": str(voices)}
    )
    assert isinstance(plugin, MoshiModel)
    state = plugin._batch.gen._streaming_state
    read: list[list[int]] = []
    forward = state.graphed_main.func

    def recording(sequence: torch.Tensor, *args: Any) -> Any:
        read.append(sequence[1, :, 0].tolist())  # slot 1's row
        return forward(sequence, *args)

    state.graphed_main.func = recording
    plugin.new_session()  # slot 0 stays idle: the prompt goes into slot 1 only
    session = plugin.new_session()
    session.configure(plugin.default_sampling, {"text_prompt": text, "voice_prompt": "NATF0"})
    await session.prepare()

    lm, mimi = nvidia.load(tiny_checkpoint_dep16)
    silence, sine = nvidia.prompt_codes(mimi)
    gen = nvidia.NvidiaLMGen(lm, silence_tokens=silence, sine_tokens=sine, temp=0, temp_text=0)
    gen.load_voice_prompt(voices / "NATF0.wav")
    gen.text_prompt_tokens = plugin.tokenizer.encode(system_prompt(text))
    expected: list[list[int]] = []
    embed = gen.embed_codes

    def reading(sequence: torch.Tensor) -> torch.Tensor:
        expected.append(sequence[0, :, 0].tolist())
        return embed(sequence)

    gen.embed_codes = reading  # type: ignore[method-assign]
    with torch.no_grad(), lm.streaming(1), mimi.streaming(1):
        gen.step_system_prompts(mimi)
    assert len(read) == len(expected) == len(plugin._prompt_frames(session.persona)) - 1
    assert read == expected


def test_a_wav_voice_gives_the_codec_nvidias_samples(tiny_checkpoint_dep16: Path, tmp_path: Path) -> None:
    """Ours reads a voice to the very samples NVIDIA's `load_voice_prompt` feeds its frames, and on the
    tiny codec that matters: without the loudness normalisation the voice's codes differ."""
    from duplexkit.models.moshi.voices import read_voice_file

    _write_voice(tmp_path / "v.wav")
    ours = read_voice_file(tmp_path / "v.wav")
    raw = nvidia.load_audio(tmp_path / "v.wav")
    theirs = nvidia.normalize_audio(raw)
    assert ours.dtype == np.float32 and np.array_equal(ours, theirs[0].astype(np.float32))
    _, mimi = nvidia.load(tiny_checkpoint_dep16)

    def codes(audio: np.ndarray) -> list[list[int]]:
        with torch.no_grad(), mimi.streaming(1):
            return [c[0, :, 0].tolist() for c in nvidia.encode_frames(mimi, audio)]

    assert codes(theirs) != codes(raw)  # the premise


def _write_voice(path: Path, rate: int = 22_050, seconds: float = 0.44) -> None:
    """A quiet voice (far below -24 LUFS) at 22.05 kHz, by default of 0.44 s (six 80 ms frames once
    resampled, the last one padded; the tiny LM's context has room for little more): loudness
    normalisation, resampling and the last frame's padding all matter."""
    rng = np.random.default_rng(5)
    t = np.arange(int(seconds * rate)) / rate
    tremolo = 1 + np.sin(2 * np.pi * 3 * t)
    voice = 0.02 * np.sin(2 * np.pi * 180 * t) * tremolo + 0.003 * rng.standard_normal(len(t))
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes((voice * 32767).astype("<i2").tobytes())


@pytest.mark.parametrize(
    ("samples", "channels", "match"),
    [
        (np.zeros(24_000), 1, "is silent"),
        (0.1 * np.ones(4_800), 1, "lasts 0.20 s"),
        (0.1 * np.ones(48_000), 2, "has 2 channels"),
    ],
)
def test_voices_nvidias_loader_cannot_read_are_refused_with_the_reason(
    tmp_path: Path, samples: np.ndarray, channels: int, match: str
) -> None:
    from duplexkit.models.moshi.voices import read_voice_file

    with wave.open(str(tmp_path / "v.wav"), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(2)
        wav.setframerate(24_000)
        wav.writeframes((samples * 32767).astype("<i2").tobytes())
    with pytest.raises(ValueError, match=match):
        read_voice_file(tmp_path / "v.wav")
    (tmp_path / "bad.wav").write_bytes(b"RIFF not really")
    with pytest.raises(ValueError, match="not an audio file"):
        read_voice_file(tmp_path / "bad.wav")


def test_a_data_uri_voice_reads_as_the_same_file_would(tiny_checkpoint_dep16: Path, tmp_path: Path) -> None:
    import base64

    from duplexkit.models.moshi.voices import read_voice_file

    _write_voice(tmp_path / "v.wav")
    plugin = load_model("moshi", {"checkpoint": str(tiny_checkpoint_dep16), "slots": "1"})
    assert isinstance(plugin, MoshiModel)
    uri = "data:audio/wav;base64," + base64.b64encode((tmp_path / "v.wav").read_bytes()).decode()
    voice = plugin.voice(uri)
    assert isinstance(voice, np.ndarray) and np.array_equal(voice, read_voice_file(tmp_path / "v.wav"))
    with pytest.raises(ValueError, match="not base64"):
        plugin.voice("data:audio/wav;base64,@@@")
    with pytest.raises(ValueError, match="must be data:audio/wav;base64"):
        plugin.voice("data:audio/mp3;base64,AAAA")
