"""Timed sentences by the Omni-DuplexEval rules (duplex-eval.md, "Response format and scoring")."""

from __future__ import annotations

from duplexkit.client.sentences import SentenceBuilder, TimedSentence, media_seconds


def build(*deltas: tuple[str, float], flush: bool = True) -> list[tuple[str, float, float]]:
    builder = SentenceBuilder()
    for text, media_ms in deltas:
        builder.add(text, media_ms)
    if flush:
        builder.flush()
    return [(s.sentence, s.start, s.end) for s in builder.sentences]


def test_start_is_the_first_delta_and_end_the_delta_that_completed_the_sentence() -> None:
    assert build(("This is ", 1000), ("a test", 1500), (". Next", 2000), (" one!", 2600)) == [
        ("This is a test.", 1.0, 2.0),
        ("Next one!", 2.0, 2.6),
    ]


def test_splits_on_every_latin_and_cjk_terminator() -> None:
    sentences = build(("A. B! C? ", 100), ("你好。好吗？是！", 200))
    assert [s for s, _, _ in sentences] == ["A.", "B!", "C?", "你好。", "好吗？", "是！"]


def test_whitespace_never_opens_a_sentence() -> None:
    assert build(("  ", 1000), ("\n", 1200), ("Hello.", 1400), ("   ", 1600), (" World.", 1800)) == [
        ("Hello.", 1.4, 1.4),
        ("World.", 1.8, 1.8),
    ]


def test_a_run_of_terminators_stays_with_the_sentence_it_ends() -> None:
    assert build(("Wait...", 500), (" what?!", 900)) == [("Wait...", 0.5, 0.5), ("what?!", 0.9, 0.9)]


def test_leftover_text_is_flushed_ending_at_its_last_non_blank_delta() -> None:
    assert build(("Done. And then", 3000), ("  ", 3500)) == [("Done.", 3.0, 3.0), ("And then", 3.0, 3.0)]


def test_nothing_is_emitted_for_blank_text() -> None:
    assert build((" ", 100), ("\t", 200)) == []


def test_times_are_media_ms_over_1000_to_three_decimals() -> None:
    assert media_seconds(1234.5678) == 1.235
    assert media_seconds(999.4) == 0.999
    assert build(("Hi.", 61_234.9)) == [("Hi.", 61.235, 61.235)]


def test_finished_includes_the_open_sentence_without_closing_it() -> None:
    builder = SentenceBuilder()
    builder.add("One. Two", 1000)
    assert builder.finished() == [TimedSentence("One.", 1.0, 1.0), TimedSentence("Two", 1.0, 1.0)]
    builder.add(" three.", 2000)
    builder.flush()
    assert builder.sentences[-1] == TimedSentence("Two three.", 1.0, 2.0)
    assert builder.sentences[-1].to_json() == {"sentence": "Two three.", "start": 1.0, "end": 2.0}
