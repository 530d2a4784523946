"""Cascade latency and capacity: end of user speech → first reply audio, and concurrent real-time sessions.

Spoken questions are generated with the cascade's own voice (piper), given a -60 dBFS noise floor, and fed
to `CascadeSession.step` in 100 ms units on a real-time schedule: a unit is stepped once its last sample
has "arrived" (start + its end on the media clock), and a session steps its units one at a time, so a slow
step delays the next ones exactly as in the server's runner. The echo responder answers.

Latency: from the ground-truth end of speech (last 10 ms frame within 40 dB of the loudest, in the clean
generated audio) to the step yielding the first reply audio. Split along the critical path: VAD hangover
(end of speech → the VAD establishing it: its own lag plus the 500 ms silence window), unit wait (→ the
end of the unit that carries it), hear (that unit's VAD + ASR + transcript), reply wait (the step waiting
for the first audio: responder + first TTS piece, unless the reply was prepared during the pause), and
the rest (scheduling, thread hops). Also shown: the responder's time to first text and the first TTS
piece's synthesis time, wherever they happened, and whether the reply had been prepared.

Capacity: N sessions in one process and event loop (as in the server), each looping question → reply
with staggered starts. A session stays real-time when every unit is stepped within one unit period of its
arrival; we report the share that was and the lag percentiles.

    .venv/bin/python benchmarks/cascade_latency.py --rounds 2 --sessions 1,2,4,6,8 --seconds 20
    .venv/bin/python benchmarks/cascade_latency.py --rounds 2 --sessions 4 --preempt-ms 0
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from duplexkit.engine import Speak
from duplexkit.models.cascade.asr import DecoderPool
from duplexkit.models.cascade.drive import silence, speech_end_ms, spoken, units, with_noise_floor
from duplexkit.models.cascade.plugin import CascadeModel, CascadeSession

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
LEAD_IN_MS = 500.0
TAIL_MS = 3500.0


@dataclass
class Sample:
    question: str
    latency_ms: float
    hangover_ms: float
    unit_wait_ms: float
    hear_ms: float
    reply_wait_ms: float
    asr_final_ms: float
    responder_ms: float
    tts_first_ms: float
    prepared: bool

    @property
    def rest_ms(self) -> float:
        return self.latency_ms - self.hangover_ms - self.unit_wait_ms - self.hear_ms - self.reply_wait_ms


@dataclass
class Lags:
    lags_ms: list[float] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


@dataclass(frozen=True)
class Clip:
    question: str
    audio: npt.NDArray[np.float32]
    end_of_speech_ms: float


def make_clip(model: CascadeModel, question: str, seed: int) -> Clip:
    voice = spoken(model.synthesizer, question)
    audio = np.concatenate([silence(LEAD_IN_MS), voice, silence(TAIL_MS)])
    return Clip(question, with_noise_floor(audio, seed=seed), LEAD_IN_MS + speech_end_ms(voice))


async def drive(
    session: CascadeSession, clips: list[Clip], period_ms: int, t0: float, stats: Lags, until: float
) -> None:
    """Feed `clips` back to back in real time from monotonic `t0`, stepping each unit once it arrived."""
    clip_start_ms = 0.0
    index = 0
    while True:
        for clip in clips:
            first_audio_at: float | None = None
            stop_unit_end: float | None = None
            for unit in units(clip.audio, period_ms, start_ms=clip_start_ms, first_index=index):
                index += 1
                due = t0 + unit.end_ms / 1000.0
                if due > until:
                    return
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                async for decision in session.step(unit, time.monotonic()):
                    if isinstance(decision, Speak) and first_audio_at is None and len(decision.audio):
                        first_audio_at, stop_unit_end = time.monotonic(), unit.end_ms
                stats.lags_ms.append(1000.0 * (time.monotonic() - due))
            end_ms = clip_start_ms + clip.end_of_speech_ms
            clip_start_ms += 1000.0 * len(clip.audio) / 16_000
            turn = session.last_turn
            if first_audio_at is None or stop_unit_end is None or turn is None:
                continue
            reply = turn.reply
            stats.samples.append(
                Sample(
                    question=clip.question,
                    latency_ms=1000.0 * (first_audio_at - t0) - end_ms,
                    hangover_ms=turn.utterance.stopped_at_ms - end_ms,
                    unit_wait_ms=stop_unit_end - turn.utterance.stopped_at_ms,
                    hear_ms=turn.hear_ms,
                    reply_wait_ms=turn.reply_wait_ms,
                    asr_final_ms=turn.utterance.asr_final_ms,
                    responder_ms=1000.0 * ((reply.first_text_at or reply.started_at) - reply.started_at),
                    tts_first_ms=reply.first_synthesis_ms or 0.0,
                    prepared=turn.prepared,
                )
            )


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def latency(model: CascadeModel, clips: list[Clip], rounds: int) -> list[Sample]:
    stats = Lags()
    for _ in range(rounds):
        for clip in clips:
            session = model.new_session()
            t0 = time.monotonic() + 0.05
            seconds = len(clip.audio) / 16_000
            await drive(session, [clip], model.config.chunk_period_ms, t0, stats, t0 + seconds + 0.001)
            await session.aclose()
    return stats.samples


async def capacity(model: CascadeModel, clips: list[Clip], sessions: int, seconds: float) -> Lags:
    stats = Lags()
    start = time.monotonic() + 0.2
    clip_s = statistics.mean(len(c.audio) for c in clips) / 16_000
    runs = []
    for k in range(sessions):
        order = clips[k % len(clips) :] + clips[: k % len(clips)]
        t0 = start + k * clip_s / sessions  # phases spread over one exchange: turns end at different times
        runs.append((model.new_session(), order, t0))
    await asyncio.gather(
        *(drive(s, order, model.config.chunk_period_ms, t0, stats, start + seconds) for s, order, t0 in runs)
    )
    for session, _, _ in runs:
        await session.aclose()
    return stats


COLUMNS = (
    "latency",
    "VAD hangover",
    "unit wait",
    "hear",
    "reply wait",
    "rest",
    "(ASR final)",
    "(responder)",
    "(TTS 1st piece)",
)


def _cells(s: Sample) -> list[float]:
    return [
        s.latency_ms,
        s.hangover_ms,
        s.unit_wait_ms,
        s.hear_ms,
        s.reply_wait_ms,
        s.rest_ms,
        s.asr_final_ms,
        s.responder_ms,
        s.tts_first_ms,
    ]


def report_latency(samples: list[Sample]) -> None:
    prepared = sum(s.prepared for s in samples)
    print(f"\n## End of speech → first reply audio, ms ({len(samples)} replies, echo responder, ", end="")
    print(f"{prepared} prepared during the pause)\n")
    print("| question | " + " | ".join(COLUMNS) + " |")
    print("| --- |" + " ---: |" * len(COLUMNS))
    for s in samples:
        print(f"| {s.question} | " + " | ".join(f"{c:.0f}" for c in _cells(s)) + " |")
    print("\n| statistic | " + " | ".join(COLUMNS) + " |")
    print("| --- |" + " ---: |" * len(COLUMNS))
    for name, q in (("p50", 50), ("p90", 90)):
        columns = zip(*(_cells(s) for s in samples), strict=True)
        print(f"| {name} | " + " | ".join(f"{pct(list(c), q):.0f}" for c in columns) + " |")


def report_capacity(rows: list[tuple[int, Lags]], period_ms: int) -> None:
    print(f"\n## Concurrent sessions ({period_ms} ms units; lag = step finished - unit arrived)\n")
    print("| sessions | units | within period | lag p50 | lag p99 | lag max | replies | latency p50 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, stats in rows:
        lags = stats.lags_ms
        within = sum(lag <= period_ms for lag in lags) / len(lags) if lags else float("nan")
        lat = statistics.median(s.latency_ms for s in stats.samples) if stats.samples else float("nan")
        print(
            f"| {n} | {len(lags)} | {100 * within:.2f}% | {pct(lags, 50):.1f} | {pct(lags, 99):.1f} | "
            f"{max(lags):.1f} | {len(stats.samples)} | {lat:.0f} |"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="latency passes over the questions")
    parser.add_argument("--sessions", default="1,2,4,6", help="concurrency levels, comma separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each concurrency level")
    parser.add_argument("--preempt-ms", help="the model's preempt_ms (0: no reply prepared during pauses)")
    args = parser.parse_args()
    levels = [int(n) for n in args.sessions.split(",") if n]

    began = time.monotonic()
    model = CascadeModel.from_args({} if args.preempt_ms is None else {"preempt_ms": args.preempt_ms})
    model.pool = DecoderPool(prewarm=max(levels, default=1))
    loaded = time.monotonic() - began
    config = model.config
    print(
        f"loaded in {loaded:.1f} s: tts={model.synthesizer.name}, units {config.chunk_period_ms} ms, ", end=""
    )
    print(f"preempt {config.effective_preempt_ms:g} ms")
    clips = [make_clip(model, q, seed) for seed, q in enumerate(QUESTIONS)]

    report_latency(await latency(model, clips, args.rounds))
    rows = [(n, await capacity(model, clips, n, args.seconds)) for n in levels]
    report_capacity(rows, model.config.chunk_period_ms)


if __name__ == "__main__":
    asyncio.run(main())
