"""Mouth to ear: end of a spoken question in the input → the reply heard on the client's timeline, through
the real paths, split by stage, against a baseline tree in the same run (issue #47).

    PYTHONPATH=src .venv/bin/python benchmarks/mouth_to_ear.py                    # 2 rounds of 4, ~4 min
    PYTHONPATH=src .venv/bin/python benchmarks/mouth_to_ear.py --responder local  # the default LLM
    PYTHONPATH=src .venv/bin/python benchmarks/mouth_to_ear.py --loaded           # beside a busy core

Two designs (`baseline`: `--baseline-rev`'s `src/` via `git archive`; `new`: this tree), each in its own
process with its own `EmbeddedServer` and the default cascade (Silero VAD through onnxruntime → Smart Turn →
Whisper tiny.en → `--responder` (echo by default: the LLM's share is then ~0, the rest of the path is what
this measures; `local` is the default SmolLM2) → piper), taking turns question by question. Per design, two
paths from a spoken question (espeak-ng, as issue #47 measured it, after 500 ms of silence; its own
trailing silence as espeak-ng writes it):

- `talk`: what `duplexkit talk` does: `DuplexClient` (protocol `duplex`) and `converse` with talk's
  defaults (realtime pace, `default_chunk_ms` appends, commit at the end of the file, then silence padded
  until the replies settle). Heard: the first reply sentence's start on the client's timeline (the one
  `transcript.json` gives, placed by the collector's rule);
- `serve` (with `--paths talk,sdk,serve`): `talk`'s session against `duplexkit serve` in its own process
  (the cascade, the default edge), as issue #47 measured it; the server's steps are out of reach there,
  so only `chunking`, `held`, `send` and `placement` are observed (the rest `None`) and the model's split
  is the one `response.done` carried;
- `sdk`: the openai SDK (`AsyncOpenAI.realtime.connect`) with `turn_detection: server_vad`, 20 ms appends
  in real time and silence after the clip, no commit. Heard: the first `response.output_audio.delta`'s
  arrival (the SDK has no playback timeline).

The client and the server share this process, so one monotonic clock spans the path. The split, additive
(it sums to the whole, `mouth_to_ear`), each stage with its clock:

- `chunking` (client: media clock → monotonic, by the pacer): the end of speech → its append sent (the
  append waits for its last sample; a 200 ms append holds the end of speech up to 200 ms);
- `transport` (monotonic): that append sent → the server's model stepping the unit that holds the end of
  speech (the socket, the runner, unit assembly on the model's unit grid, the wait for the stepper);
- `end_of_turn` (monotonic; the model's media split `vad_tail` / `smart_turn` beside it): that step →
  the step of the unit that ended the turn (`TurnTrace.ended_at_ms`);
- `reply` (server monotonic): that step → the model released the first reply audio
  (`ReplyTiming.released_at`); the model's own split of its reply path (`final_decode`,
  `llm_first_token`, `first_phrase`, `first_audio_sent`: `model_stages_ms` on the wire) runs partly beside
  Smart Turn, so it is reported beside, not added;
- `held` (monotonic): released → `response.created` received, when that is later (else 0): the engine
  holding the model's reply until server VAD's end of speech (OpenAI's contract: under server VAD the
  detector ends turns; its `silence_duration_ms` is 500 ms by default), plus that event's way;
- `send` (monotonic): the rest, to the first reply audio received by the client;
- `placement` (client playback timeline, media ms): received → the first reply sentence heard there
  (`talk`; the SDK path: `None`, not observed).

Beside the split, `outside the model`: mouth to ear less the model's own `total` (from the end of speech
as the model places it, on its clock): what the path adds around the model.

A step the hook did not see leaves its stage `None` (and the split does not sum); never 0.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from serving import MODEL_STAGES, Worker, baseline_tree

BASELINE_REV = "a71162a"
"""main when issue #47 was filed."""
QUESTIONS = [
    "What is the weather like today?",
    "Can you tell me a joke?",
    "How far away is the moon?",
    "Who wrote the book Moby Dick?",
]
LEAD_IN_MS = 500.0
RATE = 16_000
STAGES = ("chunking", "transport", "end_of_turn", "reply", "held", "send", "placement")
PATHS = ("talk", "sdk", "serve")


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) / {five:.2f} (5 min)"


def espeak(text: str) -> npt.NDArray[np.float32]:
    """`text` spoken by espeak-ng, at 16 kHz."""
    from duplexkit.protocol.audio import resample

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.wav"
        subprocess.run(["espeak-ng", "-w", str(path), text], check=True)
        with wave.open(str(path)) as w:
            rate = w.getframerate()
            pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0
    return np.asarray(resample(pcm, rate, RATE), np.float32)


@dataclass(frozen=True)
class Clip:
    question: str
    audio: npt.NDArray[np.float32]
    end_of_speech_ms: float
    """Ground truth on the clip's media clock (the last 10 ms frame within 40 dB of the loudest)."""


def make_clip(
    question: str, tail_ms: float = 0.0, speak: Callable[[str], npt.NDArray[np.float32]] = espeak
) -> Clip:
    """`question` spoken (by `speak`, at 16 kHz) after `LEAD_IN_MS` of silence, `tail_ms` more after."""
    from duplexkit.models.cascade.drive import silence, speech_end_ms

    voice = speak(question)
    audio = np.concatenate([silence(LEAD_IN_MS), voice, silence(tail_ms)]).astype(np.float32)
    return Clip(question, audio, LEAD_IN_MS + speech_end_ms(voice))


# --- what the hooks see: one session at a time per worker -------------------------------------------


@dataclass
class Seen:
    session: Any = None
    steps: list[tuple[float, float]] = field(default_factory=list)
    """(unit end ms, monotonic at the step's start), per unit the model stepped."""
    appends: list[tuple[float, float]] = field(default_factory=list)
    """(audio end ms, monotonic when on the wire), per append the talk client sent."""

    def step_at(self, media_ms: float) -> float | None:
        """When the unit holding `media_ms` (the first ending at or after it) was stepped."""
        return next((t for end, t in self.steps if end >= media_ms), None)

    def sent_at(self, media_ms: float) -> float | None:
        return next((t for end, t in self.appends if end >= media_ms), None)


SEEN = Seen()


@contextlib.contextmanager
def hooked() -> Iterator[Seen]:
    """While open, `SEEN` records each step's start (the cascade's `step`) and each talk append's time on
    the wire; both methods are restored on leaving."""
    from duplexkit.client.client import DuplexClient
    from duplexkit.models.cascade.plugin import CascadeSession

    step, queue = CascadeSession.step, DuplexClient._queue_append

    def recorded_step(self: Any, unit: Any, request_started_at: float) -> Any:
        SEEN.session = self
        SEEN.steps.append((unit.end_ms, time.monotonic()))
        return step(self, unit, request_started_at)

    def recorded_queue(self: Any, pcm: bytes, end_ms: float, frames: Any = ()) -> Any:
        written = queue(self, pcm, end_ms, frames)
        written.add_done_callback(lambda _: SEEN.appends.append((end_ms, time.monotonic())))
        return written

    CascadeSession.step = recorded_step  # type: ignore[method-assign]
    DuplexClient._queue_append = recorded_queue  # type: ignore[method-assign]
    try:
        yield SEEN
    finally:
        CascadeSession.step = step  # type: ignore[method-assign]
        DuplexClient._queue_append = queue  # type: ignore[method-assign]


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else 1000.0 * (b - a)


def split(
    speech_end_ms: float,
    speech_end_at: float,
    sent_at: float | None,
    created_at: float | None,
    received_at: float | None,
    heard_at: float | None,
) -> dict[str, Any]:
    """The additive split from the times observed (monotonic; the end of speech at `speech_end_ms` on the
    media clock, `speech_end_at` monotonic), the model's turn and its own stages."""
    from duplexkit.models.cascade.plugin import CascadeSession

    session = SEEN.session
    trace = session.last_turn if isinstance(session, CascadeSession) else None
    step_s = SEEN.step_at(speech_end_ms)
    step_turn = None if trace is None else SEEN.step_at(trace.ended_at_ms)
    released = None if trace is None else trace.reply.released_at
    opened = None if released is None or created_at is None else max(released, created_at)
    stages = {
        "chunking": _ms(speech_end_at, sent_at),
        "transport": _ms(sent_at, step_s),
        "end_of_turn": _ms(step_s, step_turn),
        "reply": _ms(step_turn, released),
        "held": _ms(released, opened),
        "send": _ms(opened, received_at),
        "placement": _ms(received_at, heard_at),
    }
    model = {} if trace is None else {k: v for k, v in trace.stages.items() if v is not None}
    return {"stages": stages, "model": model, "whole": _ms(speech_end_at, heard_at)}


async def talk_trial(url: str, clip: Clip) -> dict[str, Any]:
    """One `duplexkit talk` session (its client, its defaults) on `clip`."""
    from duplexkit.client import DuplexClient
    from duplexkit.client.collector import AUDIO_DELTAS
    from duplexkit.client.session import SessionBounds, converse
    from duplexkit.commands import options

    # as talk chooses: a tree with `talk_chunk_ms` streams one server unit per append (None), else 200 ms
    chunk_ms = (
        options.talk_chunk_ms("duplex")
        if hasattr(options, "talk_chunk_ms")
        else options.default_chunk_ms("duplex")
    )
    async with DuplexClient(url, protocol="duplex") as client:
        await converse(
            client,
            clip.audio,
            sample_rate_hz=RATE,
            chunk_ms=chunk_ms,
            bounds=SessionBounds(settle_s=1.0, drain_timeout_s=30.0),
        )
    started, start_ms = client._timeline_origin or (None, 0.0)
    assert started is not None
    speech_end_at = started + (clip.end_of_speech_ms - start_ms) / 1000.0
    audio = next((e for e in client.events if e.type in AUDIO_DELTAS), None)
    created = next((e for e in client.events if e.type == "response.created"), None)
    sentences = client.collector.sentences()
    heard_at = None
    if sentences:
        heard_at = started + (1000.0 * sentences[0].start - start_ms) / 1000.0
    out = split(
        clip.end_of_speech_ms,
        speech_end_at,
        SEEN.sent_at(clip.end_of_speech_ms),
        None if created is None else created.received_at,
        None if audio is None else audio.received_at,
        heard_at,
    )
    out["chunk_ms"] = client.streams[0].chunk_ms if client.streams else None
    out["heard"] = sentences[0].sentence if sentences else None
    wire = _wire_stages(e.data for e in client.events if e.type == "response.done")
    if not out["model"] and wire:
        out["model"] = wire  # another process's server: the split it sent
    return out


def _wire_stages(dones: Any) -> dict[str, float] | None:
    """The model's split as `response.done` carried it (`response_request_metrics.model_stages_ms`)."""
    from duplexkit.client.events import dig

    for data in dones:
        for path in (
            ("response_request_metrics",),
            ("response", "metadata", "duplex_event", "response_request_metrics"),
        ):
            stages = dig(data, *path, "model_stages_ms")
            if isinstance(stages, dict) and stages:
                return dict(stages)
    return None


async def sdk_trial(http_url: str, ws_url: str, clip: Clip, chunk_ms: int) -> dict[str, Any]:
    """One openai SDK session with server VAD: `chunk_ms` appends in real time, silence after the clip."""
    from openai import AsyncOpenAI

    sdk = AsyncOpenAI(  # (as tests/server/test_telephony_e2e.py reaches an embedded server)
        api_key="unused", base_url=f"{http_url}/v1", websocket_base_url=ws_url[: -len("/realtime")]
    )
    size = RATE * chunk_ms // 1000
    audio = np.concatenate([clip.audio, np.zeros(RATE * 8, np.float32)])
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    received_at: float | None = None
    created_at: float | None = None
    sent: list[tuple[float, float]] = []
    async with sdk.realtime.connect(model="cascade") as connection:
        await connection.session.update(
            session={
                "type": "realtime",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "turn_detection": {"type": "server_vad"},
                    }
                },
            }
        )
        async for event in connection:
            if event.type == "session.updated":
                break
        started = time.monotonic()

        async def send() -> None:
            for k, lo in enumerate(range(0, len(pcm), size)):
                due = started + (k + 1) * chunk_ms / 1000.0
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                chunk = _upsample(pcm[lo : lo + size])
                await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
                sent.append(((k + 1) * chunk_ms, time.monotonic()))

        sender = asyncio.create_task(send())
        try:
            async with asyncio.timeout(20):
                async for event in connection:
                    if event.type == "response.created" and created_at is None:
                        created_at = time.monotonic()
                    if event.type == "response.output_audio.delta" and received_at is None:
                        received_at = time.monotonic()
                        break
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
    speech_end_at = started + clip.end_of_speech_ms / 1000.0
    sent_at = next((t for end, t in sent if end >= clip.end_of_speech_ms), None)
    out = split(clip.end_of_speech_ms, speech_end_at, sent_at, created_at, received_at, None)
    out["whole"] = _ms(speech_end_at, received_at)
    out["chunk_ms"] = chunk_ms
    return out


def _upsample(pcm16: npt.NDArray[np.int16]) -> bytes:
    """16 kHz → OpenAI's 24 kHz PCM (what an SDK client sends)."""
    from duplexkit.protocol.audio import resample

    up = resample(pcm16.astype(np.float32) / 32768.0, RATE, 24_000)
    return bytes((np.clip(up, -1, 1) * 32767).astype("<i2").tobytes())


def start_serve(responder: str) -> tuple[subprocess.Popen[bytes], str]:
    """`duplexkit serve` (the cascade) in its own process, on a free port, once it answers `/healthz`."""
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "duplexkit", "serve", "--model", "cascade", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--model-arg", f"responder={responder}"], stdout=subprocess.DEVNULL, stderr=sys.stderr
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                if response.status == 200:
                    return process, f"ws://127.0.0.1:{port}/v1/realtime"
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("duplexkit serve did not come up")


async def worker(responder: str, sdk_chunk_ms: int, tail_ms: float, serve: bool) -> None:
    """`talk N` / `sdk N` / `serve N` runs question N on that path (a `SAMPLE` line); `quit` ends."""
    from duplexkit.models import load_model
    from duplexkit.server import EmbeddedServer, ServerConfig

    os.environ["HF_HUB_OFFLINE"] = "1"
    plugin = load_model("cascade", {"responder": responder})
    clips = [make_clip(q, tail_ms) for q in QUESTIONS]
    served, serve_url = start_serve(responder) if serve else (None, None)
    try:
        async with EmbeddedServer(plugin, ServerConfig(max_sessions=2)) as server:
            await run_one(server, "talk", clips[0], sdk_chunk_ms)  # warm every stage once
            if serve_url is not None:
                await run_one(server, "serve", clips[0], sdk_chunk_ms, serve_url)
            print("READY", flush=True)
            await answer(server, clips, sdk_chunk_ms, serve_url)
    finally:
        if served is not None:
            served.terminate()
            served.wait(30)


async def answer(server: Any, clips: list[Clip], sdk_chunk_ms: int, serve_url: str | None) -> None:
    """The worker's commands, one at a time, until `quit`."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        command = line.split()
        if not command or command[0] == "quit":
            return
        load_at = os.getloadavg()[0]
        sample = await run_one(server, command[0], clips[int(command[1])], sdk_chunk_ms, serve_url)
        sample["load"] = load_at
        sample["question"] = QUESTIONS[int(command[1])]
        print("SAMPLE " + json.dumps(sample), flush=True)


async def run_one(
    server: Any, path: str, clip: Clip, sdk_chunk_ms: int = 20, serve_url: str | None = None
) -> dict[str, Any]:
    """One session on `path` (`talk` or `sdk` against `server`, an `EmbeddedServer` with the cascade, or
    `serve`: talk's against `serve_url`):
    `whole`, the additive `stages` and the model's own split (`model`), in ms."""
    SEEN.session, SEEN.steps, SEEN.appends = None, [], []
    with hooked():
        if path == "talk":
            return await talk_trial(server.url, clip)
        if path == "serve":
            assert serve_url is not None
            return await talk_trial(serve_url, clip)
        return await sdk_trial(server.http_url, server.url, clip, sdk_chunk_ms)


# --- the driver ---------------------------------------------------------------------------------------


def median(values: list[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return float(np.median(seen)) if seen else None


def cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def _outside(sample: dict[str, Any]) -> float | None:
    """Mouth to ear less the model's own `total` (its end of speech → first audio sent): the path's share."""
    total = sample["model"].get("total")
    return None if total is None or sample["whole"] is None else sample["whole"] - total


def report(samples: dict[tuple[str, str], list[dict[str, Any]]], rounds: int) -> None:
    print(
        f"\n## Mouth to ear, ms, medians ({rounds} round(s); one process per design, one monotonic clock)\n"
    )
    print(
        "| path | design | n | mouth to ear p50 | p90 | "
        + " | ".join(STAGES)
        + " | outside the model | load |"
    )
    print("| --- | --- | ---: | ---: | ---: |" + " ---: |" * len(STAGES) + " ---: | --- |")
    whole: dict[tuple[str, str], float | None] = {}
    for (path, design), got in sorted(samples.items()):
        values = [s["whole"] for s in got if s["whole"] is not None]
        whole[(path, design)] = median(list(values))
        p90 = float(np.percentile(values, 90)) if values else None
        loads = [s["load"] for s in got]
        print(
            f"| {path} | {design} | {len(values)} of {len(got)} | "
            f"{cell(whole[(path, design)])} | {cell(p90)} | "
            + " | ".join(cell(median([s["stages"][k] for s in got])) for k in STAGES)
            + f" | {cell(median([_outside(s) for s in got]))} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    for path in PATHS:
        new, base = whole.get((path, "new")), whole.get((path, "baseline"))
        if new is not None and base:
            print(f"\n{path}: new / baseline = {new / base:.2f} ({new - base:+.0f} ms at the median)")
    print("\n## The model's own split (TurnTrace.stages; media: vad_tail, smart_turn; monotonic: the rest)\n")
    print("| path | design | " + " | ".join(MODEL_STAGES) + " |")
    print("| --- | --- |" + " ---: |" * len(MODEL_STAGES))
    for (path, design), got in sorted(samples.items()):
        print(
            f"| {path} | {design} | "
            + " | ".join(cell(median([s["model"].get(k) for s in got])) for k in MODEL_STAGES)
            + " |"
        )
    print("\nPer session:\n")
    for (path, design), got in sorted(samples.items()):
        for s in got:
            parts = " ".join(f"{k}={cell(s['stages'][k])}" for k in STAGES)
            model = " ".join(f"{k}={cell(s['model'].get(k))}" for k in MODEL_STAGES)
            print(
                f"{path:<5} {design:<8} load {s['load']:.1f} whole={cell(s['whole'])} {parts} "
                f"chunk {s['chunk_ms']} ms | model: {model} | {s['question']}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="passes over the questions per path (2)")
    parser.add_argument(
        "--questions", type=int, default=len(QUESTIONS), help=f"questions per pass, at most {len(QUESTIONS)}"
    )
    parser.add_argument("--paths", default="talk,sdk", help="talk, sdk and/or serve, comma separated")
    parser.add_argument("--responder", default="echo", help="echo (default) or local (the default LLM)")
    parser.add_argument("--sdk-chunk-ms", type=int, default=20, help="the SDK path's append size, ms (20)")
    parser.add_argument(
        "--tail-ms",
        type=float,
        default=0.0,
        help="silence after espeak-ng's own tail (a microphone: the turn ends by the VAD, not the commit)",
    )
    parser.add_argument("--loaded", action="store_true", help="a second process spins one core throughout")
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help=f"baseline commit ({BASELINE_REV})")
    parser.add_argument("--no-baseline", action="store_true", help="measure this tree only")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.responder, args.sdk_chunk_ms, args.tail_ms, "serve" in args.paths))
        return
    paths = args.paths.split(",")
    questions = min(len(QUESTIONS), args.questions)
    print(f"# mouth to ear: {args.rounds} round(s) of {questions} question(s), paths {paths}, ", end="")
    print(
        f"responder {args.responder}, tail +{args.tail_ms:.0f} ms, "
        f"{'loaded' if args.loaded else 'quiet'}; machine {load()}, {os.cpu_count()} CPUs"
    )
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    forwarded = [
        "--responder",
        args.responder,
        "--sdk-chunk-ms",
        str(args.sdk_chunk_ms),
        "--tail-ms",
        str(args.tail_ms),
        "--paths",
        args.paths,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"new": Path(__file__).resolve().parents[1] / "src"}
        if not args.no_baseline:
            sources = {"baseline": baseline_tree(args.baseline_rev, Path(tmp)), **sources}
        workers = [Worker(n, __file__, s, Path(tmp) / f"{n}.log", forwarded) for n, s in sources.items()]
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.loaded else None
        try:
            for round_ in range(args.rounds):
                # a path's questions one after another: the local LLM's context keeps the last prompt, so
                # the same question twice in a row (one path, then the next) would find it all evaluated
                for path in paths:
                    for index in range(questions):
                        order = workers if (index + round_) % 2 == 0 else workers[::-1]
                        for w in order:
                            samples.setdefault((path, w.name), []).append(w.ask(f"{path} {index}", "SAMPLE "))
                print(f"round {round_ + 1} done, {load()}", flush=True)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
            for w in workers:
                w.close()
    report(samples, args.rounds)


if __name__ == "__main__":
    main()
