"""The playground in headless Chromium talking to `--model moshi` (a tiny random-weight checkpoint) over its
default transport, a WebRTC call: the fake microphone's tone goes on the call's track, Moshi's audio comes
back on the server's track and is heard by the page, the timeline draws the units it spoke and the reply
as played, and when the page disconnects the model's slot is free again. Nothing leaves loopback."""

from __future__ import annotations

import asyncio
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("moshi")
pytest.importorskip("aiortc")

from duplexkit.models import load_model
from duplexkit.models.moshi.plugin import MoshiModel
from duplexkit.models.moshi.tiny import write_tiny_checkpoint
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.report.devtools import HeadlessChromium, find_chromium
from tests.server.test_playground_browser import _until

BROWSER = find_chromium()
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium on PATH: `apt-get install chromium`")
CAPTURE_RATE = 48_000
FLAGS = (
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-ui-for-media-stream",
)
STATE = """(() => {
  const lane = (name, kind) => window.duplexkitPlayground.timeline.runs[name].filter((r) => r.kind === kind)
    .reduce((sum, r) => sum + r.endMs - r.startMs, 0);
  return {
    stats: window.duplexkitPlayground.stats,
    speakMs: lane("model", "speak"), playedMs: lane("played", "played"),
    alert: document.getElementById("alert").hidden ? null : document.getElementById("alert-text").textContent,
  };
})()"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("moshi") / "tiny")


@pytest.fixture
def tone_wav(tmp_path: Path) -> Path:
    """Half a second of silence, a 1.5 s tone, then silence: 16-bit mono 48 kHz (Chromium loops it)."""
    t = np.arange(round(1.5 * CAPTURE_RATE)) / CAPTURE_RATE
    tone = 0.3 * np.sin(2 * np.pi * 300 * t)
    samples = np.concatenate([np.zeros(CAPTURE_RATE // 2), tone, np.zeros(3 * CAPTURE_RATE)])
    path = tmp_path / "tone.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(CAPTURE_RATE)
        out.writeframes((samples * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture
async def server(checkpoint: Path) -> AsyncIterator[EmbeddedServer]:
    plugin = load_model("moshi", {"checkpoint": str(checkpoint), "slots": "1", "max_response_ms": "800"})
    async with EmbeddedServer(plugin, ServerConfig()) as srv:
        yield srv


async def test_the_page_hears_moshi_over_its_default_transport(
    server: EmbeddedServer, tone_wav: Path
) -> None:
    assert BROWSER is not None
    plugin = server.duplex.plugin
    assert isinstance(plugin, MoshiModel)
    flags = (*FLAGS, f"--use-file-for-fake-audio-capture={tone_wav}")
    async with HeadlessChromium(BROWSER, flags=flags, timeout_s=30) as browser:
        await browser.open(server.http_url + "/playground")
        await browser.click("#connect")
        state = await _until(
            browser, lambda s: s["playedMs"] > 0 and s["stats"]["webrtc"]["audioEnergy"] > 0, 40.0, STATE
        )
        stats = state["stats"]
        assert stats["transport"] == "webrtc" and stats["fallback"] is None
        assert plugin.slot_stats().in_use == 1
        # Moshi's audio reached the browser on the call's track (energy, not silence), the server counted
        # what it sent, and the timeline drew the units Moshi spoke and the reply as the speaker heard it.
        assert max(stats["acknowledgedMs"].values()) > 0
        assert stats["units"]["speak"] > 0 and state["speakMs"] >= 80 * stats["units"]["speak"]
        assert stats["errors"] == [] and state["alert"] is None
        assert browser.log.console_errors == []
        origin = server.http_url.removeprefix("http://")
        assert [url for url in browser.log.requests if f"//{origin}/" not in url] == []

        await browser.click("#disconnect")
        await _until(browser, lambda s: s["stats"]["closed"] is not None, 40.0, STATE)
    async with asyncio.timeout(5):
        while server.duplex.manager.active or plugin.slot_stats().in_use:  # noqa: ASYNC110 - server cleanup
            await asyncio.sleep(0.05)
