"""Time math of the Omni-DuplexEval scorer: temporal windows, frame times, reminder windows. Pure functions.

- A sentence spoken over [start, end] is judged against the video window
  [max(0, start - 2), max(window_start + 0.5, end - 2)] (the model speaks about what it saw ~2 s earlier); the
  window is valid if it ends inside the video and lasts at least 0.5 s.
- A window is shown at 2 fps: `int(length * 2)` frames, one frame at the midpoint, else evenly spaced with
  both ends included.
- The content judge sees one frame per 3 s of video, at most 16, each at the middle of its stretch.
- A reminder event at t is answered by the sentences that start in [t, t + 10 s] (both ends included).

Times are seconds, rounded to 3 decimals like the sentences they come from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from duplexkit.client.sentences import TimedSentence

LEAD_S = 2.0
MIN_WINDOW_S = 0.5
TEMPORAL_FPS = 2.0
CONTENT_SECONDS_PER_FRAME = 3.0
CONTENT_MAX_FRAMES = 16
REMINDER_WINDOW_S = 10.0
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Window:
    start: float
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start


def sentence_window(start: float, end: float) -> Window:
    """The video window a sentence spoken over [start, end] is judged against."""
    window_start = max(0.0, start - LEAD_S)
    window_end = max(window_start + MIN_WINDOW_S, end - LEAD_S)
    return Window(round(window_start, 3), round(window_end, 3))


def window_is_valid(window: Window, video_duration: float) -> bool:
    """Inside the video and at least 0.5 s long."""
    return window.end <= video_duration + _EPS and window.length >= MIN_WINDOW_S - _EPS


def window_frame_times(window: Window, fps: float = TEMPORAL_FPS) -> list[float]:
    """Frame times for a window at `fps`: the midpoint alone, or evenly spaced including both ends."""
    count = max(1, int(window.length * fps + _EPS))
    if count == 1:
        return [round((window.start + window.end) / 2, 3)]
    step = window.length / (count - 1)
    return [round(window.start + i * step, 3) for i in range(count)]


def content_frame_times(video_duration: float) -> list[float]:
    """One frame per 3 s of video (at least 1, at most 16), each in the middle of its stretch."""
    count = min(CONTENT_MAX_FRAMES, max(1, int(video_duration / CONTENT_SECONDS_PER_FRAME + _EPS)))
    stretch = video_duration / count
    return [round((i + 0.5) * stretch, 3) for i in range(count)]


def sentences_after(
    sentences: Sequence[TimedSentence], event_time: float, window_s: float = REMINDER_WINDOW_S
) -> list[TimedSentence]:
    """The sentences that start in [event_time, event_time + window_s]."""
    return [s for s in sentences if event_time - _EPS <= s.start <= event_time + window_s + _EPS]
