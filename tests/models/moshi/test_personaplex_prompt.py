"""PersonaPlex's prompt phase, as NVIDIA's server steps it (NVIDIA/personaplex `moshi/models/lm.py`:
`step_system_prompts`; `server.py`: `wrap_with_system_tags`), written here from their code: the voice
prompt's frames (agent = the voice's codes, encoded frame by frame from a fresh codec, text = 3), 0.5 s of
silence frames (agent = the silence codes, text = 3), the text prompt in `<system>` tags one token per
frame (agent = the silence codes), 0.5 s of silence; the user's channel carries the sine codes in every
frame. NVIDIA's constants are codes of the published Mimi; for the tiny Mimi the test derives the same
two: codes of digital silence and of a 440 Hz sine of amplitude 0.5. One step of NVIDIA's is left out on
both sides: it normalises a WAV voice to -24 LUFS first (pyloudnorm); we feed the WAV as it is."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from duplexkit.models import SamplingParams, load_model
from duplexkit.models.moshi.plugin import MoshiModel

FRAME = 1920


def _nvidia_prompt(
    plugin: MoshiModel, voice: np.ndarray, text: str
) -> list[tuple[list[int], list[int], int]]:
    """(user codes, agent codes, text token) per prompt frame, by NVIDIA's rules, on a fresh codec."""
    from moshi.models import loaders

    checkpoint = plugin.checkpoint
    mimi = loaders.get_mimi(checkpoint.mimi_weights, checkpoint.mimi_config, num_codebooks=8)

    def steady(pcm: np.ndarray) -> list[int]:
        with torch.no_grad():
            return mimi.encode(torch.from_numpy(np.tile(pcm, 4))[None, None])[0, :, -1].tolist()

    t = np.arange(FRAME) / 24_000
    sine = steady((0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32))
    silence = steady(np.zeros(FRAME, dtype=np.float32))
    frames = []
    with torch.no_grad(), mimi.streaming(1):
        for start in range(0, len(voice), FRAME):
            chunk = np.zeros(FRAME, dtype=np.float32)
            chunk[: len(voice[start : start + FRAME])] = voice[start : start + FRAME]
            frames.append((sine, mimi.encode(torch.from_numpy(chunk)[None, None])[0, :, 0].tolist(), 3))
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
    voice = (0.2 * np.sin(np.arange(int(0.3 * 24_000)) / 9)).astype(np.float32)
    with wave.open(str(voices / "NATF0.wav"), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(24_000)
        wav.writeframes((voice * 32767).astype("<i2").tobytes())
    voice = np.frombuffer((voices / "NATF0.wav").read_bytes()[44:], "<i2").astype(np.float32) / 32768
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
    assert fed == _nvidia_prompt(plugin, voice, text)
