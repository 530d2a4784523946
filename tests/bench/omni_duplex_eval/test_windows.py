"""Window math of the rubric, with the reference's worked examples."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from duplexkit.bench.omni_duplex_eval.windows import (
    Window,
    content_frame_times,
    sentence_window,
    sentences_after,
    window_frame_times,
    window_is_valid,
)
from duplexkit.client.sentences import TimedSentence


def test_reference_examples() -> None:
    assert sentence_window(4, 5) == Window(2, 3)
    assert sentence_window(1, 1.2) == Window(0, 0.5)


def test_a_window_is_valid_only_inside_the_video() -> None:
    assert window_is_valid(sentence_window(4, 5), video_duration=3.0)
    assert not window_is_valid(sentence_window(4, 5.5), video_duration=3.0)
    assert window_is_valid(sentence_window(0.2, 0.3), video_duration=0.5)


@given(st.floats(0, 120), st.floats(0, 30))
def test_every_window_starts_at_zero_or_later_and_lasts_half_a_second(start: float, length: float) -> None:
    window = sentence_window(start, start + length)
    assert window.start >= 0
    assert window.length >= 0.5 - 1e-9
    assert window_is_valid(window, video_duration=window.end)


def test_frames_at_two_fps_midpoint_or_both_ends() -> None:
    assert window_frame_times(Window(2, 2.5)) == [2.25]
    assert window_frame_times(Window(2, 2.9)) == [2.45]
    assert window_frame_times(Window(2, 3)) == [2, 3]
    assert window_frame_times(Window(0, 1.5)) == [0, 0.75, 1.5]


def test_content_frames_one_per_three_seconds_at_most_sixteen() -> None:
    assert content_frame_times(2.0) == [1.0]
    assert content_frame_times(12.0) == [1.5, 4.5, 7.5, 10.5]
    assert len(content_frame_times(34.0)) == 11
    sixteen = content_frame_times(120.0)
    assert len(sixteen) == 16 and sixteen[0] == 3.75 and sixteen[-1] == 116.25


def test_reminder_window_is_t_to_t_plus_ten_inclusive() -> None:
    spoken = [TimedSentence(str(t), t, t + 1) for t in (4.999, 5.0, 9.0, 15.0, 15.001)]
    assert [s.start for s in sentences_after(spoken, 5.0)] == [5.0, 9.0, 15.0]
