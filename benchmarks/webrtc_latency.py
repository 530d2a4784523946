"""What a WebRTC call costs a user against the WebSocket: end of speech at the microphone → first reply
audio at the speaker, on the same server, model and clip, in one run.

One embedded server; per trial one fresh session, alternating the transports: `websocket` (`DuplexClient`,
protocol `duplex`) and `webrtc` (`DuplexClient`, protocol `webrtc`: an aiortc call with Opus both ways and
aiortc's receive jitter buffer). Both stream the same clip (speech, then silence) as a microphone does:
20 ms appends, each sent when its audio has happened (the client's deadline pacer), so the end of speech
happens at stream start + the speech's end on the media clock. First reply audio is the first reply audio
the client receives (WebSocket: the first audio delta; WebRTC: the reply's first frame out of the
server's track, decoded, where `output_audio_buffer.started` put it; the scripted reply is audible from
its first frame); both are on the client's monotonic clock, so the latency is `stream_ttfp_ms -
speech_end_ms`. A WebSocket page would still have to schedule its playback; a WebRTC
page plays what its jitter buffer releases, so the WebRTC figure is closer to what is heard.

The model is `scripted` by default (it answers after speech and one silent unit, `first_output_ms` after
the unit's request starts), so the model's share is the same on both paths and the difference is the
transport's: Opus encode/decode both ways, the 48 kHz resampling, the server track's 20 ms pacing and the
client's jitter buffer.

With `--browser N` the same comparison also runs in headless Chromium (`apt-get install chromium`, the
`tts` extra for the spoken sentence): the playground page over a call and over `?transport=websocket`, a
fake microphone playing a sentence then silence in a loop, until the page measured N replies. The page
measures on its own clock (`transport.js`): the last loud sample at the microphone's analyser once 200 ms
stayed quiet → the reply starting on what it plays (the call's track after the browser's jitter buffer, or
the WebSocket page's playback worklet). The WebSocket page sends the microphone in appends of one server
unit (at most 200 ms).

    .venv/bin/python benchmarks/webrtc_latency.py --trials 10
    .venv/bin/python benchmarks/webrtc_latency.py --trials 10 --browser 5

With the default cascade and its LLM, in the browser only (the trials' clip is not speech), the page's
turn markers also give each reply's whole-path split (`wire · model · play`):

    PYTHONPATH=src:. .venv/bin/python benchmarks/webrtc_latency.py --model cascade \
        --model-arg responder=local --trials 0 --browser 5 \
        --browser-sentence "What is the weather like today?" --browser-gap-s 7
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
from dataclasses import dataclass

import numpy as np

from duplexkit.client import DuplexClient
from duplexkit.client.collector import AUDIO_DELTAS
from duplexkit.client.session import SessionBounds, converse
from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig

RATE = 16_000
TRANSPORTS = {"websocket": "duplex", "webrtc": "webrtc"}


def clip(speech_ms: int, silence_ms: int) -> np.ndarray:
    t = np.arange(speech_ms * RATE // 1000) / RATE
    speech = (0.2 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    return np.concatenate([speech, np.zeros(silence_ms * RATE // 1000, np.float32)])


@dataclass(frozen=True, slots=True)
class Trial:
    """One session's figures (ms, the client's clock); `None`: not observed.

    `latency`: end of speech → first reply audio. `decision`: the unit the reply answered, as its end on the
    media clock (the model's share: a later unit is a later decision). `unit_back`: per listened unit, the
    audio sent by the time its `response.listen` came back, less the unit's end (the input leg, the step
    and the event's way back). `audio_after_created`: `response.created` → its first audio received (the
    output leg)."""

    latency: float | None
    decision: float | None
    unit_back: float | None
    audio_after_created: float | None


async def trial(url: str, protocol: str, samples: np.ndarray, speech_ms: int) -> Trial:
    async with DuplexClient(url, protocol=protocol) as client:
        await converse(client, samples, sample_rate_hz=RATE, chunk_ms=20, bounds=SessionBounds(settle_s=0.5))
        ttfp = client.collector.session().stream_ttfp_ms
    listens = [e for e in client.events if e.type == "response.listen" and "unit_end_ms" in e.data]
    created = next((e for e in client.events if e.type == "response.created"), None)
    audio = next((e for e in client.events if e.type in AUDIO_DELTAS), None)
    return Trial(
        latency=None if ttfp is None else ttfp - speech_ms,
        decision=None if created is None else created.data.get("unit_end_ms"),
        unit_back=statistics.median(e.media_ms - e.data["unit_end_ms"] for e in listens) if listens else None,
        audio_after_created=None
        if created is None or audio is None
        else 1000 * (audio.received_at - created.received_at),
    )


async def browser_run(url: str, n: int, sentence: str, gap_s: float) -> dict[str, list[float]]:
    """End of speech → reply audio as the playground measured it, `n` replies per transport; the
    microphone loops 0.5 s of silence, `sentence`, then `gap_s` of silence (long enough for the reply to
    play out, so each reply answers the whole sentence)."""
    import tempfile
    import wave
    from pathlib import Path

    from tests.report.devtools import HeadlessChromium, find_chromium
    from tests.server.test_playground_browser import STATE, _mic

    from duplexkit.models.cascade.tts import PiperSynthesizer
    from duplexkit.protocol.audio import resample

    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("--browser needs Chromium on PATH")
    voice = PiperSynthesizer(deterministic=True)
    spoken = voice.synthesize(sentence)
    silence = np.zeros(24_000, np.float32)
    gap = np.zeros(round(48_000 * gap_s), np.float32)
    mic = np.concatenate([silence, resample(spoken, voice.sample_rate_hz, 48_000), gap])
    path = Path(tempfile.mkdtemp()) / "speech.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(48_000)
        out.writeframes((np.clip(mic, -1, 1) * 32767).astype("<i2").tobytes())
    figures: dict[str, list[float]] = {}
    for name, query in (("webrtc", ""), ("websocket", "?transport=websocket")):
        async with HeadlessChromium(chromium, flags=_mic(path), timeout_s=30) as browser:
            await browser.open(url + "/playground" + query)
            await browser.click("#connect")
            values: list[float] = []
            for _ in range(1500):
                state = await browser.evaluate(STATE)
                values = state["stats"]["heard"]["speechEndToReplyMs"]
                if len(values) >= n:
                    break
                await asyncio.sleep(0.2)
            figures[name] = values[:n]
            titles = await browser.evaluate(PATH_TITLES)
            splits = [m.groups() for t in titles if (m := PATH_SPLIT.search(t))]
            for part, column in zip(("wire", "model", "play"), range(1, 4), strict=True):
                figures[f"{name} {part}"] = [float(split[column]) for split in splits[:n]]
    return figures


PATH_TITLES = """[...document.querySelectorAll('[title*="the whole path"]')].map((node) => node.title)"""
"""The playground's turn markers' titles: each says its reply's whole path (`view.js`, `pathSplit`)."""
PATH_SPLIT = re.compile(
    r"first audio heard (-?\d+) ms = the wire \(.*?\) (-?\d+) ms \+ the model \(.*?\) (-?\d+) ms"
    r" \+ playback \(.*?\) (-?\d+) ms"
)


async def run(args: argparse.Namespace) -> dict[str, list[Trial]]:
    model_args = dict(arg.split("=", 1) for arg in args.model_arg)
    plugin = load_model(args.model, model_args)
    samples = clip(args.speech_ms, args.silence_ms)
    results: dict[str, list[Trial]] = {name: [] for name in TRANSPORTS}
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=4)) as server:
        for _ in range(args.trials):
            for name, protocol in TRANSPORTS.items():
                results[name].append(await trial(server.url, protocol, samples, args.speech_ms))
        if args.browser:
            figures = await browser_run(
                server.http_url, args.browser, args.browser_sentence, args.browser_gap_s
            )
            print(
                f"in the browser (playground, {args.browser} replies): speech end -> reply heard, median ms"
            )
            for name, values in figures.items():
                print(f"{name:<10} {_median(list(values)):>8.1f}  {[round(v) for v in values]}")
    return results


def _median(values: list[float | None]) -> float:
    seen = [v for v in values if v is not None]
    return statistics.median(seen) if seen else float("nan")


SCRIPTED_ARGS = ["first_output_ms=50", "token_ms=5", "chunk_period_ms=200"]
"""The scripted model's default here: 50 ms to first output, 200 ms units."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="sessions per transport (0: the browser only)")
    parser.add_argument("--model", default="scripted", help="the model served: scripted (default) or cascade")
    parser.add_argument(
        "--model-arg",
        action="append",
        default=None,
        help="KEY=VALUE for the model (default for scripted: 50 ms to first output, 200 ms units)",
    )
    parser.add_argument("--speech-ms", type=int, default=900, help="speech, ending inside a unit")
    parser.add_argument("--silence-ms", type=int, default=1500, help="silence after the speech, ms (1500)")
    parser.add_argument("--browser", type=int, default=0, metavar="N", help="also in Chromium, N replies")
    parser.add_argument(
        "--browser-sentence",
        default="Hello there. Can you hear me speaking into the microphone?",
        help="what the browser's microphone says (piper's voice), in a loop",
    )
    parser.add_argument(
        "--browser-gap-s", type=float, default=1.0, help="silence after each sentence in the loop"
    )
    args = parser.parse_args()
    if args.model_arg is None:
        args.model_arg = SCRIPTED_ARGS if args.model == "scripted" else []
    results = asyncio.run(run(args))
    if not args.trials:
        return  # the browser's figures only (printed by `run`)
    print(
        f"{args.trials} sessions per transport, model {args.model} {' '.join(args.model_arg)}; medians in ms"
    )
    columns = ("speech end->audio", "p90", "decided unit", "unit back", "created->audio")
    print(f"{'transport':<10} " + " ".join(f"{c:>{max(len(c), 7)}}" for c in columns))
    medians = {}
    for name, trials in results.items():
        latencies = [t.latency for t in trials if t.latency is not None]
        p90 = statistics.quantiles(latencies, n=10)[8] if len(latencies) >= 2 else float("nan")
        medians[name] = _median([t.latency for t in trials])
        values = (
            medians[name],
            p90,
            _median([t.decision for t in trials]),
            _median([t.unit_back for t in trials]),
            _median([t.audio_after_created for t in trials]),
        )
        print(
            f"{name:<10} "
            + " ".join(f"{v:>{max(len(c), 7)}.1f}" for c, v in zip(columns, values, strict=True))
        )
    cost = medians["webrtc"] - medians["websocket"]
    print(f"WebRTC costs {cost:+.1f} ms at the median ({medians['webrtc'] / medians['websocket']:.2f}x)")


if __name__ == "__main__":
    main()
