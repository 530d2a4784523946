"""A stand-in for Full-Duplex-Bench's own evaluation scripts (`v1_v1.5/evaluation/eval_*.py`, HEAD d7336bd),
written from their documented contract (../shared/reference/benchmarks.md), not from duplexkit's scorer.

What it keeps of theirs is what a run folder must survive: the pause and turn-taking scripts treat every
entry of the task folder as a sample folder (a file there raises `NotADirectoryError`); the interruption
script walks every folder below the task folder and needs `output.json` and `interrupt.json` in each; the
backchannel script reads only folders named by digits, looks each up by that name in the human timing
distributions, and runs its VAD with no sample rate (16 kHz assumed, whatever `output.wav` holds). Each
function returns the means the script prints. The VAD is passed in (`Vad`: samples → speech spans in
samples, as Silero's `get_speech_timestamps` returns them); the relevance judge too.
"""

from __future__ import annotations

import json
import os
import re
import wave
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Vad = Callable[[np.ndarray], list[tuple[int, int]]]
"""Mono float samples → speech spans `(start, end)` in samples, at whatever rate they are."""
Rate = Callable[[str, str, str], str]
"""(context turn, interrupting turn, reply text) → the judge's reply text."""
ASSUMED_RATE_HZ = 16_000
WINDOW_S = 0.2


def _chunks(folder: str) -> list[dict[str, Any]]:
    with open(os.path.join(folder, "output.json"), encoding="utf-8") as f:
        chunks: list[dict[str, Any]] = json.load(f)["chunks"]
    return chunks


def _take_over(chunks: Sequence[dict[str, Any]]) -> int:
    if not chunks:
        return 0
    last = chunks[-1]["timestamp"]
    duration = (last[1] if last[1] is not None else last[0]) - chunks[0]["timestamp"][0]
    return 0 if duration < 1 and len(chunks) <= 3 else 1


def pause_handling(root: str) -> float:
    tors = []
    for entry in os.listdir(root):
        folder = os.path.join(root, entry)
        for name in os.listdir(folder):  # NotADirectoryError on a file, as upstream
            if name.endswith("output.json"):
                tors.append(_take_over(_chunks(folder)))
    return sum(tors) / len(tors)


def smooth_turn_taking(root: str) -> tuple[float, float | None]:
    tors, latencies = [], []
    for entry in os.listdir(root):
        folder = os.path.join(root, entry)
        names = os.listdir(folder)
        if "output.json" not in names:
            continue
        with open(os.path.join(folder, "turn_taking.json"), encoding="utf-8") as f:
            start = json.load(f)[0]["timestamp"][0]
        chunks = _chunks(folder)
        tor = _take_over(chunks)
        tors.append(tor)
        if tor:
            latencies.append(max(0.0, chunks[0]["timestamp"][0] - start))
    return sum(tors) / len(tors), (sum(latencies) / len(latencies) if latencies else None)


_RATING = re.compile(r"Analysis:\s*(.*?)\nI would rate the AI's response as (\d+)", re.DOTALL)


def user_interruption(root: str, rate: Rate | None) -> tuple[float, float | None, float | None]:
    tors, latencies, ratings = [], [], []
    folders = sorted(os.path.join(here, d) for here, dirs, _ in os.walk(root) for d in dirs)
    for folder in folders:
        chunks = _chunks(folder)  # FileNotFoundError when a folder has none, as upstream
        with open(os.path.join(folder, "interrupt.json"), encoding="utf-8") as f:
            turn = json.load(f)[0]
        tor = _take_over(chunks)
        tors.append(tor)
        if not tor:
            continue
        if rate is not None:
            with open(os.path.join(folder, "output.json"), encoding="utf-8") as f:
                text = json.load(f)["text"]
            found = _RATING.findall(rate(turn["context"], turn["interrupt"], text) + "\n")
            if not found:
                continue  # upstream skips a reply it cannot parse
            ratings.append(int(found[-1][1]))
        latencies.append(max(0.0, chunks[0]["timestamp"][0] - turn["timestamp"][1]))
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return sum(tors) / len(tors), mean(latencies), mean(ratings)


def _read_wav(path: str) -> tuple[np.ndarray, int]:
    with wave.open(path, "rb") as w:
        rate, frames = w.getframerate(), w.readframes(w.getnframes())
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0, rate


def _counted(chunk: dict[str, Any], start: float, end: float) -> bool:
    s, e = chunk["timestamp"]
    if s is None or (e is None and s < end):
        return False
    e = s if e is None else e
    return (s >= start and e <= end) or (s <= end and e > end) or (s <= start and e > start)


def _kl(x: np.ndarray, m: np.ndarray) -> float:
    nz = x > 0
    return float(np.sum(x[nz] * np.log(x[nz] / m[nz])))


def backchannel(root: str, human: dict[str, list[float]], vad: Vad) -> tuple[float, float, float] | None:
    """(JSD, TOR, frequency) means over the digit-named folders; `None` when there are none (upstream's
    means of empty lists are NaN)."""
    jsds, tors, freqs = [], [], []
    for name in os.listdir(root):
        if not name.isdigit():
            continue
        samples, rate = _read_wav(os.path.join(root, name, "output.wav"))
        spans = [(a / ASSUMED_RATE_HZ, b / ASSUMED_RATE_HZ) for a, b in vad(samples)]
        chunks = _chunks(os.path.join(root, name))
        found, tor = [], 0
        for start, end in spans:
            length = end - start
            if length > 3:
                tor = 1
                break
            words = sum(_counted(c, start, end) for c in chunks)
            tor = 1 if words > 3 else (0 if length < 1 and words <= 2 else 1)
            found.append((start, end))
        output_s = len(samples) / rate
        tors.append(tor)
        freqs.append(len(found) / output_s)
        if not found:
            jsds.append(1.0)
            continue
        bins = np.zeros(int(output_s / WINDOW_S) + 1)
        for start, end in found:
            for i in range(int(start / WINDOW_S), int(end / WINDOW_S) + 1):
                if i < len(bins):
                    bins[i] += 1
        model = (bins + 1e-10) / (bins + 1e-10).sum()
        gt = np.interp(np.linspace(0, 1, len(model)), np.linspace(0, 1, len(human[name])), human[name])
        p, q = model / model.sum(), gt / gt.sum()
        m = (p + q) / 2
        jsds.append(float(np.sqrt((_kl(p, m) + _kl(q, m)) / 2)))
    if not tors:
        return None
    return float(np.mean(jsds)), float(np.mean(tors)), float(np.mean(freqs))
