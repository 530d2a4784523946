"""PersonaPlex sessions token for token NVIDIA's server: for the same persona and input, each slot's text
ids and agent codes equal those of NVIDIA's own loop on that session alone (`nvidia_reference`, written
from NVIDIA's code), frame for frame after the prompt phase, whether the voice is a WAV or the `.pt` NVIDIA's
server saves from it, and whether the session prefills alone or while a neighbour steps. The model hears
(the fixture checks), and the `.pt`'s embeddings matter on it (checked), so ignoring them would show."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch
import websockets

from duplexkit.engine import Fence, Unit
from duplexkit.models import BatchItem, load_model
from duplexkit.models.moshi.plugin import MoshiModel, system_prompt
from duplexkit.models.moshi.tiny import write_tiny_checkpoint
from tests.models.moshi.conftest import _slots_hear, record_outputs
from tests.models.moshi.nvidia_reference import NvidiaLMGen, load, prompt_codes, server_loop
from tests.models.moshi.test_personaplex_prompt import _write_voice

FRAMES = 8
TEXT = "be kind"


def _streams() -> list[npt.NDArray[np.float32]]:
    rng = np.random.default_rng(9)
    t = np.arange(1920 * FRAMES) / 24_000
    return [
        (0.1 * rng.standard_normal(len(t))).astype(np.float32),
        (0.3 * np.sin(2 * np.pi * 330 * t) * (t % 0.4 < 0.25)).astype(np.float32),
    ]


class Nvidia:
    """NVIDIA's server on a tiny checkpoint, greedy, with the prompt codes derived for the tiny codec."""

    def __init__(self, plugin: MoshiModel, checkpoint: Path) -> None:
        self.plugin = plugin
        self.checkpoint = checkpoint

    def gen(self, **kwargs: Any) -> tuple[Any, Any, NvidiaLMGen]:
        lm, mimi = load(self.checkpoint)
        silence, sine = prompt_codes(mimi)
        gen = NvidiaLMGen(lm, silence_tokens=silence, sine_tokens=sine, temp=0, temp_text=0, **kwargs)
        gen.text_prompt_tokens = self.plugin.tokenizer.encode(system_prompt(TEXT))
        return lm, mimi, gen

    def save_pt(self, wav: Path) -> Path:
        """`.pt` as NVIDIA's server writes it (`save_voice_prompt_embeddings`), beside the WAV."""
        lm, mimi, gen = self.gen(save_voice_prompt_embeddings=True)
        gen.load_voice_prompt(wav)
        with torch.no_grad(), lm.streaming(1), mimi.streaming(1):
            gen.step_system_prompts(mimi)
        return wav.with_suffix(".pt")

    def run(self, voice: Path, pcm: npt.NDArray[np.float32]) -> list[tuple[int, tuple[int, ...]] | None]:
        lm, mimi, gen = self.gen()
        if voice.suffix == ".pt":
            gen.load_voice_prompt_embeddings(voice)
        else:
            gen.load_voice_prompt(voice)
        return server_loop(lm, mimi, gen, pcm)[0]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PersonaPlex's layout, made to remember: on the plain tiny model a persona changes no output."""
    folder = tmp_path_factory.mktemp("remembers") / "tiny16"
    write_tiny_checkpoint(folder, dep_q=16, context=100, remembers=True)
    _slots_hear(folder)
    return folder


@pytest.fixture(scope="module")
def setup(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Nvidia]:
    """A voices folder: `NATF0.wav`, the `NATF0.pt` NVIDIA's server saves from it, and `ZERO.pt` (its
    embeddings zeroed: what ignoring them would amount to)."""
    voices = tmp_path_factory.mktemp("voices")
    _write_voice(voices / "NATF0.wav", seconds=1.2)  # 15 frames: most of them not in the saved cache
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "1"})
    assert isinstance(plugin, MoshiModel)
    nvidia = Nvidia(plugin, checkpoint)
    nvidia.save_pt(voices / "NATF0.wav")
    saved = torch.load(voices / "NATF0.pt")
    zero = {"embeddings": torch.zeros_like(saved["embeddings"]), "cache": saved["cache"]}
    torch.save(zero, voices / "ZERO.pt")
    return voices, nvidia


async def test_personaplex_sessions_equal_nvidias_server_with_wav_and_pt_voices(
    checkpoint: Path, setup: tuple[Path, Nvidia]
) -> None:
    voices, nvidia = setup
    streams = _streams()
    reference = [nvidia.run(voices / "NATF0.wav", pcm) for pcm in streams]
    assert reference[0] != reference[1]  # the model hears
    assert nvidia.run(voices / "NATF0.pt", streams[0]) == reference[0]  # NVIDIA's replay is exact
    assert nvidia.run(voices / "ZERO.pt", streams[0]) != reference[0]  # and the embeddings matter here
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2", "voices": str(voices)})
    assert isinstance(plugin, MoshiModel)
    seen = record_outputs(plugin)
    a, b = plugin.new_session(), plugin.new_session()
    greedy = plugin.default_sampling  # the checkpoint's: a client's temperature would sample
    a.configure(greedy, {"text_prompt": TEXT, "voice_prompt": "NATF0.wav"})
    b.configure(greedy, {"text_prompt": TEXT, "voice_prompt": "NATF0.pt"})
    await a.prepare()
    prefill = asyncio.create_task(b.prepare())  # b's prompt rides in a's ticks
    sent = {a: 0, b: 0}
    streams_of = {a: streams[0], b: streams[1]}
    while min(sent.values()) < FRAMES:
        items = []
        for s in (a, b):
            if sent[s] < FRAMES and (s is a or prefill.done()):
                pcm = streams_of[s][sent[s] * 1920 : (sent[s] + 1) * 1920]
                items.append(
                    BatchItem(s, Unit(sent[s], Fence("s"), pcm, 24_000, 0.0, 80.0), time.monotonic())
                )
                sent[s] += 1
        if items:
            await plugin.step_batch(items)
        else:
            await asyncio.sleep(0.01)
    await prefill
    got = {s: [(f.text_id, f.codes) for f in seen[s.slot]] for s in (a, b)}
    assert got[a] == reference[0], "the WAV voice's session differs from NVIDIA's server"
    assert got[b] == reference[1], "the .pt voice's session differs from NVIDIA's server"


def test_saved_voices_this_model_cannot_replay_are_refused_with_the_reason(
    checkpoint: Path, setup: tuple[Path, Nvidia], tmp_path: Path
) -> None:
    voices, _ = setup
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "1", "voices": str(tmp_path)})
    assert isinstance(plugin, MoshiModel)
    saved = torch.load(voices / "NATF0.pt")
    cases = {
        "GARBAGE.pt": (b"not a torch file", "not a voice saved by PersonaPlex"),
        "KEYS.pt": ({"embeddings": saved["embeddings"]}, "no embeddings and cache"),
        "WIDTH.pt": ({**saved, "embeddings": saved["embeddings"][..., :16]}, "saved by another model"),
        "CACHE.pt": ({**saved, "cache": saved["cache"][:, :, :3]}, "saved by another model"),
    }
    for name, (content, match) in cases.items():
        if isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        else:
            torch.save(content, tmp_path / name)
        with pytest.raises(ValueError, match=match):
            plugin.voice(name)
    with pytest.raises(ValueError, match="saved by another model"):
        plugin.voice("WIDTH")  # a bare name finds NAME.pt where there is no NAME.wav


def test_a_moshi_layout_checkpoint_refuses_personaplex_voices(
    tiny_checkpoint: Path, setup: tuple[Path, Nvidia]
) -> None:
    voices, _ = setup
    plugin = load_model("moshi", {"checkpoint": str(tiny_checkpoint), "slots": "1", "voices": str(voices)})
    assert isinstance(plugin, MoshiModel)
    session = plugin.new_session()
    with pytest.raises(ValueError, match=r"NATF0\.pt is a PersonaPlex voice"):
        session.configure(plugin.default_sampling, {"voice_prompt": "NATF0.pt"})


async def test_on_api_chat_nvidias_client_query_gets_nvidias_frames_and_text(
    checkpoint: Path, setup: tuple[Path, Nvidia]
) -> None:
    """On the wire, as NVIDIA's web client asks (`/api/chat?text_prompt=...&voice_prompt=NATF0.pt`, Ogg
    Opus from `sphn`): each session's ids and codes at the torch edge and the text pieces its client
    receives are NVIDIA's loop's on the PCM the server decoded; the second joins while the first streams."""
    from urllib.parse import urlencode

    from duplexkit.server import EmbeddedServer, ServerConfig
    from tests.server.test_moshi_fidelity import MoshiChat, Recorder

    voices, nvidia = setup
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2", "voices": str(voices)})
    assert isinstance(plugin, MoshiModel)
    recorder = Recorder(plugin)
    streams = _streams()
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=2)) as server:
        chat = server.url.replace("/v1/realtime", "/api/chat")
        query = {"text_prompt": TEXT}
        async with websockets.connect(f"{chat}?{urlencode({**query, 'voice_prompt': 'NATF0.pt'})}") as ws_a:
            a = MoshiChat(ws_a, streams[0])
            assert (await ws_a.recv())[:1] == b"\x00"  # slot 0: after its prompt
            receiving = [asyncio.create_task(a.receive())]
            await a.send(3)
            async with websockets.connect(
                f"{chat}?{urlencode({**query, 'voice_prompt': 'NATF0.wav'})}"
            ) as ws_b:
                b = MoshiChat(ws_b, streams[1])
                sending = asyncio.create_task(a.send(FRAMES))  # b's prompt rides in a's ticks
                assert (await ws_b.recv())[:1] == b"\x00"
                receiving.append(asyncio.create_task(b.receive()))
                await asyncio.gather(sending, b.send(FRAMES))
                for slot, client in enumerate((a, b)):
                    await recorder.until(slot, len(client.heard_pcm) // 1920)
                await asyncio.sleep(0.3)  # the last text pieces reach the clients
                for task in receiving:
                    task.cancel()
    for slot, (client, voice) in enumerate(((a, "NATF0.pt"), (b, "NATF0.wav"))):
        reference = nvidia.run(voices / voice, client.heard_pcm)
        got = [(f.text_id, f.codes) for f in recorder.seen[slot]]
        assert got == reference, f"slot {slot} ({voice}) differs from NVIDIA's server"
        pieces = [plugin.piece(text_id) for text_id, _ in filter(None, reference)]
        assert "".join(client.pieces) == "".join(pieces)
