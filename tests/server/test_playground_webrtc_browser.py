"""The playground over WebRTC in headless Chromium: the default when the server offers calls. The fake
microphone's speech goes on the call's track (with the browser's echo cancellation), the scripted reply
comes back on the server's track and is heard (the receiver's audio energy), the events ride the
`oai-events` channel, the timeline's lanes are drawn from what the page observes of the call, the page
shows the transport, and nothing is reached but this server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiortc")

from duplexkit.server import EmbeddedServer
from tests.report.devtools import HeadlessChromium
from tests.server.test_playground_browser import (
    BROWSER,
    REPLY,
    REPLY_MS,
    _mic,
    _outside,
    _until,
    artifacts,
    server,
    speech_wav,
)

pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium on PATH")
__all__ = ["artifacts", "server", "speech_wav"]  # the fixtures, shared with the WebSocket tests


async def test_the_page_talks_over_webrtc_and_hears_the_reply(
    server: EmbeddedServer, speech_wav: Path, artifacts: Path
) -> None:
    assert BROWSER is not None
    async with HeadlessChromium(BROWSER, flags=_mic(speech_wav), timeout_s=30) as browser:
        await browser.open(server.http_url + "/playground")
        await browser.click("#connect")

        def heard_whole_reply(state: dict[str, Any]) -> bool:
            acknowledged = state["stats"]["acknowledgedMs"]
            return any(r["status"] == "completed" for r in state["responses"]) and any(
                ms >= REPLY_MS - 25 for ms in acknowledged.values()
            )

        state = await _until(browser, heard_whole_reply, 40)
        (artifacts / "playground-webrtc.png").write_bytes(await browser.screenshot())
        stats = state["stats"]
        assert stats["transport"] == "webrtc" and stats["fallback"] is None
        assert await browser.evaluate("document.getElementById('status').dataset.transport") == "webrtc"
        assert "WebRTC" in await browser.evaluate("document.getElementById('stat-transport').textContent")
        reply = next(r for r in state["responses"] if r["status"] == "completed")
        assert reply["text"] == REPLY and reply["source"] == "server_monotonic_request_start"
        # The server acknowledged what it sent on its track; the browser received it, not silence.
        assert max(stats["acknowledgedMs"].values()) == pytest.approx(REPLY_MS, abs=25)
        state = await _until(browser, lambda s: s["stats"]["webrtc"]["audioEnergy"] > 0)
        assert state["stats"]["webrtc"]["samplesReceived"] >= REPLY_MS * 48
        assert stats["appends"] == 0  # no audio went over the channel: it rode the track
        # The timeline from what the page observed over the call: its microphone's speech, the units the
        # model listened and spoke (named by the channel's events), the reply as played from where the
        # speaker first heard it (after `output_audio_buffer.started`) for as long as the server's track
        # carried it; and the audio rows from the server's track.
        lanes = state["lanes"]
        assert lanes["speech"]["runs"] >= 1 and lanes["speech"]["ms"] > 1000
        assert lanes["listen"]["runs"] >= 1 and lanes["speak"]["runs"] == 1
        assert lanes["speak"]["ms"] >= 100 * stats["units"]["speak"] > 0
        assert lanes["played"]["runs"] == 1
        assert lanes["played"]["ms"] == pytest.approx(REPLY_MS, abs=25)
        assert stats["receivedMs"] == stats["playedMs"] == pytest.approx(REPLY_MS, abs=25)
        assert reply["heardAfterSpeech"] is not None and reply["heardAfterSpeech"] > 0
        assert "0.0 s" not in await browser.evaluate("document.getElementById('stat-received').textContent")
        assert stats["errors"] == [] and state["alert"] is None and state["status"] == "live"
        assert browser.log.console_errors == []
        assert _outside(browser.log.requests, server) == []
        assert not any(url.startswith("ws://") for url in browser.log.requests)

        await browser.click("#disconnect")
        await _until(browser, lambda s: s["stats"]["closed"] is not None)
        for _ in range(50):
            if server.duplex.manager.active == 0:
                break
            await asyncio.sleep(0.05)
        assert server.duplex.manager.active == 0  # the call ended with the page's session.close


async def test_the_page_falls_back_to_the_websocket_when_the_call_cannot_be_made(
    server: EmbeddedServer, speech_wav: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page was rendered offering calls; the calls endpoint then answers 501 (no WebRTC there)."""
    assert BROWSER is not None
    monkeypatch.setattr("duplexkit.server.webrtc.AVAILABLE", False)
    async with HeadlessChromium(BROWSER, flags=_mic(speech_wav), timeout_s=30) as browser:
        await browser.open(server.http_url + "/playground")
        await browser.click("#connect")
        state = await _until(browser, lambda s: any(r["status"] == "completed" for r in s["responses"]), 40)
        assert state["stats"]["transport"] == "websocket" and "501" in state["stats"]["fallback"]
        assert "fell back" in await browser.evaluate("document.getElementById('stat-transport').textContent")
        assert any(url.startswith("ws://") for url in browser.log.requests)
        assert state["stats"]["errors"] == []
        # Chromium logs the refused POST itself; the page logs nothing.
        assert all("501" in error for error in browser.log.console_errors)


async def test_the_page_measures_end_of_speech_to_first_reply_audio_on_both_transports(
    server: EmbeddedServer, speech_wav: Path, artifacts: Path
) -> None:
    """What a user waits, on the page's clock: the fake microphone's sentence ends, then the reply starts on
    what the page plays. Measured over WebRTC and over the WebSocket on the same server; the figures go
    to `browser-latency.json` in the artifacts (docs/performance.md quotes a run)."""
    assert BROWSER is not None
    figures: dict[str, list[float]] = {}
    for transport, query in (("webrtc", ""), ("websocket", "?transport=websocket")):
        async with HeadlessChromium(BROWSER, flags=_mic(speech_wav), timeout_s=30) as browser:
            await browser.open(server.http_url + "/playground" + query)
            await browser.click("#connect")
            state = await _until(browser, lambda s: len(s["stats"]["heard"]["speechEndToReplyMs"]) >= 1, 40)
            assert state["stats"]["transport"] == transport
            figures[transport] = state["stats"]["heard"]["speechEndToReplyMs"]
            assert browser.log.console_errors == []
    (artifacts / "browser-latency.json").write_text(json.dumps(figures))
    assert all(ms > 0 for values in figures.values() for ms in values)
