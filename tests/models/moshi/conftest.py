"""Tiny random-weight Moshi checkpoints that hear, built once per test module (nothing downloaded, no
weights committed): the plugin and the server run on them exactly as on the real ones. Each fixture first
checks that its model hears (different inputs give different outputs), or no slot test could fail."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("NO_TORCH_COMPILE", "1")  # read as moshi is imported: as the server runs it
pytest.importorskip("moshi")

from duplexkit.models import load_model
from duplexkit.models.moshi.frames import SlotFrame
from duplexkit.models.moshi.plugin import MoshiModel
from duplexkit.models.moshi.tiny import write_tiny_checkpoint
from tests.models.moshi.reference import assert_hears


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = write_tiny_checkpoint(tmp_path_factory.mktemp("moshi") / "tiny")
    assert_hears(checkpoint)
    return checkpoint


@pytest.fixture(scope="module")
def tiny_checkpoint_dep16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    checkpoint = write_tiny_checkpoint(tmp_path_factory.mktemp("personaplex") / "tiny16", dep_q=16)
    _slots_hear(checkpoint)
    return checkpoint


def _slots_hear(checkpoint: Path, frames: int = 10) -> None:
    """PersonaPlex's layout hears through the slots' own path (`moshi.server`'s `LMGen` takes no user
    codes when the depformer predicts them): two slots fed noise and a tone differ in most frames."""
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "2"})
    assert isinstance(plugin, MoshiModel)
    a, b = plugin.new_session(), plugin.new_session()
    rng = np.random.default_rng(11)
    differing = 0
    for _ in range(frames):
        noise = (0.1 * rng.standard_normal(1920)).astype(np.float32)
        tone = (0.3 * np.sin(np.arange(1920) / 7)).astype(np.float32)
        out = plugin._batch.step({plugin.gen_defaults: {a.slot: noise, b.slot: tone}}, 2)
        differing += out[a.slot].text_id != out[b.slot].text_id
    plugin._executor.shutdown()
    assert differing >= (frames - 1) // 2, f"the PersonaPlex-layout model barely hears ({differing})"


def record_outputs(plugin: MoshiModel) -> dict[int, list[SlotFrame]]:
    """Record every slot's raw outputs (text id, agent codes) as the torch edge returns them."""
    seen: dict[int, list[SlotFrame]] = {}
    step = plugin._batch.step

    def recording(groups, occupied, forced=None):  # type: ignore[no-untyped-def]
        out = step(groups, occupied, forced)
        for slot, frame in out.items():
            seen.setdefault(slot, []).append(frame)
        return out

    plugin._batch.step = recording  # type: ignore[method-assign]
    return seen
