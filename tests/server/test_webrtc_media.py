"""The call's audio without I/O: the client's track on its RTP media clock, the reply onto the server's
track with what was sent acknowledged as played."""

from __future__ import annotations

import numpy as np
import pytest

from duplexkit.server.webrtc.media import FRAME_SAMPLES, TRACK_RATE_HZ, Ack, Playout, TrackInput, to_mono


def _frames(count: int, start: int = 0) -> list[tuple[int, np.ndarray]]:
    return [(i * FRAME_SAMPLES, np.full(FRAME_SAMPLES, 0.5, np.float32)) for i in range(start, start + count)]


def test_the_input_follows_the_rtp_timestamps_filling_gaps_with_counted_silence() -> None:
    track = TrackInput(TRACK_RATE_HZ)  # no resampling: what comes out is what was placed
    out = [track.feed(pts, samples) for pts, samples in _frames(3) + _frames(2, start=5)]
    placed = np.concatenate(out)
    assert len(placed) == 7 * FRAME_SAMPLES  # frames 3 and 4 never arrived: their time is still there
    assert track.lost_samples == 2 * FRAME_SAMPLES
    assert not placed[3 * FRAME_SAMPLES : 5 * FRAME_SAMPLES].any()
    assert (placed[5 * FRAME_SAMPLES :] == 0.5).all()


def test_a_late_or_repeated_frame_is_trimmed_to_what_is_not_placed_yet() -> None:
    track = TrackInput(TRACK_RATE_HZ)
    track.feed(0, np.ones(FRAME_SAMPLES, np.float32))
    assert len(track.feed(0, np.ones(FRAME_SAMPLES, np.float32))) == 0
    assert len(track.feed(FRAME_SAMPLES // 2, np.ones(FRAME_SAMPLES, np.float32))) == FRAME_SAMPLES // 2
    assert track.lost_samples == 0


def test_a_sender_whose_clock_restarts_is_placed_from_its_new_clock() -> None:
    track = TrackInput(TRACK_RATE_HZ)
    placed = sum(len(track.feed(pts, samples)) for pts, samples in _frames(100, start=100))
    placed += sum(len(track.feed(pts, samples)) for pts, samples in _frames(3))  # back to 0: a new source
    assert placed == 103 * FRAME_SAMPLES and track.lost_samples == 0


def test_the_input_reaches_the_model_at_its_rate() -> None:
    track = TrackInput(16_000)
    total = sum(len(track.feed(pts, samples)) for pts, samples in _frames(50))
    assert 16_000 - 600 <= total <= 16_000  # one second, less the resampler's bounded lag


def test_the_track_sends_silence_while_listening_and_the_reply_when_there_is_one() -> None:
    playout = Playout()
    frame, acks = playout.next_frame()
    assert len(frame) == FRAME_SAMPLES and not frame.any() and acks == []
    playout.add("resp_1", np.full(TRACK_RATE_HZ // 10, 0.25, np.float32), TRACK_RATE_HZ)  # 100 ms
    sent = [playout.next_frame() for _ in range(6)]
    assert all((f == 0.25).all() for f, _ in sent[:5]) and not sent[5][0].any()
    acks = [ack for _, frame_acks in sent for ack in frame_acks]
    # Its first frame began it on the track; 100 ms sent: due, and its audio ran out (not finished yet).
    assert acks == [Ack("resp_1", 20.0, first=True), Ack("resp_1", 100.0)]


def test_acks_come_every_100_ms_and_a_cancelled_reply_is_never_sent() -> None:
    playout = Playout(ack_every_ms=100.0)
    playout.add("resp_1", np.full(TRACK_RATE_HZ, 0.25, np.float32), TRACK_RATE_HZ)  # one second
    acks = [ack for _ in range(12) for ack in playout.next_frame()[1]]
    assert acks == [Ack("resp_1", 20.0, first=True), Ack("resp_1", 120.0), Ack("resp_1", 220.0)]
    assert playout.drop("resp_1")  # it had started on the track: its audio is cut
    frame, acks = playout.next_frame()
    assert not frame.any() and acks == [] and playout.queued_samples == 0


def test_a_reply_at_the_models_rate_is_sent_whole_at_the_tracks_rate() -> None:
    playout = Playout()
    for _ in range(4):
        playout.add("resp_1", np.full(2_400, 0.25, np.float32), 24_000)  # 4 x 100 ms at 24 kHz
    assert not playout.finish("resp_1")  # finished, its audio still to send
    assert playout.queued_samples == 4 * TRACK_RATE_HZ // 10
    acks = [ack for _ in range(25) for ack in playout.next_frame()[1]]
    assert acks[0].first and acks[-1] == Ack("resp_1", 400.0, last=True)
    assert [ack for ack in acks if ack.first or ack.last] == [acks[0], acks[-1]]


def test_a_reply_sent_whole_before_it_finished_stops_when_it_finishes() -> None:
    playout = Playout()
    playout.add("resp_1", np.full(FRAME_SAMPLES, 0.25, np.float32), TRACK_RATE_HZ)
    acks = [ack for _ in range(3) for ack in playout.next_frame()[1]]
    assert acks == [Ack("resp_1", 20.0, first=True)]  # all sent, and it ran out; not finished: not last
    assert playout.finish("resp_1")  # so it stops now
    assert not playout.finish("resp_1") and not playout.drop("resp_1")  # once


def test_a_reply_that_never_reached_the_track_neither_started_nor_stops() -> None:
    playout = Playout()
    playout.add("resp_1", np.zeros(0, np.float32), TRACK_RATE_HZ)
    assert not playout.finish("resp_1")
    playout.add("resp_2", np.full(FRAME_SAMPLES, 0.25, np.float32), TRACK_RATE_HZ)
    assert not playout.drop("resp_2")  # cancelled before its first frame went out: nothing to clear


@pytest.mark.parametrize("channels", [1, 2])
def test_decoded_frames_become_mono(channels: int) -> None:
    pcm = np.tile(np.array([16384, -16384][:channels] if channels == 2 else [16384], np.int16), 4)
    mono = to_mono(pcm.reshape(1, -1), channels)
    assert len(mono) == 4 and np.allclose(mono, 0.0 if channels == 2 else 0.5)
