"""PersonaPlex's prompt phase, as NVIDIA's server steps it (NVIDIA/personaplex `moshi/models/lm.py`:
`step_system_prompts`; `server.py`: `wrap_with_system_tags`), written here from their code: the voice
prompt's frames (agent = the voice's codes, encoded frame by frame from a fresh codec, text = 3), 0.5 s of
silence frames (agent = the silence codes, text = 3), the text prompt in `<system>` tags one token per
frame (agent = the silence codes), 0.5 s of silence; the user's channel carries the sine codes in every
frame. NVIDIA's constants are codes of the published Mimi; for the tiny Mimi the test derives the same
two: codes of digital silence and of a 440 Hz sine of amplitude 0.5. A WAV voice is read as NVIDIA's
`LMGen.load_voice_prompt` reads it (`load_audio`: `sphn.read`, `sphn.resample`; `normalize_audio`: -24 LUFS
with pyloudnorm) and encoded as `_encode_voice_prompt_frames` does (`_iterate_audio(pad=True)`: 1920-sample
frames, the last padded with zeros; `encode_from_sphn`: one frame at a time)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from duplexkit.models import SamplingParams, load_model
from duplexkit.models.moshi.plugin import MoshiModel

FRAME = 1920


def _nvidia_voice_audio(path: Path, *, normalize: bool = True) -> np.ndarray:
    """`LMGen.load_voice_prompt`: `load_audio` then `normalize_audio` to -24 LUFS; shape (1, T)."""
    import pyloudnorm as pyln
    import sphn

    sample_pcm, sample_sr = sphn.read(str(path))
    raw_audio = sphn.resample(sample_pcm, src_sample_rate=sample_sr, dst_sample_rate=24_000)
    if normalize:
        wav = raw_audio[0] if raw_audio.ndim == 2 and raw_audio.shape[0] == 1 else raw_audio
        loudness = pyln.Meter(24_000).integrated_loudness(wav)
        raw_audio = pyln.normalize.loudness(wav, loudness, -24.0)
    return raw_audio[None, :] if raw_audio.ndim == 1 else raw_audio


def _nvidia_voice_codes(mimi: object, raw_audio: np.ndarray) -> list[list[int]]:
    """`_encode_voice_prompt_frames`: `_iterate_audio(pad=True)` through `encode_from_sphn` (batch 1)."""
    codes = []
    sample_pcm = raw_audio
    with torch.no_grad(), mimi.streaming(1):  # type: ignore[attr-defined]
        while sample_pcm.shape[-1] > 0:
            sample = sample_pcm[:, :FRAME]
            sample_pcm = sample_pcm[:, FRAME:]
            if sample_pcm.shape[-1] == 0:
                pad = np.zeros((sample.shape[0], FRAME - sample.shape[-1]))
                sample = np.concatenate([sample, pad], axis=1)
            tensor = torch.tensor(sample[0:1], dtype=torch.float32).unsqueeze(0)
            codes.append(mimi.encode(tensor)[0, :, 0].tolist())  # type: ignore[attr-defined]
    return codes


def _tiny_mimi(plugin: MoshiModel) -> object:
    from moshi.models import loaders

    checkpoint = plugin.checkpoint
    return loaders.get_mimi(checkpoint.mimi_weights, checkpoint.mimi_config, num_codebooks=8)


def _nvidia_prompt(plugin: MoshiModel, voice_path: Path, text: str) -> list[tuple[list[int], list[int], int]]:
    """(user codes, agent codes, text token) per prompt frame, by NVIDIA's rules, on a fresh codec."""
    mimi = _tiny_mimi(plugin)

    def steady(pcm: np.ndarray) -> list[int]:
        with torch.no_grad():
            return mimi.encode(torch.from_numpy(np.tile(pcm, 4))[None, None])[0, :, -1].tolist()  # type: ignore[attr-defined]

    t = np.arange(FRAME) / 24_000
    sine = steady((0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32))
    silence = steady(np.zeros(FRAME, dtype=np.float32))
    voice = _nvidia_voice_codes(mimi, _nvidia_voice_audio(voice_path))
    frames = [(sine, codes, 3) for codes in voice]
    stripped = text.strip()
    wrapped = (
        stripped
        if stripped.startswith("<system>") and stripped.endswith("<system>")
        else f"<system> {stripped} <system>"
    )
    frames += [(sine, silence, 3)] * 6
    frames += [(sine, silence, int(i)) for i in plugin.tokenizer.encode(wrapped)]
    return frames + [(sine, silence, 3)] * 6


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
    batch = plugin._batch
    fed: list[tuple[list[int], list[int], int]] = []
    step = batch.gen.step

    def recording(codes: torch.Tensor) -> torch.Tensor | None:
        out = step(codes)
        state = batch.gen._streaming_state
        slot = 1
        written = state.cache[slot, :, int(state.offsets[slot]) % state.cache.shape[2]]
        fed.append((codes[slot, :8, 0].tolist(), written[1:9].tolist(), int(written[0])))
        return out

    batch.gen.step = recording  # type: ignore[method-assign]
    plugin.new_session()  # slot 0 stays idle: the prompt goes into slot 1 only
    session = plugin.new_session()
    session.configure(SamplingParams(), {"text_prompt": text, "voice_prompt": "NATF0"})
    await session.prepare()
    assert fed == _nvidia_prompt(plugin, voices / "NATF0.wav", text)


def _write_voice(path: Path, rate: int = 22_050) -> None:
    """A quiet voice (far below -24 LUFS) of 0.44 s at 22.05 kHz (six 80 ms frames once resampled, the
    last one padded; the tiny LM's context has room for little more): loudness normalisation,
    resampling and the last frame's padding all matter."""
    rng = np.random.default_rng(5)
    t = np.arange(int(0.44 * rate)) / rate
    tremolo = 1 + np.sin(2 * np.pi * 3 * t)
    voice = 0.02 * np.sin(2 * np.pi * 180 * t) * tremolo + 0.003 * rng.standard_normal(len(t))
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes((voice * 32767).astype("<i2").tobytes())


def test_a_wav_voice_gives_the_codec_nvidias_samples(tiny_checkpoint_dep16: Path, tmp_path: Path) -> None:
    """Ours reads a voice to the very samples NVIDIA's `load_voice_prompt` feeds its frames, and on the
    tiny codec that matters: without the loudness normalisation the voice's codes differ."""
    from duplexkit.models.moshi.voices import read_voice_file

    _write_voice(tmp_path / "v.wav")
    ours = read_voice_file(tmp_path / "v.wav")
    nvidia = _nvidia_voice_audio(tmp_path / "v.wav")
    assert ours.dtype == np.float32 and np.array_equal(ours, nvidia[0].astype(np.float32))
    plugin = load_model("moshi", {"checkpoint": str(tiny_checkpoint_dep16), "slots": "1"})
    assert isinstance(plugin, MoshiModel)
    mimi = _tiny_mimi(plugin)
    raw = _nvidia_voice_audio(tmp_path / "v.wav", normalize=False)
    assert _nvidia_voice_codes(mimi, nvidia) != _nvidia_voice_codes(mimi, raw)  # the premise


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
