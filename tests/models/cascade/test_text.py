"""Cutting streamed text into speakable pieces and word tokens."""

from __future__ import annotations

import re

import pytest

from duplexkit.models.cascade.text import MAX_PIECE_CHARS, PhraseSplitter, word_tokens


def split(deltas: list[str]) -> list[str]:
    splitter = PhraseSplitter()
    pieces = [piece for delta in deltas for piece in splitter.feed(delta)]
    return pieces + splitter.flush()


def test_sentences_and_clauses_after_colons_come_out_as_soon_as_they_end() -> None:
    splitter = PhraseSplitter()
    assert splitter.feed("You said") == []
    assert splitter.feed(":") == []  # a boundary needs the whitespace after it
    assert splitter.feed(" turn on") == ["You said: "]
    assert splitter.feed(" the lights. And") == ["turn on the lights. "]
    assert splitter.flush() == ["And"]


def test_the_first_piece_ends_after_a_few_words_or_its_first_comma() -> None:
    sentence = "The moon is about three hundred thousand kilometres away, give or take a few. Yes."
    assert split(re.findall(r"\S+\s*", sentence)) == split([sentence])  # whatever the deltas
    assert split([sentence]) == [
        "The moon is ",
        "about three hundred thousand kilometres away, ",  # later clauses keep their length rule
        "give or take a few. ",
        "Yes.",
    ]
    assert split(["Well, I think so. Sure."]) == ["Well, ", "I think so. ", "Sure."]


@pytest.mark.parametrize(
    "text",
    ["Hello there! How are you? Fine.", "One; two: three...  four", "no boundary at all", "Q? "],
)
def test_pieces_join_back_to_the_text_whatever_the_deltas(text: str) -> None:
    assert "".join(split([text])) == text
    assert "".join(split(list(text))) == text


def test_a_long_run_without_boundaries_is_cut_at_a_space() -> None:
    pieces = split(["word " * 100])
    assert len(pieces) > 1 and all(len(p) <= MAX_PIECE_CHARS for p in pieces)
    assert "".join(pieces) == "word " * 100


def test_decimal_points_do_not_end_a_sentence() -> None:
    assert split(["It costs 3.50."]) == ["It costs 3.50."]
    assert split(["Yes. It costs 3.50 dollars."]) == ["Yes. ", "It costs 3.50 dollars."]


def test_a_run_without_any_space_is_cut_at_the_limit() -> None:
    assert split(["x" * (MAX_PIECE_CHARS + 10)]) == ["x" * MAX_PIECE_CHARS, "x" * 10]


@pytest.mark.parametrize("text", ["You said: hi.", " lead", "a  b ", "", "   "])
def test_word_tokens_join_back_to_the_text(text: str) -> None:
    assert "".join(word_tokens(text)) == text


def test_word_tokens_are_words_with_their_trailing_space() -> None:
    assert word_tokens("You said: hi.") == ("You ", "said: ", "hi.")
