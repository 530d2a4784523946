"""The bridge's rules on a fake clock: one media clock for both directions however late the caller is,
each side's audio placed where the other side heard it, stages, withdrawal and the end."""

from __future__ import annotations

import random

import numpy as np
import pytest

from duplexkit.bench.bridge.core import BridgeCore, Tick

FRAME = 480  # 20 ms at 24 kHz


def _run(core: BridgeCore, until: float, step: float = 0.02, start: float = 1000.0) -> list[Tick]:
    ticks: list[Tick] = []
    now = start
    while now <= start + until and not core.finished:
        ticks += core.due(now)
        now += step
    return ticks


def test_no_drift_between_the_two_sides_over_a_long_conversation() -> None:
    """Ten minutes on a jittery caller (5-60 ms between calls, stalls of up to 0.5 s), both servers
    sending bursts of audio at random moments: frame k of both directions is cut once, together, never
    before its due time, and both recordings end up exactly as long as the media clock, whose length is
    the wall time elapsed (to one frame)."""
    rng = random.Random(46)
    core = BridgeCore(duration_s=600.0)
    start = 5000.0
    core.start(start)
    now = start
    sent = {"examiner": [], "examinee": []}
    counter = 1
    ticks: list[Tick] = []
    cut_at: list[float] = []
    turn = 0
    while not core.finished:
        now += rng.uniform(0.005, 0.06) + (rng.uniform(0.1, 0.5) if rng.random() < 0.01 else 0.0)
        if rng.random() < 0.02:  # a burst of one response from either side, faster than real time
            speaker = rng.choice(["examiner", "examinee"])
            turn += 1
            for _ in range(rng.randint(1, 5)):
                n = rng.randint(1, 4000)
                chunk = (np.arange(counter, counter + n) % 997 + 1).astype(np.float32) / 1000
                counter += n
                core.audio(speaker, f"r{turn}", chunk)
                sent[speaker].append(chunk)
            core.done(speaker, f"r{turn}")
        got = core.due(now)
        ticks += got
        cut_at += [now] * len(got)
    assert [t.index for t in ticks] == list(range(30_000)) and core.frames == 30_000
    for tick, at in zip(ticks, cut_at, strict=True):
        due = start + (tick.index + 1) * 0.02
        assert at >= due - 1e-9 and tick.late_ms == pytest.approx((at - due) * 1000)
        assert len(tick.to_examinee) == len(tick.to_examiner) == FRAME
    assert core.stop_reason == "duration" and core.media_s == pytest.approx(600.0)
    assert now - start == pytest.approx(600.0, abs=0.6)  # the clock followed the wall clock
    for speaker, direction in (("examiner", "to_examinee"), ("examinee", "to_examiner")):
        recording = core.recording(speaker)
        heard = np.concatenate([getattr(t, direction) for t in ticks])
        assert len(recording) == 30_000 * FRAME and np.array_equal(recording, heard)
        # nothing lost, nothing reordered, nothing invented: the audio sent, in order, then silence
        said = np.concatenate(sent[speaker])
        assert np.array_equal(recording[recording != 0][: len(said)], said[: (recording != 0).sum()])
    assert core.stereo().shape == (30_000 * FRAME, 2)


def test_audio_plays_from_the_first_frame_after_it_arrived_and_text_follows_it() -> None:
    core = BridgeCore(duration_s=1.0)
    core.start(0.0)
    assert len(core.due(0.1)) == 5  # frames 0-4 cut: 100 ms of silence
    chunk = np.linspace(0.1, 0.9, 720, dtype=np.float32)  # 30 ms
    core.audio("examiner", "r1", chunk)
    core.text("examiner", "r1", "Hello there")
    core.done("examiner", "r1")
    core.audio("examinee", "b1", np.full(480, 0.5, np.float32))
    ticks = core.due(0.16)
    assert [t.index for t in ticks] == [5, 6, 7]
    recording = core.recording("examiner")
    assert np.array_equal(recording[5 * FRAME : 5 * FRAME + 720], chunk)
    assert not recording[: 5 * FRAME].any() and not recording[5 * FRAME + 720 :].any()
    assert np.array_equal(np.concatenate([ticks[0].to_examinee, ticks[1].to_examinee[:240]]), chunk)
    assert np.array_equal(ticks[0].to_examiner, np.full(480, 0.5, np.float32))
    [turn] = core.turns("examiner")
    assert (turn["start_s"], turn["end_s"], turn["text"]) == (0.1, 0.13, "Hello there")
    # words spread over the response's own audio where it played: "Hello " is 6 of 11 characters
    hello, there = core.words("examiner")
    assert hello["text"] == "Hello" and hello["timestamp"][0] == pytest.approx(0.1)
    assert there["timestamp"][1] == pytest.approx(0.13)
    assert hello["timestamp"][1] <= there["timestamp"][0]


def test_a_late_caller_gets_every_frame_due_at_once_and_none_early() -> None:
    core = BridgeCore(duration_s=1.0)
    core.start(10.0)
    assert core.due(10.019) == []
    ticks = core.due(10.5)
    assert [t.index for t in ticks] == list(range(25))
    assert ticks[0].late_ms == pytest.approx(480.0) and ticks[-1].late_ms == pytest.approx(0.0)
    assert core.late_frames == 23 and core.max_late_ms == pytest.approx(480.0)
    assert core.deadline() == pytest.approx(10.52)


def test_a_withdrawn_response_loses_what_was_not_played() -> None:
    core = BridgeCore(duration_s=1.0)
    core.start(0.0)
    core.audio("examinee", "b1", np.full(2400, 0.25, np.float32))  # 100 ms
    core.due(0.04)  # 40 ms played
    core.withdraw("examinee", "b1")
    core.audio("examinee", "b1", np.full(480, 0.25, np.float32))  # late audio of it: ignored
    core.due(0.2)
    recording = core.recording("examinee")
    assert np.count_nonzero(recording) == 960
    [turn] = core.turns("examinee")
    assert turn["withdrawn"] is True and turn["played_s"] == 0.04


def test_stages_advance_when_an_examinee_turn_has_played_out() -> None:
    core = BridgeCore(duration_s=2.0, stages=3)
    core.start(0.0)
    core.audio("examinee", "b1", np.full(960, 0.2, np.float32))
    core.done("examinee", "b1")
    core.due(0.02)
    assert core.pending_stages() == []  # done, but half of it still to be heard by the examiner
    core.due(0.04)
    [update] = core.pending_stages()
    assert (update.stage, update.at_s) == (1, 0.04)
    core.audio("examinee", "b2", np.full(480, 0.2, np.float32))
    core.withdraw("examinee", "b2")  # cut off before it played: no turn
    core.due(0.2)
    assert core.pending_stages() == []
    for rid in ("b3", "b4"):
        core.audio("examinee", rid, np.full(480, 0.2, np.float32))
        core.done("examinee", rid)
    core.due(0.4)
    assert [u.stage for u in core.pending_stages()] == [2]  # the last stage: no stage 3
    assert [u.stage for u in core.stage_updates] == [1, 2]


def test_the_stop_phrase_ends_the_conversation_once_played_plus_the_tail() -> None:
    core = BridgeCore(duration_s=10.0, stop_phrase="Thank you, goodbye!", tail_s=0.1)
    core.start(0.0)
    core.text("examiner", "a1", "Okay. Thank you,  GOODBYE.")
    core.audio("examiner", "a1", np.full(2400, 0.3, np.float32))  # 100 ms
    core.due(0.2)
    assert not core.finished  # not done yet
    core.done("examiner", "a1")
    ticks = core.due(5.0)
    # done at frame 10 (200 ms), then 5 frames of tail
    assert core.stop_reason == "stop_phrase" and core.frames == 15 and len(ticks) == 5
    assert core.due(6.0) == []


def test_refuses_a_frame_that_is_not_whole_samples() -> None:
    with pytest.raises(ValueError, match="whole number"):
        BridgeCore(duration_s=1.0, rate_hz=11_025, frame_ms=20)
    with pytest.raises(ValueError):
        BridgeCore(duration_s=0.0)
