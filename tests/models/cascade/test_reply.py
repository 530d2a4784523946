"""A reply: produced in the background, released at playback pace with its text, cut where it was heard."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from duplexkit.engine import Speak
from duplexkit.models.cascade.reply import Reply
from tests.models.cascade.fakes import MS_PER_CHAR, ToneSynthesizer, deltas

OUT = 24_000


async def play_out(reply: Reply, unit_ms: float = 100.0, clocks: list[float] | None = None) -> list[Speak]:
    """Step the reply unit by unit, as the plugin does, until its last segment is out; `clocks` gets the
    playback clock at each segment."""
    await reply.wait_for_audio()
    segments, clock = [], 0.0
    while not reply.emitted:
        segment = reply.release()
        if segment is None:
            await reply.wait_for_audio()
        else:
            segments.append(segment)
            if clocks is not None:
                clocks.append(clock)
        reply.advance(unit_ms)
        clock = min(clock + unit_ms, reply.released_ms)
    return segments


async def test_audio_is_released_lead_ms_ahead_of_playback_and_the_last_segment_ends_the_turn() -> None:
    reply = Reply(deltas("You said: ", "turn on the lights."), ToneSynthesizer(), OUT, lead_ms=400)
    await reply.wait_for_audio()
    clocks: list[float] = []
    segments = await play_out(reply, clocks=clocks)
    # 400 of "You said:"'s 450 ms: the words that audio speaks, not the piece's whole text.
    assert len(segments[0].audio) == 400 * 24 and segments[0].text == "You "
    released = 0
    for segment, clock in zip(segments, clocks, strict=True):
        released += len(segment.audio)
        assert released <= (clock + 400) * 24  # never more than the lead ahead of playback
    assert [s.end_of_turn for s in segments].count(True) == 1 and segments[-1].end_of_turn
    assert "".join(s.text for s in segments) == "You said: turn on the lights."


async def test_only_the_first_piece_is_synthesised_urgently() -> None:
    """Nothing plays while the first piece is made, so it may take every core; the rest is made while
    earlier audio plays."""
    synthesizer = ToneSynthesizer()
    await play_out(Reply(deltas("Sure, the lights are on. Anything else?"), synthesizer, OUT, lead_ms=100))
    assert synthesizer.calls == ["Sure,", "the lights are on.", "Anything else?"]
    assert synthesizer.urgent == [True, False, False]


async def test_total_audio_is_the_exact_resampled_count_of_what_was_synthesised() -> None:
    text = "One. Two three: four five six."
    segments = await play_out(Reply(deltas(text), ToneSynthesizer(), OUT, lead_ms=100))
    synthesised = sum(
        round(len(p.strip()) * MS_PER_CHAR * 22_050 / 1000)
        for p in ("One. ", "Two three: ", "four five six.")
    )
    expected = (2 * synthesised * OUT + 22_050) // (2 * 22_050)
    assert sum(len(s.audio) for s in segments) == expected
    assert all(s.audio.dtype == np.float32 for s in segments)


async def test_no_word_is_released_before_the_audio_that_speaks_it() -> None:
    """τ-Voice hands its caller the transcript in proportion to the audio played: with a piece's whole
    text on its first audio it read 90 of 127 characters 0.6 s into a 6.5 s reply. Each segment's text
    stays within what its audio so far covers, in proportion within each piece, and the whole is intact."""
    pieces = (
        "Sure, ",
        "your flight to Boston leaves at nine in the morning from gate twelve and boards early.",
    )
    reply = Reply(deltas(*pieces), ToneSynthesizer(), OUT, lead_ms=400)
    segments = await play_out(reply, unit_ms=100)
    piece_ms = [len(piece.strip()) * MS_PER_CHAR for piece in pieces]

    def covered(audio_ms: float) -> float:
        """Characters the audio up to `audio_ms` speaks, each piece's in proportion to its audio."""
        chars, start = 0.0, 0.0
        for piece, ms in zip(pieces, piece_ms, strict=True):
            chars += len(piece) * min(1.0, max(0.0, (audio_ms - start) / ms))
            start += ms
        return chars

    sent_chars, sent_ms = 0, 0.0
    for segment in segments:
        sent_chars += len(segment.text)
        sent_ms += 1000 * len(segment.audio) / OUT
        assert sent_chars <= covered(sent_ms) + 0.5, (sent_chars, sent_ms)
    assert "".join(s.text for s in segments) == "".join(pieces)
    assert sum(1 for s in segments if s.text) >= 10  # word by word, not one piece at a time


async def test_played_text_is_what_the_played_audio_spoke() -> None:
    reply = Reply(deltas("You said: turn on the lights."), ToneSynthesizer(), OUT, lead_ms=100)
    await play_out(reply)
    first_ms = len("You said:") * MS_PER_CHAR
    assert reply.played_text(0) == ""
    assert reply.played_text(first_ms + 1) == "You said:"
    halfway = reply.played_text(first_ms + len("turn on the lights.") * MS_PER_CHAR / 2)
    assert halfway.startswith("You said: turn") and not halfway.endswith("lights.")
    assert reply.played_text(1e9) == "You said: turn on the lights."


async def test_a_synthesis_failure_is_raised_by_the_wait_and_by_release() -> None:
    reply = Reply(deltas("Fine. Broken."), ToneSynthesizer(fail_on="Broken"), OUT, lead_ms=100)
    await reply.wait_for_audio()  # the first piece made it
    with pytest.raises(RuntimeError, match="synthesis failed"):
        while True:
            reply.release()
            reply.advance(1000.0)
            await reply.wait_for_audio()


async def test_a_responder_failure_before_any_audio_is_raised_by_the_wait() -> None:
    async def broken() -> object:
        raise ConnectionError("llm down")
        yield  # pragma: no cover

    reply = Reply(broken(), ToneSynthesizer(), OUT, lead_ms=100)  # type: ignore[arg-type]
    with pytest.raises(ConnectionError, match="llm down"):
        await reply.wait_for_audio()


async def test_cancel_stops_production() -> None:
    synth = ToneSynthesizer()
    reply = Reply(deltas("One. ", "Two. ", "Three."), synth, OUT, lead_ms=100)
    await reply.wait_for_audio()
    reply.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reply._task
    assert len(synth.calls) < 3
