"""Silero's lag: how far past the end of a spoken question its last voiced frame falls (issue #47).

The cascade's end of speech is Silero's last voiced frame (a frame stays voiced down to the release,
`threshold - 0.15`, once speech has started), and its pause decode starts a frame after it. Every ms
between the voice's end and that frame is waited before the model starts, and is counted outside the
model's own `total`. Per question, in piper's voice (as `cascade_latency.py` speaks them) and espeak-ng's
(as `mouth_to_ear.py` does): the true end (the clip's last 10 ms within 40 dB of its loudest), the last
frame at or above `threshold`, and the last at or above the release, relative to the true end.

    PYTHONPATH=src:. .venv/bin/python benchmarks/silero_lag.py      # ~15 s
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from duplexkit.models.cascade.drive import silence, speech_end_ms, spoken, with_noise_floor
from duplexkit.models.cascade.tts import PiperSynthesizer
from duplexkit.vad import VadParams, best_scorer

TAIL_MS = 600.0
"""Silence after the speech: past Silero's release on every clip (cascade_latency's waits for a reply)."""


def last_frame_end_ms(probabilities: list[float], at_least: float, frame_ms: float) -> float:
    """End of the last frame whose probability is at least `at_least` (0 when none is)."""
    voiced = [k for k, p in enumerate(probabilities) if p >= at_least]
    return (voiced[-1] + 1) * frame_ms if voiced else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", default="piper,espeak", help="piper and/or espeak, comma separated")
    args = parser.parse_args()
    from cascade_latency import LEAD_IN_MS, QUESTIONS
    from mouth_to_ear import espeak

    params = VadParams()
    scorer = best_scorer()
    frame_ms = 1000.0 * scorer.frame_samples / 16_000
    piper = PiperSynthesizer(deterministic=True)
    speakers = {"piper": lambda text: spoken(piper, text), "espeak": espeak}
    print(
        f"threshold {params.threshold}, release {params.silence_threshold:.2f}, frames of {frame_ms:.0f} ms"
    )
    print("\n| voice | question | true end, ms | last ≥ threshold | last ≥ release | frames between |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    lags: dict[str, list[float]] = {}
    for voice in args.voices.split(","):
        for seed, question in enumerate(QUESTIONS):
            speech = speakers[voice](question)
            clip = with_noise_floor(
                np.concatenate([silence(LEAD_IN_MS), speech, silence(TAIL_MS)]), seed=seed
            )
            end = LEAD_IN_MS + speech_end_ms(speech)
            scorer.reset()
            n = scorer.frame_samples
            probabilities = [scorer(clip[k : k + n]) for k in range(0, len(clip) - n + 1, n)]
            strong = last_frame_end_ms(probabilities, params.threshold, frame_ms)
            released = last_frame_end_ms(probabilities, params.silence_threshold, frame_ms)
            lags.setdefault(voice, []).append(released - end)
            print(
                f"| {voice} | {question} | {end:.0f} | {strong - end:+.0f} | {released - end:+.0f} | "
                f"{round((released - strong) / frame_ms)} |"
            )
    for voice, values in lags.items():
        print(
            f"\n{voice}: the last voiced frame ends {statistics.median(values):+.0f} ms (median) past the "
            f"voice, {min(values):+.0f} to {max(values):+.0f}"
        )


if __name__ == "__main__":
    main()
