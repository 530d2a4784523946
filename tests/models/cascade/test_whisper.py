"""Whisper tiny.en: transcripts and word timestamps, and the recogniser's decode during the pause."""

from __future__ import annotations

import numpy as np

from duplexkit.models.cascade.drive import silence
from duplexkit.models.cascade.whisper import WhisperAsr, WhisperRecognizer
from tests.models.cascade.conftest import Speech

QUESTION = "Who wrote the book Moby Dick?"


def test_a_question_is_transcribed_with_word_timestamps_in_order(whisper: WhisperAsr, speech: Speech) -> None:
    audio = speech.clip(500.0, QUESTION, 300.0)
    transcript = whisper.transcribe(audio)
    assert transcript.text.lower().strip("?.").replace(",", "") == "who wrote the book moby dick"
    assert [w.text.strip("?,.").lower() for w in transcript.words] == [
        "who",
        "wrote",
        "the",
        "book",
        "moby",
        "dick",
    ]
    starts = [w.start_ms for w in transcript.words]
    assert starts == sorted(starts) and all(w.start_ms <= w.end_ms for w in transcript.words)
    voiced = np.flatnonzero(np.abs(audio) > 0.05)
    first, last = 1000 * voiced[0] / 16_000, 1000 * voiced[-1] / 16_000
    # the first word's start can take in the leading silence (alignment without timestamp tokens)
    assert transcript.words[0].start_ms <= first < transcript.words[1].start_ms
    assert transcript.words[-1].start_ms < last <= transcript.words[-1].end_ms + 100
    assert transcript.words[-1].end_ms <= 1000 * len(audio) / 16_000


def test_silence_transcribes_to_nothing_much(whisper: WhisperAsr) -> None:
    assert whisper.transcribe(np.zeros(0, dtype=np.float32)).text == ""
    assert len(whisper.transcribe(silence(1000)).text.split()) <= 2


def test_the_pause_decode_is_taken_when_no_audio_followed_it(whisper: WhisperAsr, speech: Speech) -> None:
    audio = speech.clip(300.0, "Play some relaxing music.", 100.0)
    recognizer = WhisperRecognizer(whisper)
    recognizer.begin()
    recognizer.feed(audio)
    guess = recognizer.guess()
    assert recognizer.guess() is guess  # no audio added: the same decode
    decode = recognizer.finish()
    assert decode is guess and recognizer.speculated  # the pause's decode, not a new one
    text = decode.result().text
    assert "relaxing music" in text.lower() and decode.result().words == ()  # text only: no alignment

    recognizer.begin()
    recognizer.feed(audio)
    recognizer.guess()
    recognizer.feed(speech.clip("Turn on the kitchen lights."))  # the user went on: the guess is stale
    text = recognizer.finish().result().text  # a new decode, which finish does not wait for
    assert not recognizer.speculated and "kitchen lights" in text.lower()
    assert not recognizer.active and recognizer.finish().result().text == ""
