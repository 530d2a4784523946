"""The optional eyes: text read from changed video frames, told to the responder and spoken up."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time
from collections.abc import AsyncIterator, Sequence

import pytest

from duplexkit.engine import Speak
from duplexkit.models.base import SamplingParams
from duplexkit.models.cascade.asr import DecoderPool
from duplexkit.models.cascade.drive import silence, units
from duplexkit.models.cascade.eyes import Eyes, Sight
from duplexkit.models.cascade.plugin import CascadeModel
from duplexkit.models.cascade.responders import EchoResponder, Message
from duplexkit.models.cascade.tts import PiperSynthesizer
from tests.models.cascade.conftest import Speech, Stepper

pytest.importorskip("PIL", reason="renders the test frames (comes with the eyes extra)")
from PIL import Image, ImageDraw, ImageFont


def frame(text: str) -> bytes:
    """A 320x240 JPEG with `text` in black on white, as a camera pointed at a sign might send."""
    image = Image.new("RGB", (320, 240), "white")
    ImageDraw.Draw(image).text((20, 100), text, fill="black", font=ImageFont.load_default(size=28))
    out = io.BytesIO()
    image.save(out, "JPEG")
    return out.getvalue()


@pytest.fixture(scope="module")
def eyes() -> Eyes:
    try:
        return Eyes()
    except ImportError as exc:
        pytest.skip(str(exc))


def settle(sight: Sight, frames: tuple[bytes, ...] = ()) -> bool:
    """Look until the read in flight (if any) has finished; whether the text changed."""
    changed = sight.look(frames)
    deadline = time.monotonic() + 30
    while sight.busy and time.monotonic() < deadline:
        time.sleep(0.02)
        changed = sight.look(()) or changed
    return changed


def test_a_changed_frame_is_read_and_an_unchanged_one_is_not(eyes: Eyes) -> None:
    sight = Sight(eyes)
    assert settle(sight, (frame("EXIT 12 NORTH"),)) and sight.text == "EXIT 12 NORTH"
    sight.look((frame("EXIT 12 NORTH"),))  # the same picture again: nothing to read
    assert not sight.busy
    assert settle(sight, (frame("GATE B7"),)) and sight.text == "GATE B7"
    assert not settle(sight, (b"not an image",))  # undecodable: ignored, text kept
    assert sight.text == "GATE B7"


class RecordingEcho(EchoResponder):
    def __init__(self) -> None:
        self.instructions_seen: list[str | None] = []

    def reply(self, history: Sequence[Message], sampling: SamplingParams) -> AsyncIterator[str]:
        self.instructions_seen.append(sampling.instructions)
        return super().reply(history, sampling)


async def test_a_session_that_asks_for_eyes_tells_the_responder_what_the_camera_shows(
    eyes: Eyes, piper: PiperSynthesizer, speech: Speech, vad_available: None
) -> None:
    responder = RecordingEcho()
    model = CascadeModel(synthesizer=piper, responder=responder, pool=DecoderPool(prewarm=0), eyes=eyes)
    assert model.capabilities.accepts_video
    session = model.new_session()
    session.configure(model.default_sampling, {"eyes": True})
    stepped = list(units(speech.clip(300.0, "What does the sign say?", 1500.0), 100))
    stepped[0] = dataclasses.replace(stepped[0], frames=(frame("PLATFORM 9"),))
    stepper = Stepper(session)
    await stepper.run(stepped[:1])
    assert session.sight is not None
    settle(session.sight)  # the read finishes while the user has yet to speak
    await stepper.run(stepped[1:])
    assert responder.instructions_seen
    assert responder.instructions_seen[-1] == 'The camera shows this text: "PLATFORM 9".'


async def test_the_model_speaks_up_when_the_text_it_sees_changes_while_nobody_speaks(
    eyes: Eyes, piper: PiperSynthesizer, vad_available: None
) -> None:
    model = CascadeModel(synthesizer=piper, responder=EchoResponder(), pool=DecoderPool(prewarm=0), eyes=eyes)
    session = model.new_session()
    session.configure(model.default_sampling, {"eyes": True})
    quiet = list(units(silence(6000.0), 100))
    quiet[0] = dataclasses.replace(quiet[0], frames=(frame("GATE B7"),))
    stepper = Stepper(session)
    said: list[str] = []
    for unit in quiet:
        for _, decision in await stepper.run([unit]):
            if isinstance(decision, Speak):
                said.append(decision.text)
        if not said:
            await asyncio.sleep(0.05)  # the read runs on the eyes' thread, in real time
    assert "".join(said) == "I can see: GATE B7."
    assert not session.history  # nobody asked: nothing for the conversation to answer


def test_a_cascade_without_eyes_refuses_a_session_asking_for_them(piper: PiperSynthesizer) -> None:
    model = CascadeModel(synthesizer=piper, responder=EchoResponder(), pool=DecoderPool(prewarm=0))
    session = model.new_session()
    with pytest.raises(ValueError, match=r"eyes: .*duplexkit\[eyes\]"):
        session.configure(model.default_sampling, {"eyes": True})
    assert not session.params.eyes and session.sight is None
