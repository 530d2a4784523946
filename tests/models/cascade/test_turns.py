"""Turn-taking: answer turns, cut the reply on barge-in, ignore backchannels."""

from __future__ import annotations

from duplexkit.models.cascade.asr import Transcript, finished
from duplexkit.models.cascade.listener import Heard, SpeechEnded
from duplexkit.models.cascade.turns import TurnPolicy
from duplexkit.vad import SpeechStarted


def started(at: float) -> SpeechStarted:
    return SpeechStarted(audio_start_ms=at - 300, speech_start_ms=at)


def ended(start: float, end: float, text: str = "hello") -> SpeechEnded:
    return SpeechEnded(
        speech_start_ms=start,
        speech_end_ms=end,
        stopped_at_ms=end + 512,
        audio_start_ms=start - 300,
        transcript=finished(Transcript(text)),
        ended_at=0.0,
    )


def text(end: SpeechEnded | None) -> str:
    assert end is not None
    utterance = end.utterance()
    assert utterance is not None
    return utterance.text


def heard(
    end_ms: float,
    *events: SpeechStarted | SpeechEnded,
    speaking_since: float | None = None,
    voiced_until: float | None = None,
) -> Heard:
    """What a unit ending at `end_ms` heard; speech in progress is voiced until `end_ms` unless told."""
    if speaking_since is not None and voiced_until is None:
        voiced_until = end_ms
    return Heard(
        events=tuple(events), end_ms=end_ms, speech_start_ms=speaking_since, voiced_until_ms=voiced_until
    )


def test_speech_that_ends_while_the_model_is_silent_is_a_turn() -> None:
    policy = TurnPolicy()
    assert policy.observe(heard(1000, started(500), speaking_since=500), model_audible=False).turn is None
    end = ended(500, 1900)
    outcome = policy.observe(heard(2500, end), model_audible=False)
    assert outcome.turn is end and not outcome.interrupt


def test_overlapping_speech_barges_in_once_it_lasts_min_barge_in_ms() -> None:
    policy = TurnPolicy(min_barge_in_ms=600)
    assert not policy.observe(heard(1000, started(900), speaking_since=900), model_audible=True).interrupt
    assert not policy.observe(heard(1400, speaking_since=900), model_audible=True).interrupt
    assert policy.observe(heard(1500, speaking_since=900), model_audible=True).interrupt
    assert not policy.observe(heard(1600, speaking_since=900), model_audible=False).interrupt  # once
    outcome = policy.observe(heard(3000, ended(900, 2400)), model_audible=False)
    assert outcome.turn is not None and not outcome.dropped  # the barge-in speech is the next turn


def test_the_silence_window_after_short_overlapping_speech_does_not_count_as_barging_in() -> None:
    policy = TurnPolicy(min_barge_in_ms=600)
    policy.observe(heard(1000, started(900), speaking_since=900), model_audible=True)
    assert not policy.observe(
        heard(1700, speaking_since=900, voiced_until=1300), model_audible=True
    ).interrupt


def test_a_short_overlap_is_a_backchannel_and_is_dropped() -> None:
    policy = TurnPolicy(min_barge_in_ms=600)
    policy.observe(heard(1000, started(900), speaking_since=900), model_audible=True)
    okay = ended(900, 1300, "okay")
    outcome = policy.observe(heard(1900, okay), model_audible=True)
    assert outcome.turn is None and not outcome.interrupt and outcome.dropped == (okay,)


def test_overlapping_speech_that_outlasts_the_reply_is_an_ordinary_turn() -> None:
    policy = TurnPolicy(min_barge_in_ms=600)
    policy.observe(heard(1000, started(900), speaking_since=900), model_audible=True)
    assert not policy.observe(heard(1600, speaking_since=900), model_audible=False).interrupt
    outcome = policy.observe(heard(3000, ended(900, 2000)), model_audible=False)
    assert outcome.turn is not None and not outcome.interrupt


def test_a_long_overlap_that_starts_and_ends_within_one_unit_interrupts_and_is_answered() -> None:
    policy = TurnPolicy(min_barge_in_ms=600)
    outcome = policy.observe(heard(5000, started(1000), ended(1000, 3000)), model_audible=True)
    assert outcome.interrupt and outcome.turn is not None


def test_several_turns_in_one_unit_are_merged() -> None:
    policy = TurnPolicy()
    outcome = policy.observe(
        heard(9000, started(100), ended(100, 900, "turn on"), started(2000), ended(2000, 3000, "the lights")),
        model_audible=False,
    )
    assert text(outcome.turn) == "turn on the lights"
    assert outcome.turn is not None
    assert (outcome.turn.speech_start_ms, outcome.turn.speech_end_ms) == (100, 3000)


def test_short_speech_over_a_reply_the_engine_cut_is_answered() -> None:
    policy = TurnPolicy(min_barge_in_ms=600)
    policy.observe(heard(1000, started(900), speaking_since=900), model_audible=True)
    policy.reply_cut()  # e.g. the client flagged the append as speech and the engine barged in
    outcome = policy.observe(heard(1900, ended(900, 1300, "stop")), model_audible=False)
    assert text(outcome.turn) == "stop" and not outcome.dropped


def test_merged_turns_wait_for_every_transcript() -> None:
    from concurrent.futures import Future

    pending: Future[Transcript] = Future()
    later = SpeechEnded(
        speech_start_ms=2000,
        speech_end_ms=3000,
        stopped_at_ms=3512,
        audio_start_ms=1700,
        transcript=pending,
        ended_at=0.0,
    )
    merged = SpeechEnded.merged([ended(100, 900, "turn on"), later])
    assert merged.utterance() is None  # the second decode is still running
    pending.set_result(Transcript("the lights"))
    assert text(merged) == "turn on the lights"
