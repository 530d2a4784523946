"""The Moshi endpoint's Ogg-Opus codec: `sphn` (chosen) against PyAV's libopus, side by side.

Both encode and decode the same 20 s of 24 kHz mono audio in 80 ms frames, the Moshi frame, one frame at a
time as a session does. sphn's figure includes the Ogg paging both ways (`OpusStreamWriter.append_pcm`
gives Ogg bytes, `OpusStreamReader.append_bytes` takes any cut of them); PyAV's is the bare codec on
packets, with no Ogg muxing or demuxing at all, so it is a lower bound on what a PyAV path would cost
(its Ogg demuxer cannot be fed a live stream piecewise; a PyAV path would need Ogg framing of our own).
Reported: median seconds per run, per-frame cost, the share of real time, and the ratio.

    .venv/bin/python benchmarks/moshi_codec.py
"""

from __future__ import annotations

import fractions
import statistics
import time
from collections.abc import Callable

import av
import numpy as np
import sphn

RATE, FRAME, FRAMES, RUNS = 24_000, 1_920, 250, 5


def _audio() -> np.ndarray:
    t = np.arange(FRAME * FRAMES) / RATE
    noise = 0.05 * np.random.default_rng(0).standard_normal(len(t))
    return (0.3 * np.sin(2 * np.pi * 220 * t) + noise).astype(np.float32)


def run_sphn(pcm: np.ndarray) -> int:
    writer, reader = sphn.OpusStreamWriter(RATE), sphn.OpusStreamReader(RATE)
    decoded = 0
    for i in range(FRAMES):
        decoded += len(reader.append_bytes(writer.append_pcm(pcm[i * FRAME : (i + 1) * FRAME])))
    return decoded


def run_pyav(pcm: np.ndarray) -> int:
    encoder = av.CodecContext.create("libopus", "w")
    encoder.sample_rate, encoder.layout, encoder.format = RATE, "mono", "s16"
    encoder.time_base = fractions.Fraction(1, RATE)
    encoder.open()
    decoder = av.CodecContext.create("libopus", "r")
    decoder.sample_rate, decoder.layout = RATE, "mono"
    decoder.open()
    s16 = (pcm * 32767).astype(np.int16)
    decoded = 0
    for i in range(FRAMES):
        frame = av.AudioFrame.from_ndarray(
            s16[None, i * FRAME : (i + 1) * FRAME], format="s16", layout="mono"
        )
        frame.sample_rate, frame.pts = RATE, i * FRAME
        for packet in encoder.encode(frame):
            decoded += sum(out.samples for out in decoder.decode(packet))
    return decoded


def _median_s(run: Callable[[np.ndarray], int], pcm: np.ndarray) -> float:
    run(pcm)  # warm up
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        run(pcm)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    pcm = _audio()
    audio_s = FRAMES * FRAME / RATE
    results = {
        "sphn (Ogg both ways)": _median_s(run_sphn, pcm),
        "pyav (codec only)": _median_s(run_pyav, pcm),
    }
    for name, seconds in results.items():
        print(
            f"{name:22s} {seconds:.3f} s per {audio_s:.0f} s of audio, {seconds / FRAMES * 1e3:.2f} ms per "
            f"80 ms frame, {100 * seconds / audio_s:.1f} % of real time"
        )
    sphn_s, pyav_s = results.values()
    print(f"ratio sphn / pyav: {sphn_s / pyav_s:.2f}")


if __name__ == "__main__":
    main()
