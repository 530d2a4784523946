"""Every FDB metric rule on hand-made `output.json` files; expected numbers worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from duplexkit.bench.fdb import metrics as m


def write_output_json(folder: Path, chunks: list[tuple[str, float | None, float | None]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "output.json"
    payload = {
        "text": " ".join(c[0] for c in chunks),
        "chunks": [{"text": t, "timestamp": [s, e]} for t, s, e in chunks],
    }
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


def words_of(path: Path) -> list[m.Word]:
    return m.words_from_output_json(json.loads(path.read_text(encoding="utf-8")))


TOR_CASES = [
    ("no words", [], 0),
    ("2 words over 0.6 s", [("uh", 5.0, 5.3), ("huh", 5.3, 5.6)], 0),
    ("3 words over 0.9 s", [("a", 1.0, 1.3), ("b", 1.3, 1.6), ("c", 1.6, 1.9)], 0),
    ("4 words over 0.8 s", [("a", 1.0, 1.2), ("b", 1.2, 1.4), ("c", 1.4, 1.6), ("d", 1.6, 1.8)], 1),
    ("a 1.2 s reply", [("sure", 2.0, 2.5), ("thing", 2.7, 3.2)], 1),
    ("exactly 1.0 s is not shorter than 1 s", [("okay", 3.0, 4.0)], 1),
    # last end missing: duration = 2.0 - 1.5 = 0.5 s with 2 words → 0
    ("missing last end, short", [("yes", 1.5, 1.8), ("yes", 2.0, None)], 0),
    # last end missing: duration = 3.0 - 1.0 = 2.0 s → 1
    ("missing last end, long", [("well", 1.0, 1.4), ("so", 3.0, None)], 1),
    ("chunks without a start are skipped", [("x", None, None), ("hm", 1.0, 1.2)], 0),
]


@pytest.mark.parametrize(("label", "chunks", "tor"), TOR_CASES, ids=[c[0] for c in TOR_CASES])
def test_take_over(tmp_path: Path, label: str, chunks: list, tor: int) -> None:
    assert m.take_over(words_of(write_output_json(tmp_path / "s", chunks))) == tor


LATENCY_CASES = [
    ("first word at 14.2 s after a span starting at 12.0 s", [("hello", 14.2, 14.6)], 12.0, 2.2),
    ("a word before the anchor is clipped to 0", [("hi", 11.5, 11.9), ("there", 12.1, 12.5)], 12.0, 0.0),
    ("words out of order: the earliest counts", [("b", 13.0, 13.2), ("a", 12.5, 12.8)], 12.0, 0.5),
    ("no words: not observed", [], 12.0, None),
]


@pytest.mark.parametrize(
    ("label", "chunks", "anchor", "latency"), LATENCY_CASES, ids=[c[0] for c in LATENCY_CASES]
)
def test_latency_after(
    tmp_path: Path, label: str, chunks: list, anchor: float, latency: float | None
) -> None:
    got = m.latency_after(words_of(write_output_json(tmp_path / "s", chunks)), anchor)
    if latency is None:
        assert got is None
    else:
        assert got == pytest.approx(latency)


def test_bad_output_json_is_refused() -> None:
    for bad in ([], {"text": "x"}, {"chunks": [{"text": "a"}]}, {"chunks": [{"timestamp": ["x", 1]}]}):
        with pytest.raises(m.OutputJsonError):
            m.words_from_output_json(bad)


def test_output_json_round_trips_and_records_its_source() -> None:
    words = [m.Word("hi", 1.0, 1.25), m.Word("there", 1.3, None)]
    data = m.output_json(words, source={"kind": "server"})
    assert data["text"] == "hi there"
    assert data["chunks"][1] == {"text": "there", "timestamp": [1.3, None]}
    assert data["word_timing"] == {"kind": "server"}
    assert m.words_from_output_json(data) == words


def test_cut_after_keeps_the_input_timeline() -> None:
    words = [m.Word("old", 3.0, 3.5), m.Word("straddle", 9.8, 10.4), m.Word("new", 11.0, 11.5)]
    cut = m.cut_after(words, 10.0)
    assert [(w.text, w.start, w.end) for w in cut] == [("straddle", 10.0, 10.4), ("new", 11.0, 11.5)]
    # interruption ends at 10.0, first word after it at 11.0 → latency 1.0
    assert m.latency_after(m.cut_after(words[::2], 10.0), 10.0) == pytest.approx(1.0)


BACKCHANNEL_CASES = [
    # (label, words, segments, output_s, tor, listed segments, frequency): FDB HEAD d7336bd's walk
    ("silence", [], [], 10.0, 0, 0, 0.0),
    ("one 'mhm' in a 0.5 s segment", [("mhm", 2.1, 2.4)], [(2.0, 2.5)], 10.0, 0, 1, 0.1),
    ("a segment longer than 3 s", [("so", 1.0, 1.2)], [(1.0, 4.5)], 10.0, 1, 0, 0.0),
    (
        "four words in a short segment: a take-over, still listed",
        [("a", 1.0, 1.1), ("b", 1.1, 1.2), ("c", 1.2, 1.3), ("d", 1.3, 1.4)],
        [(1.0, 1.5)],
        10.0,
        1,
        1,
        0.1,
    ),
    (
        "a 1.5 s segment of two words",
        [("yeah", 1.0, 1.5), ("right", 2.0, 2.5)],
        [(1.0, 2.5)],
        10.0,
        1,
        1,
        0.1,
    ),
    (
        "three words under 1 s",
        [("oh", 1.0, 1.2), ("i", 1.2, 1.3), ("see", 1.3, 1.6)],
        [(1.0, 1.7)],
        10.0,
        1,
        1,
        0.1,
    ),
    (
        "two backchannels in 20 s",
        [("yeah", 3.0, 3.3), ("mhm", 8.0, 8.4)],
        [(3.0, 3.4), (8.0, 8.5)],
        20.0,
        0,
        2,
        0.1,
    ),
    ("a segment with no words is a backchannel (a laugh)", [], [(4.0, 4.6)], 10.0, 0, 1, 0.1),
    (
        "the last short segment's verdict sets TOR",
        [("a", 1.0, 1.1), ("b", 1.1, 1.2), ("c", 1.2, 1.3), ("d", 1.3, 1.4), ("mhm", 5.0, 5.3)],
        [(1.0, 1.5), (5.0, 5.4)],
        10.0,
        0,
        2,
        0.2,
    ),
    (
        "the walk stops at the first segment longer than 3 s",
        [("mhm", 1.0, 1.3), ("yeah", 7.0, 7.2)],
        [(1.0, 1.4), (2.0, 5.5), (7.0, 7.3)],
        10.0,
        1,
        1,
        0.1,
    ),
    (
        "words ending exactly at a segment's start are not in it",
        [("a", 0.5, 1.0), ("b", 0.6, 1.0), ("c", 0.7, 1.0), ("mhm", 1.1, 1.3)],
        [(1.0, 1.5)],
        10.0,
        0,
        1,
        0.1,
    ),
]


@pytest.mark.parametrize(
    ("label", "chunks", "segments", "output_s", "tor", "count", "freq"),
    BACKCHANNEL_CASES,
    ids=[c[0] for c in BACKCHANNEL_CASES],
)
def test_backchannel(
    tmp_path: Path,
    label: str,
    chunks: list,
    segments: list,
    output_s: float,
    tor: int,
    count: int,
    freq: float,
) -> None:
    result = m.backchannel(words_of(write_output_json(tmp_path / "s", chunks)), segments, output_s)
    assert (result.tor, len(result.backchannels)) == (tor, count)
    assert result.frequency == pytest.approx(freq)


def test_backchannel_histogram_bins_by_hand() -> None:
    # 1.0 s of output → int(1.0 / 0.2) + 1 = 6 bins; a backchannel over [0.25, 0.45] marks bins 1 and 2.
    hist = m.backchannel_histogram([(0.25, 0.45)], 1.0)
    assert len(hist) == 6
    assert hist[1] == pytest.approx(0.5) and hist[2] == pytest.approx(0.5)
    assert hist[0] == pytest.approx(1e-10 / 2, rel=1e-3)


def test_jensen_shannon_by_hand() -> None:
    assert m.jensen_shannon([1, 0], [1, 0]) == pytest.approx(0.0)
    # disjoint: each KL to the midpoint is ln 2, so the distance is sqrt(ln 2)
    assert m.jensen_shannon([1, 0], [0, 1]) == pytest.approx(math.sqrt(math.log(2)))
    # p = (0.5, 0.5), q = (1, 0): m = (0.75, 0.25); KL(p||m) = 0.5 ln(2/3) + 0.5 ln 2, KL(q||m) = ln(4/3)
    by_hand = math.sqrt((0.5 * math.log(2 / 3) + 0.5 * math.log(2) + math.log(4 / 3)) / 2)
    assert m.jensen_shannon([0.5, 0.5], [1, 0]) == pytest.approx(by_hand)
    # a human distribution of another length is resampled linearly: (0, 1) over 3 points → (0, 0.5, 1)
    assert m.jensen_shannon([0, 0.5, 1], [0, 1]) == pytest.approx(0.0)


def test_jsd_unavailable_without_human_distribution_and_1_without_backchannels() -> None:
    assert m.backchannel_jsd([(1.0, 1.2)], 5.0, None) is None
    assert m.backchannel_jsd([], 5.0, [0.5, 0.5]) == 1.0
    value = m.backchannel_jsd([(1.0, 1.2)], 5.0, list(np.ones(26) / 26))
    assert value is not None and 0.0 < value < 1.0


MERGE_CASES = [
    ("user gap 0.6 s merges", [(0.0, 1.0), (1.6, 2.0)], 0.6, [(0.0, 2.0)]),
    ("user gap 0.61 s stays apart", [(0.0, 1.0), (1.61, 2.0)], 0.6, [(0.0, 1.0), (1.61, 2.0)]),
    ("model gap 0.5 s merges", [(3.0, 3.5), (4.0, 5.0)], 0.5, [(3.0, 5.0)]),
    ("model gap 0.6 s stays apart", [(3.0, 3.5), (4.1, 5.0)], 0.5, [(3.0, 3.5), (4.1, 5.0)]),
    ("unsorted and overlapping", [(5.0, 6.0), (0.0, 2.0), (1.0, 1.5)], 0.5, [(0.0, 2.0), (5.0, 6.0)]),
]


@pytest.mark.parametrize(("label", "segments", "gap", "merged"), MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_merge_segments(label: str, segments: list, gap: float, merged: list) -> None:
    assert m.merge_segments(segments, gap) == merged


def test_merge_constants_are_the_v15_ones() -> None:
    assert (m.USER_MERGE_GAP_S, m.MODEL_MERGE_GAP_S) == (0.6, 0.5)


def test_stop_latency_by_hand() -> None:
    # user interrupts at 4.0 while the model speaks [2.0, 5.2]: overlap [4.0, 5.2] → 1.2 s
    assert m.stop_latencies([(4.0, 7.0)], [(2.0, 5.2)]) == pytest.approx([1.2])
    # two user segments overlapping one model segment ending at 6.0 inside both... each end differs
    user = [(1.0, 3.0), (5.0, 8.0)]
    model = [(2.5, 6.0)]
    # overlaps: [2.5, 3.0] (0.5, ends 3.0) and [5.0, 6.0] (1.0, ends 6.0)
    assert m.stop_latencies(user, model) == pytest.approx([0.5, 1.0])
    # two overlaps ending at the same time (6.0): the shortest is kept
    assert m.stop_latencies([(4.0, 6.0), (5.5, 6.0)], [(3.0, 6.0)]) == pytest.approx([0.5])
    assert m.stop_latencies([(0.0, 1.0)], [(2.0, 3.0)]) == []


def test_response_latency_by_hand() -> None:
    # user ends 3.0, model starts 3.4 → 0.4
    assert m.response_latencies([(1.0, 3.0)], [(3.4, 5.0)]) == pytest.approx([0.4])
    # two user ends (2.0, 3.0) before the same model start 3.8: the latest end → 0.8
    assert m.response_latencies([(1.0, 2.0), (2.5, 3.0)], [(3.8, 5.0)]) == pytest.approx([0.8])
    # a model start before the user end is not a response to it
    assert m.response_latencies([(1.0, 3.0)], [(2.0, 2.5)]) == []


def test_mean_ignores_unobserved_and_is_none_when_nothing_was_observed() -> None:
    assert m.mean([1.0, None, 2.0]) == pytest.approx(1.5)
    assert m.mean([None]) is None and m.mean([]) is None
