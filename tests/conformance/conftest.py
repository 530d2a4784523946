"""The matrix's shared pieces: the question, spoken by the project's TTS, and the models, loaded once per
test module (each module runs on one worker); each cell gets a fresh server in front of its model."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from duplexkit.models import ModelPlugin, load_model
from duplexkit.server import EmbeddedServer
from tests.conformance.checks import QUESTION, QUESTION_AT_ONCE, Samples

pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")
from duplexkit.models.cascade.drive import silence, spoken, with_noise_floor
from duplexkit.models.cascade.tts import EspeakSynthesizer, PiperSynthesizer

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may reach a model hub: the weights are in the packages


@pytest.fixture(scope="module")
def voices() -> dict[str, Samples]:
    """The question at 16 kHz for each pacing: a quiet lead, the words, and a pause after them (where a
    model that takes turns itself answers)."""
    asked = spoken(PiperSynthesizer(deterministic=True), QUESTION)
    sent = spoken(EspeakSynthesizer(), QUESTION_AT_ONCE)
    return {
        pacing: with_noise_floor(np.concatenate([silence(300), speech, silence(1500)]))
        for pacing, speech in (("realtime", asked), ("at-once", sent))
    }


@pytest.fixture
def question(voices: dict[str, Samples], request: pytest.FixtureRequest) -> Samples:
    """The question the cell's pacing asks."""
    return voices[request.node.callspec.params["pacing"]]


class Models:
    """Each built-in model, loaded on first use and kept for the module."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._loaded: dict[str, ModelPlugin] = {}

    def __call__(self, name: str) -> ModelPlugin:
        if name not in self._loaded:
            self._loaded[name] = self._load(name)
        return self._loaded[name]

    def _load(self, name: str) -> ModelPlugin:
        if name == "scripted":  # 80 ms units: Moshi's frame, so /api/chat answers frame by frame
            return load_model("scripted", {"first_output_ms": "50", "token_ms": "5", "chunk_period_ms": "80"})
        if name == "cascade":
            return load_model("cascade", {"responder": "echo"})
        from duplexkit.models.moshi.tiny import write_tiny_checkpoint

        return load_model(
            "moshi", {"checkpoint": str(write_tiny_checkpoint(self._folder / "tiny")), "slots": "2"}
        )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    return Models(tmp_path_factory.mktemp("models"))


@pytest.fixture
async def served(models: Models, request: pytest.FixtureRequest) -> AsyncIterator[EmbeddedServer]:
    """A server in front of the cell's model (`model` parameter)."""
    model = request.node.callspec.params["model"]
    async with EmbeddedServer(models(model)) as server:
        yield server
