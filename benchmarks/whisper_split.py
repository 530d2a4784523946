"""Where Whisper's pause decode goes (issue #47): the encoder over the `MIN_WINDOW_S` window, then the
beam search, per question in piper's voice, as `WhisperAsr` runs them (int8, 2 threads, beam 5), in ms
(medians); the beam search again with all but the last `--forced` tokens of its own answer forced as a
prefix (what a recogniser decoding during speech could hand the decode at the pause); and greedy.

    PYTHONPATH=src:. .venv/bin/python benchmarks/whisper_split.py     # ~20 s
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from duplexkit.models.cascade.drive import spoken
from duplexkit.models.cascade.tts import PiperSynthesizer
from duplexkit.models.cascade.whisper import BEAM_SIZE, MIN_WINDOW_S, WhisperAsr


def timed(work: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median ms of `repeats` calls after one warm-up call, and the last result."""
    result = work()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        result = work()
        times.append(1000.0 * (time.perf_counter() - began))
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per step (5)")
    parser.add_argument("--forced", type=int, default=3, help="tokens left to the forced search (3)")
    args = parser.parse_args()
    import ctranslate2
    from cascade_latency import QUESTIONS
    from faster_whisper.tokenizer import Tokenizer

    model = WhisperAsr()._model
    tokenizer = Tokenizer(model.hf_tokenizer, False, task="transcribe", language="en")
    prompt = model.get_prompt(tokenizer, [], without_timestamps=True)
    voice = PiperSynthesizer(deterministic=True)
    window = round(MIN_WINDOW_S * 16_000)
    print(f"| question | tokens | encode | beam {BEAM_SIZE} | all but {args.forced} forced | greedy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for question in QUESTIONS:
        audio = spoken(voice, question)
        features = model.feature_extractor(np.pad(audio, (0, max(0, window - len(audio)))))

        def encode(features: Any = features) -> Any:
            view = ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None], dtype=np.float32))
            return model.model.encode(view, to_cpu=False)

        encode_ms, encoded = timed(encode, args.repeats)

        def search(start: list[int], beam: int = BEAM_SIZE, encoded: Any = encoded) -> Any:
            return model.model.generate(
                encoded, [start], beam_size=beam, max_length=len(prompt) + 40, suppress_blank=True
            )

        search_ms, result = timed(lambda: search(prompt), args.repeats)
        ids = [t for t in result[0].sequences_ids[0] if t < tokenizer.eot]
        forced = prompt + ids[: -args.forced]
        forced_ms, _ = timed(lambda: search(forced), args.repeats)  # noqa: B023 (called at once)
        greedy_ms, _ = timed(lambda: search(prompt, 1), args.repeats)
        cells = " | ".join(f"{v:.0f}" for v in (encode_ms, search_ms, forced_ms, greedy_ms))
        print(f"| {question} | {len(ids)} | {cells} |")


if __name__ == "__main__":
    main()
