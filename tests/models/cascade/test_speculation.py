"""The reply started at a pause: kept, adopted or discarded, and the discarded work counted (Sans-I/O)."""

from __future__ import annotations

from concurrent.futures import Future

from duplexkit.models.cascade.asr import Transcript, finished
from duplexkit.models.cascade.speculation import Speculation, same_words


class FakeReply:
    def __init__(self, guess: Future[Transcript]) -> None:
        self.guess = guess
        self.cancelled = False
        self.produced_ms = 0.0

    def cancel(self) -> None:
        self.cancelled = True


def running() -> Future[Transcript]:
    """A decode still under way."""
    return Future()


def test_one_reply_per_decode_kept_through_the_pause_and_adopted_when_the_turn_ends_on_it() -> None:
    started: list[FakeReply] = []
    spec = Speculation(lambda guess: started.append(FakeReply(guess)) or started[-1])
    decode = running()
    for k in range(3):  # every unit of the pause reports the same decode
        spec.observe(decode, speaking=True, at_ms=1000.0 + 100 * k, now=10.0 + 0.1 * k)
    assert len(started) == 1 and spec.current is not None and spec.current.at_ms == 1000.0
    adopted = spec.adopt(decode, now=10.3)  # still decoding: the same decode is enough
    assert adopted is not None and adopted.reply is started[0] and not started[0].cancelled
    assert spec.current is None
    assert (spec.stats.started, spec.stats.adopted, spec.stats.discarded) == (1, 1, 0)


def test_speech_that_goes_on_discards_the_reply_and_counts_what_it_had_made() -> None:
    spec = Speculation(FakeReply)
    spec.observe(running(), speaking=True, at_ms=500.0, now=1.0)
    assert spec.current is not None
    spec.current.reply.produced_ms = 640.0
    reply = spec.current.reply
    spec.observe(None, speaking=False, at_ms=600.0, now=1.1)  # silence, no guess: nothing changes
    assert spec.current is not None and not reply.cancelled
    spec.observe(None, speaking=True, at_ms=700.0, now=1.25)  # the user went on
    assert spec.current is None and reply.cancelled
    assert spec.stats.discarded == 1 and spec.stats.adopted == 0
    assert 249.0 < spec.stats.discarded_busy_ms < 251.0 and spec.stats.discarded_audio_ms == 640.0


def test_a_new_decode_replaces_the_reply_to_the_old_one_and_other_words_are_never_adopted() -> None:
    spec = Speculation(FakeReply)
    first = running()
    spec.observe(first, speaking=True, at_ms=500.0, now=1.0)
    old = spec.current
    second = running()  # more speech, then another pause
    spec.observe(second, speaking=True, at_ms=900.0, now=1.4)
    assert old is not None and old.reply.cancelled and spec.current is not None
    assert spec.current.guess is second
    other = finished(Transcript("set a timer"))
    second.set_result(Transcript("set a"))
    assert spec.adopt(other, now=1.5) is None  # the turn ended on other words
    assert (spec.stats.started, spec.stats.adopted, spec.stats.discarded) == (2, 0, 2)


def test_decodes_that_finished_with_the_same_text_are_the_same_words() -> None:
    assert same_words(finished(Transcript("hello")), finished(Transcript("hello")))
    assert not same_words(finished(Transcript("hello")), finished(Transcript("hello there")))
    assert not same_words(running(), running())  # unknown yet: not the same
    failed: Future[Transcript] = Future()
    failed.set_exception(RuntimeError("decode failed"))
    assert not same_words(failed, finished(Transcript("")))
    spec = Speculation(FakeReply)
    spec.observe(finished(Transcript("hello")), speaking=True, at_ms=0.0, now=0.0)
    spec.observe(finished(Transcript("hello")), speaking=True, at_ms=100.0, now=0.1)  # pocketsphinx
    assert spec.stats.started == 1
    assert spec.adopt(finished(Transcript("hello")), now=0.2) is not None
