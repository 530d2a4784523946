"""Every session on the batched slots equals `moshi.server`'s own per-frame algorithm on its PCM alone
(`reference.moshi_server_loop`, written from Kyutai's code): text tokens and audio codes, frame for frame,
whether it steps alone, joins a running batch at a later frame, or misses ticks while others step.
The model hears (the fixture checks), so a frame given to the wrong slot or a wrong codec state shows."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from duplexkit.engine import Fence, Unit
from duplexkit.models import BatchItem, load_model
from duplexkit.models.moshi.frames import SlotFrame
from duplexkit.models.moshi.plugin import MoshiModel, MoshiSession
from tests.models.moshi.conftest import record_outputs
from tests.models.moshi.reference import moshi_server_loop

FRAMES = 10


def _streams() -> list[npt.NDArray[np.float32]]:
    rng = np.random.default_rng(5)
    t = np.arange(1920 * FRAMES) / 24_000
    return [
        (0.1 * rng.standard_normal(len(t))).astype(np.float32),
        (0.3 * np.sin(2 * np.pi * 330 * t) * (t % 0.4 < 0.25)).astype(np.float32),
        (0.2 * np.sign(np.sin(2 * np.pi * 90 * t)) + 0.02 * rng.standard_normal(len(t))).astype(np.float32),
    ]


def _as_reference(frames: list[SlotFrame]) -> list[tuple[int, tuple[int, ...]] | None]:
    return [None if f.text_id == -2 else (f.text_id, f.codes) for f in frames]


async def test_sessions_alone_joining_and_frozen_equal_moshi_servers_loop(tiny_checkpoint: Path) -> None:
    streams = _streams()
    reference = [
        [None if f is None else (f.text_id, f.codes) for f in moshi_server_loop(tiny_checkpoint, pcm)]
        for pcm in streams
    ]
    assert reference[0] != reference[1] != reference[2]
    plugin = load_model("moshi", {"checkpoint": str(tiny_checkpoint), "slots": "3"})
    assert isinstance(plugin, MoshiModel)
    seen = record_outputs(plugin)
    sessions: list[MoshiSession] = []
    sent = [0, 0, 0]
    # Session 0 starts alone; 1 joins at tick 3, 2 at tick 5; 0 misses ticks 6 and 7 (frozen).
    for tick in range(FRAMES + 5):
        if tick in (0, 3, 5):
            sessions.append(plugin.new_session())
        items = []
        for i, s in enumerate(sessions):
            if sent[i] >= FRAMES or (i == 0 and tick in (6, 7)):
                continue
            pcm = streams[i][sent[i] * 1920 : (sent[i] + 1) * 1920]
            items.append(BatchItem(s, Unit(sent[i], Fence("s"), pcm, 24_000, 0.0, 80.0), time.monotonic()))
            sent[i] += 1
        if items:
            await plugin.step_batch(items)
    assert sent == [FRAMES] * 3
    for i, s in enumerate(sessions):
        assert _as_reference(seen[s.slot]) == reference[i], f"session {i} differs from the reference"
    assert plugin.slot_stats().frames_frozen > 0
