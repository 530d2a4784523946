"""pocketsphinx recognition: pooled decoders, per-session searches, dither."""

from __future__ import annotations

import numpy as np
import pytest

from duplexkit.models.cascade.asr import MAX_SEARCHES_PER_DECODER, DecoderPool, Recognizer, SearchSpec
from tests.models.cascade.conftest import GRAMMAR, Speech


def test_decoders_are_lent_and_reused(pool: DecoderPool) -> None:
    first = pool.acquire()
    second = pool.acquire()  # none idle: a new one
    assert first is not second
    pool.release(second)
    pool.release(first)
    assert pool.acquire() is first
    pool.release(first)


def test_a_grammar_makes_recognition_exact_even_after_digital_silence(
    pool: DecoderPool, speech: Speech
) -> None:
    recognizer = Recognizer(pool)
    recognizer.search = SearchSpec.grammar(GRAMMAR)
    recognizer.begin()
    recognizer.feed(np.zeros(8000, dtype=np.float32))  # exact zeros reach the decoder dithered
    recognizer.feed(speech("Turn off the bedroom lights."))
    recognizer.feed(np.zeros(4000, dtype=np.float32))
    assert recognizer.finish().result().text == "turn off the bedroom lights"
    assert not recognizer.active and recognizer.finish().result().text == ""


def test_dither_keeps_silence_off_exact_zero(pool: DecoderPool) -> None:
    pcm = Recognizer(pool)._pcm16(np.zeros(1000, dtype=np.float32))
    assert np.any(pcm != 0) and np.max(np.abs(pcm)) <= 2


def test_abort_gives_the_decoder_back(pool: DecoderPool) -> None:
    recognizer = Recognizer(pool)
    recognizer.begin()
    recognizer.abort()
    assert not recognizer.active


@pytest.mark.parametrize(
    "spec",
    [
        SearchSpec.grammar("#JSGF V1.0; grammar g; public <g> = hello (world;"),
        SearchSpec.grammar("#JSGF V1.0; grammar g; public <g> = zorblaxian;"),
        SearchSpec.keywords(["zorblaxian"]),
    ],
)
def test_pocketsphinx_rejections_are_value_errors(pool: DecoderPool, spec: SearchSpec) -> None:
    with pytest.raises(ValueError, match="pocketsphinx rejected"):
        pool.validate(spec)


def test_keyword_specs_carry_a_threshold_per_phrase() -> None:
    spec = SearchSpec.keywords(["Kitchen  Lights", "weather /1e-30/"])
    assert spec.source == "kitchen lights /1e-20/\nweather /1e-30/\n"
    assert spec.name.startswith("keywords-") and spec.name != SearchSpec.keywords(["weather"]).name


def test_searches_on_a_decoder_are_bounded(pool: DecoderPool) -> None:
    decoder = pool.acquire()
    try:
        for k in range(MAX_SEARCHES_PER_DECODER + 3):
            decoder.activate(SearchSpec.grammar(f"#JSGF V1.0; grammar g{k}; public <g> = hello;"))
        assert len(decoder._searches) <= MAX_SEARCHES_PER_DECODER
        decoder.activate(None)
    finally:
        pool.release(decoder)
