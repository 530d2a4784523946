"""Full-Duplex-Bench's behaviour metrics as pure functions of words, spans and speech segments.

Inputs are what FDB's scorers read: the model side's words (`output.json` chunks, seconds on the input's
timeline), a task's ground-truth span, and speech segments of `output.wav` / `input.wav` (from Silero VAD,
see `segments`). Every function returns `None` where a value was not observed (no words: no latency), never 0.
docs/fdb.md gives each rule and the choices made where upstream's scripts were ambiguous.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

TOR_MIN_DURATION_S = 1.0
"""A reply shorter than this ..."""
TOR_MAX_SHORT_WORDS = 3
"""... with at most this many words is not a take-over."""
BACKCHANNEL_LONG_SEGMENT_S = 3.0
"""A model speech segment longer than this is a take-over, whatever its words, and ends the walk."""
BACKCHANNEL_MAX_WORDS = 2
"""A short segment (< `TOR_MIN_DURATION_S`) with at most this many words is a backchannel."""
BACKCHANNEL_TAKEOVER_WORDS = 3
"""A short segment with more words than this is a take-over."""
JSD_BIN_S = 0.2
JSD_EPSILON = 1e-10
USER_MERGE_GAP_S = 0.6
"""v1.5: user speech segments closer than this are one turn."""
MODEL_MERGE_GAP_S = 0.5
"""v1.5: model speech segments closer than this are one turn."""
_TIME_EPS_S = 1e-9
"""Float slack on time comparisons, so a gap of exactly 0.6 s written as 1.6 - 1.0 still counts as 0.6."""


class OutputJsonError(ValueError):
    """An `output.json` that is not `{"text", "chunks": [{"text", "timestamp": [s, e]}]}`."""


@dataclass(frozen=True, slots=True)
class Word:
    """One word of the model's side; `end` is `None` when the ASR gave no end time."""

    text: str
    start: float
    end: float | None


def words_from_output_json(data: Any) -> list[Word]:
    """The words of an FDB `output.json` in time order; chunks without a start time are skipped (as upstream).

    Raises `OutputJsonError` on anything that is not that shape.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("chunks"), list):
        raise OutputJsonError('expected an object with a "chunks" list')
    words: list[Word] = []
    for index, chunk in enumerate(data["chunks"]):
        stamp = chunk.get("timestamp") if isinstance(chunk, Mapping) else None
        if not isinstance(stamp, list | tuple) or len(stamp) != 2:
            raise OutputJsonError(f"chunk {index} has no [start, end] timestamp")
        start, end = (_seconds(v, f"chunk {index} timestamp") for v in stamp)
        if start is None:
            continue
        words.append(Word(str(chunk.get("text", "")), start, end))
    return sorted(words, key=lambda w: w.start)


def _seconds(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OutputJsonError(f"{where}: {value!r} is not a number of seconds")
    return float(value)


def output_json(words: Sequence[Word], *, source: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The FDB `output.json` of `words`; `source` (how the words were timed) is recorded beside them."""
    out: dict[str, Any] = {
        "text": " ".join(w.text for w in words).strip(),
        "chunks": [
            {"text": w.text, "timestamp": [round(w.start, 3), None if w.end is None else round(w.end, 3)]}
            for w in words
        ],
    }
    if source is not None:
        out["word_timing"] = dict(source)
    return out


def take_over(words: Sequence[Word]) -> int:
    """TOR of one sample: 0 without words; 0 for a reply shorter than 1 s with at most 3 words; else 1.

    The duration runs from the first word's start to the last word's end, or to its start when that word
    has no end.
    """
    if not words:
        return 0
    last = words[-1]
    duration = (last.end if last.end is not None else last.start) - words[0].start
    if duration < TOR_MIN_DURATION_S and len(words) <= TOR_MAX_SHORT_WORDS:
        return 0
    return 1


def latency_after(words: Sequence[Word], anchor_s: float) -> float | None:
    """First word start - `anchor_s`, negative clipped to 0; `None` without words."""
    if not words:
        return None
    return round(max(0.0, words[0].start - anchor_s), 6)


def cut_after(words: Sequence[Word], cut_s: float) -> list[Word]:
    """The words from `cut_s` on (FDB's interruption convention: the output is cut at the end of the
    interruption). Times stay on the input's timeline, so latency = first start - `cut_s` as FDB's scorer
    computes it; a word straddling the cut keeps its part after it (start moved to the cut)."""
    kept = []
    for w in words:
        if (w.end if w.end is not None else w.start) <= cut_s and w.start < cut_s:
            continue
        kept.append(Word(w.text, max(cut_s, w.start), w.end))
    return kept


Segment = tuple[float, float]
"""A speech segment `(start_s, end_s)`."""


def words_in(words: Sequence[Word], segment: Segment) -> list[Word]:
    """The words FDB's backchannel rule counts in `segment`: a word inside it, or one crossing either of its
    edges; a word that only touches the segment's start (ends exactly there) is outside. A word without an
    end time counts only when it starts exactly at the segment's end (upstream skips such a word when it
    starts earlier and gives it zero length otherwise)."""
    start, end = segment
    found = []
    for w in words:
        if w.end is None and w.start < end:
            continue
        w_end = w.start if w.end is None else w.end
        inside = w.start >= start and w_end <= end
        if inside or (w.start <= end and w_end > end) or (w.start <= start and w_end > start):
            found.append(w)
    return found


@dataclass(frozen=True, slots=True)
class BackchannelResult:
    tor: int
    backchannels: list[Segment]
    frequency: float | None
    """Backchannels per second of output audio; `None` for an empty output."""


def backchannel(words: Sequence[Word], segments: Sequence[Segment], output_s: float) -> BackchannelResult:
    """FDB's backchannel walk (upstream HEAD d7336bd, the rule since 1d40caa): the model's speech segments
    in order; the first one longer than 3 s is a take-over and ends the walk (TOR 1). Every segment of 3 s
    or less is listed as a backchannel whatever its words, and its verdict replaces TOR: more than 3 words
    → 1; shorter than 1 s with at most 2 words → 0; else 1. So the last short segment's verdict is the
    sample's TOR unless a long segment came first; no segment → TOR 0."""
    tor = 0
    found: list[Segment] = []
    for segment in segments:
        length = segment[1] - segment[0]
        if length > BACKCHANNEL_LONG_SEGMENT_S:
            tor = 1
            break
        count = len(words_in(words, segment))
        if count > BACKCHANNEL_TAKEOVER_WORDS:
            tor = 1
        elif length < TOR_MIN_DURATION_S and count <= BACKCHANNEL_MAX_WORDS:
            tor = 0
        else:
            tor = 1
        found.append(segment)
    frequency = len(found) / output_s if output_s > 0 else None
    return BackchannelResult(tor=tor, backchannels=found, frequency=frequency)


def backchannel_histogram(backchannels: Sequence[Segment], output_s: float) -> np.ndarray:
    """0.2 s bins over the output (`int(output_s / 0.2) + 1` of them); each backchannel counts once in every
    bin from the one holding its start to the one holding its end; + 1e-10, normalised."""
    bins = np.zeros(int(output_s / JSD_BIN_S) + 1)
    for start, end in backchannels:
        first = min(int(start / JSD_BIN_S), len(bins) - 1)
        last = min(int(end / JSD_BIN_S), len(bins) - 1)
        bins[first : last + 1] += 1
    bins += JSD_EPSILON
    normalised: np.ndarray = bins / bins.sum()
    return normalised


def jensen_shannon(p: Sequence[float] | np.ndarray, q: Sequence[float] | np.ndarray) -> float:
    """The Jensen-Shannon distance (square root of the divergence, natural log) of two distributions,
    each normalised to sum 1 first; `q` is linearly resampled to `p`'s length when they differ."""
    a = np.asarray(p, dtype=float)
    b = np.asarray(q, dtype=float)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("empty distribution")
    if len(b) != len(a):
        b = np.interp(np.linspace(0, 1, len(a)), np.linspace(0, 1, len(b)), b)
    if (a < 0).any() or (b < 0).any() or a.sum() <= 0 or b.sum() <= 0:
        raise ValueError("a distribution must be non-negative with a positive sum")
    a, b = a / a.sum(), b / b.sum()
    m = (a + b) / 2

    def kl(x: np.ndarray) -> float:
        nz = x > 0
        return float(np.sum(x[nz] * np.log(x[nz] / m[nz])))

    return math.sqrt(max(0.0, (kl(a) + kl(b)) / 2))


def backchannel_jsd(
    backchannels: Sequence[Segment], output_s: float, human: Sequence[float] | None
) -> float | None:
    """JSD of the model's backchannel timing against the human distribution of the same conversation:
    `None` without a human distribution (unavailable, never 0 or 1); 1 when the model made no backchannel."""
    if human is None:
        return None
    if not backchannels:
        return 1.0
    return jensen_shannon(backchannel_histogram(backchannels, output_s), human)


# --- v1.5: timing from speech segments on both channels ------------------------------------------------


def merge_segments(segments: Sequence[Segment], max_gap_s: float) -> list[Segment]:
    """Segments sorted by start, with any two separated by at most `max_gap_s` (or overlapping) joined."""
    merged: list[list[float]] = []
    for start, end in sorted(segments):
        if merged and start - merged[-1][1] <= max_gap_s + _TIME_EPS_S:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def stop_latencies(user: Sequence[Segment], model: Sequence[Segment]) -> list[float]:
    """How long the two sides talked over each other: the length of every user/model overlap interval,
    keeping the shortest of the intervals that end at the same time; in order of end time."""
    shortest: dict[float, float] = {}
    for us, ue in user:
        for ms, me in model:
            start, end = max(us, ms), min(ue, me)
            if end > start:
                shortest[end] = min(shortest.get(end, math.inf), end - start)
    return [round(shortest[end], 6) for end in sorted(shortest)]


def response_latencies(user: Sequence[Segment], model: Sequence[Segment]) -> list[float]:
    """From the end of a user segment to the start of the next model segment that starts at or after it;
    when several user segments end before the same model start, only the latest end counts."""
    latest: dict[float, float] = {}
    starts = sorted(ms for ms, _ in model)
    for _, ue in user:
        following = next((s for s in starts if s >= ue), None)
        if following is not None:
            latest[following] = max(latest.get(following, -math.inf), ue)
    return [round(s - latest[s], 6) for s in sorted(latest)]


def mean(values: Sequence[float | None]) -> float | None:
    """The mean of the observed values; `None` when none was observed."""
    seen = [v for v in values if v is not None]
    return sum(seen) / len(seen) if seen else None
