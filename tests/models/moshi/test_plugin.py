"""The `moshi` plugin on tiny random-weight checkpoints: slots that join, freeze and leave, per-session
sampling and budgets, persona prefill into one slot, PersonaPlex's `dep_q=16` layout, and checkpoint
errors. Greedy sampling (temp 0) makes a slot's outputs a pure function of its inputs, so "frozen" and
"only this slot" are checked by comparing outputs with a run that never had the other sessions."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from duplexkit.engine import Fence, Listen, Speak, Unit
from duplexkit.models import BatchItem, SamplingParams, load_model
from duplexkit.models.moshi.checkpoint import CheckpointError, resolve
from duplexkit.models.moshi.plugin import MoshiModel, MoshiSession

RNG = np.random.default_rng(7)
GREEDY = SamplingParams(temperature=0.0)
"""A session's settings that keep the tiny checkpoints' greedy text (a session's `temperature` is its
text temperature)."""
FRAMES = [(0.1 * RNG.standard_normal(1920)).astype(np.float32) for _ in range(12)]


def model(checkpoint: Path, **args: str) -> MoshiModel:
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "temp": "0", "temp_text": "0", **args})
    assert isinstance(plugin, MoshiModel)
    return plugin


def unit(index: int) -> Unit:
    return Unit(index, Fence("s"), FRAMES[index % len(FRAMES)], 24_000, index * 80.0, (index + 1) * 80.0)


async def step(plugin: MoshiModel, frames: dict[MoshiSession, int]) -> dict[MoshiSession, Listen | Speak]:
    items = [BatchItem(s, unit(i), time.monotonic()) for s, i in frames.items()]
    results = await plugin.step_batch(items)
    out = {}
    for s, r in zip(frames, results, strict=True):
        assert isinstance(r, Listen | Speak), r
        out[s] = r
    return out


def count_lm_steps(plugin: MoshiModel) -> list[int]:
    """From now on, count the plugin's LM steps (in the list's one item)."""
    count = [0]
    lm_step = plugin._batch.gen.step

    def counting(codes: torch.Tensor) -> torch.Tensor | None:
        count[0] += 1
        return lm_step(codes)

    plugin._batch.gen.step = counting  # type: ignore[method-assign]
    return count


def signature(d: Listen | Speak) -> tuple[object, ...]:
    return ("listen",) if isinstance(d, Listen) else ("speak", d.tokens, d.audio.round(5).tobytes())


async def alone(checkpoint: Path, count: int) -> list[tuple[object, ...]]:
    plugin = model(checkpoint, slots="4")
    s = plugin.new_session()
    return [signature((await step(plugin, {s: i}))[s]) for i in range(count)]


async def test_slots_join_and_leave_at_any_frame_and_a_fifth_waits_for_a_free_one(
    tiny_checkpoint: Path,
) -> None:
    """Four sessions join at frames 0, 2, 3 and 5 and step together; each one's outputs are exactly those of
    a session alone on the model (greedy sampling), so nobody's joining, warming up or leaving touched it."""
    reference = await alone(tiny_checkpoint, 9)
    plugin = model(tiny_checkpoint, slots="4")
    assert plugin.max_sessions == 4
    sessions: list[MoshiSession] = []
    heard: dict[MoshiSession, list[tuple[object, ...]]] = {}
    for tick in range(9):
        if tick in (0, 2, 3, 5):
            sessions.append(plugin.new_session())
            heard[sessions[-1]] = []
        out = await step(plugin, {s: len(heard[s]) for s in sessions})
        for s, d in out.items():
            heard[s].append(signature(d))
    for s in sessions:
        assert heard[s] == reference[: len(heard[s])]
    warm = plugin._batch.gen.max_delay + 1  # a fresh slot's frames before its first output
    assert all(sig[0] == "speak" and len(sig) == 3 for sig in heard[sessions[0]][warm:])
    with pytest.raises(RuntimeError, match="slots are in use"):
        plugin.new_session()
    # They leave in another order than they came; a newcomer gets a freed slot, reset for it.
    await sessions[2].aclose()
    await sessions[0].aclose()
    fifth = plugin.new_session()
    assert fifth.slot == sessions[2].slot
    assert plugin.slot_stats().in_use == 3
    got = [signature((await step(plugin, {fifth: i, sessions[1]: 7 + i}))[fifth]) for i in range(2)]
    assert got == reference[:2]  # its slot starts from scratch, as a session alone does


async def test_a_frozen_slot_keeps_its_state(tiny_checkpoint: Path) -> None:
    reference = await alone(tiny_checkpoint, 6)
    plugin = model(tiny_checkpoint, slots="2")
    a, b = plugin.new_session(), plugin.new_session()
    got = [signature((await step(plugin, {a: i, b: i}))[a]) for i in range(2)]
    for i in range(4):  # `a` misses four ticks: frozen while `b` steps
        await step(plugin, {b: 2 + i})
    got += [signature((await step(plugin, {a: i}))[a]) for i in range(2, 6)]
    assert got == reference
    stats = plugin.slot_stats()
    assert stats.frames_frozen == 8 and stats.frames_stepped == 2 * 2 + 4 + 4 and stats.ticks == 10


async def test_per_session_sampling_overrides_leave_the_defaults_alone(tiny_checkpoint: Path) -> None:
    reference = await alone(tiny_checkpoint, 4)
    plugin = model(tiny_checkpoint, slots="2", top_k="50")
    defaults = plugin.gen_defaults
    a, b = plugin.new_session(), plugin.new_session()
    a.configure(a.sampling.with_overrides(temperature=0.4), {"temp": 0.9, "top_k": 5})
    assert (a.gen.temp_text, a.gen.temp, a.gen.top_k) == (0.4, 0.9, 5)  # session temperature: the text's
    assert plugin.gen_defaults == defaults and b.gen == defaults
    with pytest.raises(ValueError, match="top_k"):
        a.configure(a.sampling, {"top_k": "many"})
    assert a.gen.top_k == 5  # a refused update leaves the previous settings
    # Both in every call, each with its own settings: b's outputs are those of a greedy session alone,
    # and each call is one tick with nobody frozen.
    got = [signature((await step(plugin, {a: i, b: i}))[b]) for i in range(4)]
    assert got == reference
    stats = plugin.slot_stats()
    assert (stats.ticks, stats.frames_stepped, stats.frames_frozen) == (4, 8, 0)
    assert plugin.gen_defaults == defaults


def test_openai_voice_names_are_not_voice_prompts_and_late_instructions_keep_the_persona(
    tiny_checkpoint: Path,
) -> None:
    """OpenAI clients send `voice: alloy` and `instructions` by default: the voice means nothing to Moshi
    and is left alone; instructions after the first audio leave the slot's persona (an explicit
    `text_prompt` then is refused)."""
    plugin = model(tiny_checkpoint, slots="1")
    s = plugin.new_session()
    s.configure(SamplingParams(voice="alloy", instructions="Be brief."), {})
    assert s.persona.voice is None and s.persona.text == "Be brief."
    s.frames = 1  # the session has had audio
    s.configure(SamplingParams(voice="alloy", instructions="Be chatty."), {})
    assert s.persona.text == "Be brief."
    with pytest.raises(ValueError, match="before the session's first audio"):
        s.configure(SamplingParams(), {"text_prompt": "Be chatty."})


def test_client_budgets_lower_the_servers_limit_but_never_raise_it(tiny_checkpoint: Path) -> None:
    plugin = model(tiny_checkpoint, slots="1", max_response_ms="8000")
    assert plugin.max_response_frames == 100
    s = plugin.new_session()
    s.configure(SamplingParams(max_tokens=10_000), {"max_response_output_tokens": 50_000})
    assert s.tracker.max_frames == 100
    s.configure(SamplingParams(max_tokens=40), {})
    assert s.tracker.max_frames == 40
    s.configure(SamplingParams(max_tokens=10_000), {"max_tokens": 7})
    assert s.tracker.max_frames == 7


async def test_a_session_past_the_context_goes_on_over_the_sliding_window(tiny_checkpoint: Path) -> None:
    """The tiny LM's context is 50 frames; 60 frames later the session (and its neighbour) still step."""
    plugin = model(tiny_checkpoint, slots="2")
    a, b = plugin.new_session(), plugin.new_session()
    for i in range(plugin.context_frames + 10):
        out = await step(plugin, {a: i, b: i})
    assert a.frames == plugin.context_frames + 10
    assert all(isinstance(d, Listen | Speak) for d in out.values())


async def test_a_persona_is_prefilled_into_its_own_slot_only(tiny_checkpoint: Path, tmp_path: Path) -> None:
    reference = await alone(tiny_checkpoint, 4)
    voices = tmp_path / "voices"
    voices.mkdir()
    _write_wav(voices / "NATF0.wav", (0.1 * np.sin(np.arange(10_800) / 7)).astype(np.float32), 24_000)
    plugin = model(tiny_checkpoint, slots="2", voices=str(voices))
    a, b = plugin.new_session(), plugin.new_session()
    b.configure(SamplingParams(), {"text_prompt": "you are a pirate", "voice_prompt": "NATF0"})
    await b.prepare()
    offsets = plugin._batch.gen._streaming_state.offsets.tolist()
    prompt = len(plugin._prompt_frames(b.persona))
    assert offsets[b.slot] == prompt - 1 and offsets[a.slot] == 0  # NVIDIA's first frame is never read
    got = [signature((await step(plugin, {a: i, b: i}))[a]) for i in range(4)]
    assert got == reference  # the neighbour's prefill changed nothing in this slot
    with pytest.raises(ValueError, match="before the session's first audio"):
        b.configure(SamplingParams(), {"text_prompt": "you are a parrot"})
    with pytest.raises(ValueError, match="no voice"):
        a.configure(SamplingParams(), {"voice_prompt": "NOPE"})
    with pytest.raises(ValueError, match="not a voice name"):
        a.configure(SamplingParams(), {"voice_prompt": "../etc/passwd"})


async def test_a_prompt_frame_is_one_more_row_of_the_neighbours_ticks(tiny_checkpoint: Path) -> None:
    """While a neighbour streams, a persona's prompt goes in as one more row of the neighbour's ticks: no
    LM step of its own, one prompt frame per tick, the neighbour's outputs untouched, and the persona's
    slot afterwards exactly as a prompt stepped alone leaves it."""
    reference = await alone(tiny_checkpoint, 48)
    persona = {"text_prompt": "you are a pirate"}  # greedy, or other slots' sampling moves its draws

    async def prompted_alone() -> list[tuple[object, ...]]:
        plugin = model(tiny_checkpoint, slots="2")
        plugin.new_session()
        b = plugin.new_session()
        b.configure(GREEDY, persona)
        await b.prepare()
        return [signature((await step(plugin, {b: i}))[b]) for i in range(6)]

    plugin = model(tiny_checkpoint, slots="2")
    lm_steps = count_lm_steps(plugin)
    a, b = plugin.new_session(), plugin.new_session()
    b.configure(GREEDY, persona)
    prompt = len(plugin._prompt_frames(b.persona))
    assert prompt < 47
    heard = [signature((await step(plugin, {a: 0}))[a])]
    prefill = asyncio.create_task(b.prepare())
    await asyncio.sleep(0)  # the prompt is queued
    ticks = 0
    while not prefill.done():
        heard.append(signature((await step(plugin, {a: len(heard)}))[a]))
        ticks += 1
    await prefill
    assert ticks in (prompt, prompt + 1)  # one prompt frame per tick (the last may be seen a tick late) ...
    assert lm_steps[0] == 1 + ticks  # ... inside the neighbour's ticks, never a step of its own
    assert heard == reference[: len(heard)]
    after = [signature((await step(plugin, {b: i}))[b]) for i in range(6)]
    assert after == await prompted_alone()


async def test_a_prompt_cut_short_stops_and_its_slot_starts_clean(tiny_checkpoint: Path) -> None:
    """A session closed during its prefill: the prefill fails with a message naming it and stops taking
    rows; a prefill cancelled by its caller stops too; the slot's next session steps as if alone."""
    reference = await alone(tiny_checkpoint, 6)
    plugin = model(tiny_checkpoint, slots="2")
    rows: list[int] = []
    tick = plugin._batch.step

    def counting(groups, occupied, forced=None):  # type: ignore[no-untyped-def]
        rows.append(len(forced or {}))
        return tick(groups, occupied, forced)

    plugin._batch.step = counting  # type: ignore[method-assign]
    a = plugin.new_session()
    for cut in ("close", "cancel"):
        b = plugin.new_session()
        b.configure(GREEDY, {"text_prompt": "you are a pirate"})
        prefill = asyncio.create_task(b.prepare())
        for i in range(3):
            await step(plugin, {a: i})
        if cut == "close":
            await b.aclose()
            with pytest.raises(RuntimeError, match="closed during its prefill"):
                await prefill
        else:
            prefill.cancel()
            with pytest.raises(asyncio.CancelledError):
                await prefill
            await b.aclose()
        rows.clear()
        await step(plugin, {a: 3})
        await asyncio.sleep(0.3)  # time enough for a prompt still queued to step on its own
        assert rows == [0]  # no prompt row any more
        c = plugin.new_session()  # on b's slot
        assert c.slot == b.slot
        assert [signature((await step(plugin, {c: i}))[c]) for i in range(6)] == reference
        await c.aclose()


@pytest.mark.parametrize("layout", ["moshi", "personaplex"])
async def test_a_persona_that_went_in_before_is_copied_in_and_steps_the_same(
    tiny_checkpoint: Path, tiny_checkpoint_dep16: Path, tmp_path: Path, layout: str
) -> None:
    """The second session with a persona (text and voice) gets the first one's prefilled state copied in,
    without a step, and then steps exactly as a session whose prompt was stepped (on a model without the
    cache); the persona does change what the model says, so a copy of nothing would not pass."""
    checkpoint = tiny_checkpoint if layout == "moshi" else tiny_checkpoint_dep16
    voices = tmp_path / "voices"
    voices.mkdir()
    _write_wav(voices / "NATF0.wav", (0.1 * np.sin(np.arange(10_800) / 7)).astype(np.float32), 24_000)
    persona = {"text_prompt": "you are a pirate", "voice_prompt": "NATF0"}

    async def prompted(plugin: MoshiModel, session: MoshiSession) -> list[tuple[object, ...]]:
        session.configure(GREEDY, persona)
        await session.prepare()
        return [signature((await step(plugin, {session: i}))[session]) for i in range(8)]

    stepped = model(checkpoint, slots="2", voices=str(voices), persona_cache="0")
    expected = await prompted(stepped, stepped.new_session())
    without = model(checkpoint, slots="2")
    plain = without.new_session()
    assert expected != [signature((await step(without, {plain: i}))[plain]) for i in range(8)]

    plugin = model(checkpoint, slots="2", voices=str(voices))
    lm_steps = count_lm_steps(plugin)
    first = plugin.new_session()
    assert await prompted(plugin, first) == expected
    await first.aclose()
    steps_before = lm_steps[0]
    second = plugin.new_session()  # the same slot, reset for it
    second.configure(GREEDY, persona)
    await second.prepare()
    assert lm_steps[0] == steps_before  # copied in, not stepped
    assert [signature((await step(plugin, {second: i}))[second]) for i in range(8)] == expected


async def test_a_personaplex_layout_checkpoint_loads_hears_the_user_and_decodes_the_agent(
    tiny_checkpoint_dep16: Path,
) -> None:
    plugin = model(tiny_checkpoint_dep16, slots="2")
    batch = plugin._batch
    assert (batch.lm.dep_q, batch.agent_q, batch.user_fed) == (16, 8, True)
    a = plugin.new_session()
    out = [(await step(plugin, {a: i}))[a] for i in range(4)]
    assert any(isinstance(d, Speak) and len(d.audio) == 1920 for d in out)
    # The user's codes reach the LM: after each step the cache holds the codes the codec gave for the
    # user's frame before (NVIDIA's model hears a frame one step late) at their delays, where the
    # depformer had written its own predictions of them.
    encoded: list[torch.Tensor] = []
    encode = batch.mimi.encode

    def recording(pcm: torch.Tensor) -> torch.Tensor:
        encoded.append(encode(pcm))
        return encoded[-1]

    batch.mimi.encode = recording  # type: ignore[method-assign]
    state = batch.gen._streaming_state
    first = 1 + batch.agent_q
    delays = batch.lm.delays[first:]
    for i in range(4, 8):
        await step(plugin, {a: i})
        if len(encoded) < 2:
            continue
        offset = int(state.offsets[a.slot])
        ct = state.cache.shape[2]
        for k, d in enumerate(delays):
            position = (offset - 1 + d) % ct
            assert int(state.cache[a.slot, first + k, position]) == int(encoded[-2][a.slot, k, 0])


def test_a_missing_checkpoint_file_is_named_with_how_to_fetch_it(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "tokenizer.model").unlink()
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.model \(the text tokenizer\).*huggingface-cli download"
    ):
        resolve(str(broken))
    (broken / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json"):
        resolve(str(broken))


def test_a_repo_id_resolves_from_the_local_cache_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(CheckpointError, match=r"not in the local Hugging Face cache.*never downloads"):
        resolve("kyutai/moshiko-pytorch-bf16")


def _write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    import wave

    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes((samples * 32767).astype("<i2").tobytes())


def test_the_makefile_installs_the_moshi_release_the_slots_were_written_against() -> None:
    """`slots.py` reaches into `LMGen`'s streaming state (PersonaPlex's user codes), so the pin is exact."""
    import importlib.metadata
    import re

    makefile = (Path(__file__).parents[3] / "Makefile").read_text()
    pin = re.search(r"^MOSHI := moshi==(\S+)$", makefile, re.M)
    assert pin is not None and pin.group(1) == importlib.metadata.version("moshi") == "0.2.13"


def test_on_cuda_a_session_may_change_only_the_text_sampling(tiny_checkpoint: Path) -> None:
    """The depformer runs as a CUDA graph captured with the server's audio sampling, so on CUDA a session's
    `temp`/`top_k` would be silently ignored: they are refused instead, and text sampling still applies."""
    plugin = model(tiny_checkpoint, slots="1")
    plugin.cuda_graphs = True  # what `device=cuda` sets; the rule needs no GPU to check
    s = plugin.new_session()
    s.configure(SamplingParams(temperature=0.3), {"top_k_text": 7})
    assert (s.gen.temp_text, s.gen.top_k_text) == (0.3, 7)
    for audio in ({"temp": 0.5}, {"top_k": 9}):
        with pytest.raises(ValueError, match="CUDA graph"):
            s.configure(SamplingParams(), audio)
    assert (s.gen.temp_text, s.gen.top_k_text) == (0.3, 7)


async def test_a_closed_session_refuses_to_step_and_its_neighbours_go_on(tiny_checkpoint: Path) -> None:
    """Its slot may belong to another session already: stepping it would feed that session's slot."""
    plugin = model(tiny_checkpoint, slots="2")
    a, b = plugin.new_session(), plugin.new_session()
    await step(plugin, {a: 0, b: 0})
    await a.aclose()
    stepped = plugin.slot_stats().frames_stepped
    results = await plugin.step_batch(
        [BatchItem(a, unit(1), time.monotonic()), BatchItem(b, unit(1), time.monotonic())]
    )
    assert isinstance(results[0], RuntimeError) and "closed" in str(results[0])
    assert isinstance(results[1], Listen | Speak)
    assert plugin.slot_stats().frames_stepped == stepped + 1
    assert a.frames == 1


def test_a_prompt_longer_than_the_context_is_refused_with_a_code(tiny_checkpoint: Path) -> None:
    """The tiny LM's context is 50 frames: a persona whose prompt needs more would slide out of the window
    while it is still being said, so it is refused before anything is stepped."""
    plugin = model(tiny_checkpoint, slots="1")
    s = plugin.new_session()
    s.configure(SamplingParams(), {"text_prompt": "be brief"})
    assert len(plugin._prompt_frames(s.persona)) <= plugin.context_frames
    long = " ".join(["tell me a story about the sea"] * 10)
    assert len(plugin._prompt_frames(replace(s.persona, text=long))) > plugin.context_frames
    with pytest.raises(ValueError, match="prompt_too_long"):
        s.configure(SamplingParams(), {"text_prompt": long})
    assert s.persona.text == "be brief"


async def test_a_voice_is_read_off_the_event_loop_and_configure_only_checks_its_name(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`configure` (on the event loop) reads no voice; `prepare` reads it on a worker thread, so the loop
    runs meanwhile: the reader here waits for a coroutine on the loop, which could never run if the
    reading held the loop."""
    import asyncio
    import threading

    from duplexkit.models.moshi import plugin as plugin_module

    voices = tmp_path / "voices"
    voices.mkdir()
    _write_wav(voices / "NATF0.wav", (0.1 * np.sin(np.arange(10_800) / 7)).astype(np.float32), 24_000)
    plugin = model(tiny_checkpoint, slots="1", voices=str(voices))
    s = plugin.new_session()
    loop_ran = threading.Event()
    read = plugin_module.read_voice_file

    def slow_read(path: Path) -> np.ndarray:
        assert loop_ran.wait(10), "the event loop was held while the voice was read"
        return read(path)

    monkeypatch.setattr(plugin_module, "read_voice_file", slow_read)
    s.configure(SamplingParams(), {"voice_prompt": "NATF0"})
    assert s.persona.voice is None and s.persona.voice_name == "NATF0"

    async def on_the_loop() -> None:
        await asyncio.sleep(0)
        loop_ran.set()

    await asyncio.gather(s.prepare(), on_the_loop())
    assert s.persona.voice is not None
    assert plugin._batch.gen._streaming_state.offsets[s.slot] == len(plugin._prompt_frames(s.persona)) - 1


def test_the_identity_names_the_checkpoint_by_content_wherever_it_lies(
    tiny_checkpoint: Path, tiny_checkpoint_dep16: Path, tmp_path: Path
) -> None:
    """`session.model` says `moshi` for any checkpoint; the identity tells Moshi from PersonaPlex (and one
    fine-tune from another) by a content fingerprint; one checkpoint on two machines (two paths) is one."""
    import shutil

    copy = Path(shutil.copytree(tiny_checkpoint, tmp_path / "elsewhere"))
    ids = {}
    for name, folder in (("tiny", tiny_checkpoint), ("copy", copy), ("dep16", tiny_checkpoint_dep16)):
        plugin = load_model("moshi", {"checkpoint": str(folder), "slots": "1"})
        assert isinstance(plugin, MoshiModel) and plugin.name == "moshi"
        identity = plugin.identity()
        plugin._executor.shutdown()
        assert identity["checkpoint"] == str(folder) and identity["id"].startswith("moshi@sha256:")
        ids[name] = identity["id"]
    assert ids["tiny"] == ids["copy"] != ids["dep16"]
