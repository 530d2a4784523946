"""Cascade latency: end of user speech → first reply audio, per stage, against a baseline in the same run.

One command, run from the repository root (it prints the machine's load average with every figure):

    PYTHONPATH=src .venv/bin/python benchmarks/cascade_latency.py            # 2 rounds of 8, ~10 min
    PYTHONPATH=src .venv/bin/python benchmarks/cascade_latency.py --quick    # 1 round of 4, ~4 min

Two designs of the default stack (Silero VAD through onnxruntime → Smart Turn → Whisper tiny.en → the
local SmolLM2-135M → piper), each in its own process with its models loaded once, taking turns question
by question (which one goes first alternates), so both see the same machine:
- `baseline`: the cascade as it was before issue #36 (`--baseline-rev`, a commit of this repository;
  its `src/` is taken with `git archive` and imported instead of this tree's);
- `new`: this tree's cascade (the reply started from the pause's decode while Smart Turn decides).
Each under two conditions: `quiet` (nothing else started by the benchmark) and `loaded` (a second
process spinning one core in a pure-Python loop for the whole measurement).

Spoken questions are made with the cascade's own voice (piper, without its sampling noise: the same audio
in every worker) plus a -60 dBFS noise floor and fed to
`CascadeSession.step` in 100 ms units on a real-time schedule (a unit is stepped once its last sample has
"arrived", one at a time, as the server's runner does). Latency: from the ground-truth end of speech (the
last 10 ms frame within 40 dB of the loudest, in the clean audio) to the step yielding the first reply
audio, on this process's monotonic clock; `turn end`: to the end of the unit at which the turn's end was
established (media clock). The new design also reports its own split (`TurnTrace.stages`, the same one
the playground's turn marker shows): `vad_tail` (last voiced frame → the pause acted on, media),
`smart_turn` (→ the turn's end established, media), then on the reply's path, beside Smart Turn:
`final_decode`, `llm_first_token`, `first_phrase` (first token → first phrase's audio ready; its
synthesis alone `tts_first_phrase`), `first_audio_sent` (ready → a step released it) and `total`.

With `--sessions 4,6,8`: also N sessions in one process and event loop (as in the server), each looping
question → reply with staggered starts, for `--seconds`; a level is held when >= 99 % of units are
stepped within their 100 ms period.

Also per design: word error rate of the final transcripts against the questions; false cut-offs (quiet
condition only: sentences with a 700 ms mid-sentence pause, counted when the turn ended inside the pause;
Smart Turn's verdicts should not change); the speculative replies started, adopted and discarded, and
the work discarded; the real-time factor of piper's synthesis alone (synthesis time / audio duration).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from serving import MODEL_STAGES, Worker, baseline_tree

BASELINE_REV = "579c551"
"""main before issue #36 (the reply started only once the pause's transcript was known)."""
STACK = {"vad": "onnx", "asr": "whisper", "turn": "semantic", "responder": "local"}
QUESTIONS = [
    "What is the weather like today?",
    "Turn on the kitchen lights.",
    "Can you tell me a joke?",
    "How far away is the moon?",
    "Set a timer for ten minutes.",
    "What time does the store open tomorrow?",
    "Play some relaxing music.",
    "Who wrote the book Moby Dick?",
]
PAUSED = [
    ("Set a timer for ten minutes.", 4),
    ("What is the weather like in Paris today?", 5),
    ("Can you tell me a joke about cats?", 4),
    ("I would like to turn on the kitchen lights.", 4),
]
"""Sentences spoken whole, then cut after their first N words for the mid-sentence pause: the voice keeps
its mid-sentence prosody (a fragment synthesised alone would end like a finished sentence)."""
PAUSE_MS = 700.0
LEAD_IN_MS = 500.0
TAIL_MS = 3500.0
WAIT_S = 15.0
"""How long past the clip the first reply audio is waited for (a noise floor goes on being fed)."""
_NUMBERS = {"10": "ten", "1": "one", "2": "two", "3": "three", "5": "five"}


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) / {five:.2f} (5 min)"


# --- the worker: one design, one condition, in its own process ----------------------------------------


@dataclass
class Sample:
    question: str
    transcript: str
    latency_ms: float
    """Ground-truth end of speech → the step yielding the first reply audio (monotonic)."""
    turn_end_ms: float
    """Ground-truth end of speech → end of the unit that ended the turn (media clock)."""
    stages: dict[str, float] = field(default_factory=dict)
    prepared: bool | None = None


@dataclass(frozen=True)
class Clip:
    question: str
    audio: npt.NDArray[np.float32]
    end_of_speech_ms: float


async def drive(session: Any, clip: Clip, period_ms: int) -> Sample | None:
    """Feed `clip` in real time, stepping each unit once it arrived; the first reply audio's timing."""
    from duplexkit.engine import Speak, Transcribed
    from duplexkit.models.cascade.drive import silence, units, with_noise_floor

    t0 = time.monotonic() + 0.05
    first_audio_at: float | None = None
    turn_unit_end: float | None = None
    transcript: str | None = None
    stages: dict[str, float] = {}
    wait = with_noise_floor(silence(1000.0 * WAIT_S), seed=99)
    for unit in units(np.concatenate([clip.audio, wait]), period_ms):
        if first_audio_at is not None and unit.start_ms >= 1000.0 * len(clip.audio) / 16_000:
            break
        await asyncio.sleep(max(0.0, t0 + unit.end_ms / 1000.0 - time.monotonic()))
        async for decision in session.step(unit, time.monotonic()):
            if isinstance(decision, Transcribed) and decision.final and transcript is None:
                transcript = decision.text
            if not isinstance(decision, Speak):
                continue
            if turn_unit_end is None:
                turn_unit_end = unit.end_ms
            if first_audio_at is None and len(decision.audio):
                first_audio_at = time.monotonic()
                stages = dict(getattr(decision, "stages_ms", ()))
    if first_audio_at is None or turn_unit_end is None:
        return None
    turn = session.last_turn
    return Sample(
        question=clip.question,
        transcript=transcript if transcript is not None else "",
        latency_ms=1000.0 * (first_audio_at - t0) - clip.end_of_speech_ms,
        turn_end_ms=turn_unit_end - clip.end_of_speech_ms,
        stages=stages,
        prepared=None if turn is None else turn.prepared,
    )


def paused_clip(voice_of: Any, asr: Any, sentence: str, words: int, seed: int) -> tuple[Clip, float]:
    """`sentence` with a `PAUSE_MS` pause after its first `words` words (cut at the quietest 10 ms within
    60 ms of Whisper's end of that word); also where the pause ends on the clip's clock."""
    from duplexkit.models.cascade.drive import silence, spoken, with_noise_floor

    voice = spoken(voice_of, sentence)
    end_ms = asr.transcribe(voice).words[words - 1].end_ms
    frames = [round(16 * (end_ms + d)) for d in range(-60, 61, 10)]
    cut = min(
        (f for f in frames if 0 < f < len(voice) - 160), key=lambda f: float(np.sum(voice[f : f + 160] ** 2))
    )
    audio = np.concatenate(
        [silence(LEAD_IN_MS), voice[:cut], silence(PAUSE_MS), voice[cut:], silence(TAIL_MS)]
    )
    return Clip(sentence, with_noise_floor(audio, seed=seed), 0.0), LEAD_IN_MS + cut / 16 + PAUSE_MS


async def false_cutoffs(model: Any, speaker: Any) -> int:
    """Phrases whose turn ended inside their mid-sentence pause (stepped as fast as the model allows)."""
    from duplexkit.engine import Transcribed
    from duplexkit.models.cascade.drive import units

    assert model.whisper is not None
    cut = 0
    for seed, (sentence, words) in enumerate(PAUSED):
        clip, pause_end = paused_clip(speaker, model.whisper, sentence, words, seed)
        session = model.new_session()
        ended_in_pause = False
        for unit in units(clip.audio, model.config.chunk_period_ms):
            async for decision in session.step(unit, time.monotonic()):
                if isinstance(decision, Transcribed) and decision.final and unit.end_ms <= pause_end + 100:
                    ended_in_pause = True
            await session.reply_produced()
        cut += ended_in_pause
        await session.aclose()
    return cut


async def keep_up(
    session: Any, clips: list[Clip], period_ms: int, t0: float, until: float, lags: list[float]
) -> None:
    """Feed `clips` back to back in real time from monotonic `t0` until `until`; each unit's lag (stepped
    → arrived) in `lags`."""
    from duplexkit.models.cascade.drive import units

    start_ms, index = 0.0, 0
    while True:
        for clip in clips:
            for unit in units(clip.audio, period_ms, start_ms=start_ms, first_index=index):
                index += 1
                due = t0 + unit.end_ms / 1000.0
                if due > until:
                    return
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                async for _ in session.step(unit, time.monotonic()):
                    pass
                lags.append(1000.0 * (time.monotonic() - due))
            start_ms += 1000.0 * len(clip.audio) / 16_000


async def capacity(model: Any, clips: list[Clip], sessions: int, seconds: float) -> dict[str, Any]:
    """`sessions` sessions in this process and event loop (as in the server), each looping question →
    reply with staggered starts; a session keeps real time when its units are stepped within a period."""
    period = model.config.chunk_period_ms
    start = time.monotonic() + 0.2
    clip_s = float(np.mean([len(c.audio) for c in clips])) / 16_000
    lags: list[float] = []
    runs = []
    for k in range(sessions):
        order = clips[k % len(clips) :] + clips[: k % len(clips)]
        runs.append((model.new_session(), order, start + k * clip_s / sessions))  # turns end apart
    load_at = os.getloadavg()[0]
    await asyncio.gather(*(keep_up(s, order, period, t0, start + seconds, lags) for s, order, t0 in runs))
    for session, _, _ in runs:
        await session.aclose()
    within = sum(lag <= period for lag in lags) / len(lags) if lags else float("nan")
    return {
        "sessions": sessions,
        "period_ms": period,
        "units": len(lags),
        "within": within,
        "p50": float(np.percentile(lags, 50)) if lags else None,
        "p99": float(np.percentile(lags, 99)) if lags else None,
        "max": max(lags, default=None),
        "load": load_at,
    }


def synthesis_rtf(model: Any) -> list[float]:
    """Piper alone, as the cascade runs it (its thread count): synthesis time / audio duration, per phrase."""
    phrases = [
        "The moon is about",
        "I can set a timer for ten minutes.",
        "It is sunny and warm today, with a light breeze from the west.",
    ]
    out = []
    for text in phrases * 2:
        began = time.perf_counter()
        audio = model.synthesizer.synthesize(text)
        out.append((time.perf_counter() - began) / (len(audio) / model.synthesizer.sample_rate_hz))
    return out


async def worker() -> None:
    """Serve the driver over stdin/stdout: `q N` runs question N (a `SAMPLE` line), `capacity N S` N
    sessions for S seconds, `cutoffs` the false cut-offs and piper's RTF, `stats` the speculative replies,
    `quit` ends."""
    from duplexkit.models.cascade.drive import silence, speech_end_ms, spoken, with_noise_floor
    from duplexkit.models.cascade.plugin import CascadeModel
    from duplexkit.models.cascade.tts import PiperSynthesizer

    os.environ["HF_HUB_OFFLINE"] = "1"
    model = CascadeModel.from_args(STACK)
    speaker = PiperSynthesizer(deterministic=True)  # the same questions, sample for sample, in every worker
    clips = []
    for seed, question in enumerate(QUESTIONS):
        voice = spoken(speaker, question)
        audio = np.concatenate([silence(LEAD_IN_MS), voice, silence(TAIL_MS)])
        clips.append(Clip(question, with_noise_floor(audio, seed=seed), LEAD_IN_MS + speech_end_ms(voice)))
    session = model.new_session()  # warm every stage once (first calls allocate)
    await drive(session, clips[0], model.config.chunk_period_ms)
    await session.aclose()
    print("READY", flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "q":
            session = model.new_session()
            load_at = os.getloadavg()[0]
            sample = await drive(session, clips[int(command[1])], model.config.chunk_period_ms)
            await session.aclose()
            out = None if sample is None else {**asdict(sample), "load": load_at}
            print("SAMPLE " + json.dumps(out), flush=True)
        elif command[0] == "capacity":
            held = await capacity(model, clips, int(command[1]), float(command[2]))
            print("CAPACITY " + json.dumps(held), flush=True)
        elif command[0] == "cutoffs":
            result = {
                "false_cutoffs": await false_cutoffs(model, speaker),
                "synthesis_rtf": synthesis_rtf(model),
            }
            print("CUTOFFS " + json.dumps(result), flush=True)
        elif command[0] == "stats":
            speculation = getattr(model, "speculation", None)
            print("STATS " + json.dumps(None if speculation is None else asdict(speculation)), flush=True)
        else:
            return


# --- the driver: baseline and new, quiet and loaded, question by question ------------------------------


def pct(values: list[float], q: float) -> str:
    return f"{float(np.percentile(values, q)):.0f}" if values else "—"


def words(text: str) -> list[str]:
    return [_NUMBERS.get(w, w) for w in re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()]


def wer(pairs: list[tuple[str, str]]) -> float:
    """Word error rate over (reference, hypothesis) pairs: word edits / reference words."""
    edits = total = 0
    for reference, hypothesis in pairs:
        ref, hyp = words(reference), words(hypothesis)
        row = list(range(len(hyp) + 1))
        for i, r in enumerate(ref, 1):
            prev, row[0] = row[0], i
            for j, h in enumerate(hyp, 1):
                prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
        edits, total = edits + row[-1], total + len(ref)
    return edits / total if total else float("nan")


def report(
    samples: dict[tuple[str, str], list[dict[str, Any]]], extras: dict[str, dict[str, Any]], rounds: int
) -> None:
    """The tables docs/performance.md quotes: per design and condition, then the new design's split."""
    print(f"\n## End of speech → first audio, ms ({rounds} round(s); each worker's monotonic clock)\n")
    print("| design | condition | replies | latency p50 | p95 | turn end p50 | WER | false cut-offs | load |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for (design, condition), got in samples.items():
        heard = [s for s in got if s is not None]
        latency = [s["latency_ms"] for s in heard]
        loads = [s["load"] for s in heard]
        cutoffs = extras.get(design, {}).get("false_cutoffs") if condition == "quiet" else None
        print(
            f"| {design} | {condition} | {len(heard)} of {len(got)} | "
            f"{pct(latency, 50)} | {pct(latency, 95)} | "
            f"{pct([s['turn_end_ms'] for s in heard], 50)} | "
            f"{100 * wer([(s['question'], s['transcript']) for s in heard]):.1f} % | "
            f"{'—' if cutoffs is None else f'{cutoffs}/{len(PAUSED)}'} | "
            f"{min(loads, default=float('nan')):.1f}-{max(loads, default=float('nan')):.1f} |"
        )
    print("\n## Where the time goes: each design's own split (TurnTrace.stages), p50 / p95, ms\n")
    print("| design | condition | " + " | ".join(MODEL_STAGES) + " |")
    print("| --- | --- |" + " ---: |" * len(MODEL_STAGES))
    for (design, condition), got in sorted(samples.items()):
        split = [s["stages"] for s in got if s is not None and s["stages"]]
        if split:  # a baseline from before the split was reported has none
            columns = ([st[k] for st in split if k in st] for k in MODEL_STAGES)
            cells = " | ".join(f"{pct(v, 50)} / {pct(v, 95)}" for v in columns)
            print(f"| {design} | {condition} | {cells} |")
    for design, extra in extras.items():
        stats = extra.get("speculation")
        if stats:
            print(
                f"\n{design}: speculative replies {stats['started']} started, {stats['adopted']} adopted, "
                f"{stats['discarded']} discarded ({stats['discarded_busy_ms']:.0f} ms of production and "
                f"{stats['discarded_audio_ms']:.0f} ms of audio thrown away; false cut-off runs included)"
            )
        rtf = extra.get("synthesis_rtf")
        if rtf:
            print(
                f"{design}: piper synthesis alone (one thread, as the cascade runs it): "
                f"RTF p50 {np.median(rtf):.3f}, max {max(rtf):.3f}"
            )
    print("\nPer reply:\n")
    print("| design | condition | load | question | heard | latency | " + " | ".join(MODEL_STAGES) + " |")
    print("| --- | --- | ---: | --- | --- | ---: |" + " ---: |" * len(MODEL_STAGES))
    for (design, condition), got in samples.items():
        for s in (s for s in got if s is not None):
            cells = " | ".join(f"{s['stages'][k]:.0f}" if k in s["stages"] else "—" for k in MODEL_STAGES)
            print(
                f"| {design} | {condition} | {s['load']:.1f} | {s['question']} | {s['transcript']} | "
                f"{s['latency_ms']:.0f} | {cells} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 4 questions (else 2 rounds of 8)")
    parser.add_argument("--rounds", type=int, help="passes over the questions per condition (2)")
    parser.add_argument("--questions", type=int, help="questions per pass, at most 8 (8)")
    parser.add_argument("--conditions", default="quiet,loaded", help="quiet and/or loaded, comma separated")
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="the baseline's commit (before #36)")
    parser.add_argument("--no-baseline", action="store_true", help="measure the new design only")
    parser.add_argument("--sessions", default="", help="also concurrent sessions held, e.g. 4,6,8 (quiet)")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each concurrency level")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker())
        return
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 2)
    questions = min(len(QUESTIONS), args.questions or (4 if args.quick else len(QUESTIONS)))
    print(f"# cascade latency: {rounds} round(s) of {questions} question(s), designs alternating; ", end="")
    print(f"machine {load()}, {os.cpu_count()} CPUs")
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {}
    extras: dict[str, dict[str, Any]] = {}
    held: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"new": Path(__file__).resolve().parents[1] / "src"}
        if not args.no_baseline:
            sources = {"baseline": baseline_tree(args.baseline_rev, Path(tmp)), **sources}
        workers = [Worker(name, __file__, src, Path(tmp) / f"{name}.log") for name, src in sources.items()]
        try:
            for condition in args.conditions.split(","):
                spinner = None
                if condition == "loaded":
                    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                try:
                    for round_ in range(rounds):
                        for index in range(questions):
                            # each question by each design, taking turns at going first
                            order = workers if (index + round_) % 2 == 0 else workers[::-1]
                            for w in order:
                                sample = w.ask(f"q {index}", "SAMPLE ")
                                samples.setdefault((w.name, condition), []).append(sample)
                        print(f"{condition} round {round_ + 1} done, {load()}", flush=True)
                finally:
                    if spinner is not None:
                        spinner.kill()
                        spinner.wait()
            for n in (int(n) for n in args.sessions.split(",") if n):
                for w in workers:
                    held.append((w.name, w.ask(f"capacity {n} {args.seconds}", "CAPACITY ")))
            for w in workers:
                extras[w.name] = w.ask("cutoffs", "CUTOFFS ")
                extras[w.name]["speculation"] = w.ask("stats", "STATS ")
        finally:
            for w in workers:
                w.close()
    report(samples, extras, rounds)
    if held:
        print("\n## Concurrent sessions (lag = step finished - unit arrived, ms)\n")
        print("| design | sessions | unit ms | units | within period | lag p50 | p99 | max | load |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for design, h in held:
            print(
                f"| {design} | {h['sessions']} | {h['period_ms']} | {h['units']} | "
                f"{100 * h['within']:.2f} % | {h['p50']:.1f} | "
                f"{h['p99']:.1f} | {h['max']:.1f} | {h['load']:.1f} |"
            )


if __name__ == "__main__":
    main()
