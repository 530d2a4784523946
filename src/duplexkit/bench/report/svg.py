"""The report's figures as inline SVG text: a sample's timeline on the media clock, and latency CDFs.

Figures are styled by CSS classes from `duplexkit.bench.report.assets` (no inline styles, so the page's
content security policy needs no `unsafe-inline`). All text in them is escaped. Each figure has a fixed
`viewBox` and scales to its container's width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from duplexkit.bench.report.data import SampleReport
from duplexkit.bench.report.fmt import esc, nice_axis, number, seconds, tick_label

# Timeline geometry (viewBox units).
TL_WIDTH = 960
TL_LEFT = 96
TL_RIGHT = 14
TL_LANES = (("question", 24, 14), ("model", 46, 14), ("reply", 68, 26))
"""(label, top, height) of each lane: input speech, listen/speak decisions, response sentences."""
TL_AXIS = 102
TL_HEIGHT = 122
MIN_BAR = 3.0

# CDF geometry (viewBox units).
CDF_WIDTH = 460
CDF_HEIGHT = 236
CDF_LEFT = 44
CDF_RIGHT = 30
CDF_TOP = 10
CDF_BOTTOM = 40

_Scale = Callable[[float], float]
"""Maps a value (seconds, ms, a share) to a viewBox coordinate."""


def timeline(sample: SampleReport, element_id: str, span: float | None = None) -> str:
    """The sample on its media clock: question speech, model decisions, reply sentences (numbered as in the
    sentence table), reminder/event times, end of clip, and a playhead the page script moves with the audio.

    The axis runs from 0 to at least `span` seconds (default: `timeline_span(sample)`; pass the largest span
    of the samples shown together so their axes align). The `svg` element carries `data-x0` and
    `data-px-per-s` so the script maps seconds to x.
    """
    t_max, step = nice_axis(span if span is not None else timeline_span(sample), 10)
    scale = (TL_WIDTH - TL_LEFT - TL_RIGHT) / t_max

    def x(t: float) -> float:
        return TL_LEFT + max(0.0, min(t, t_max)) * scale

    right = x(t_max)
    parts = [
        f'<svg id="{esc(element_id)}" class="timeline" viewBox="0 0 {TL_WIDTH} {TL_HEIGHT}" role="img" '
        f'data-x0="{TL_LEFT}" data-px-per-s="{scale:.4f}">',
        f"<title>{esc(_timeline_title(sample))}</title>",
    ]
    for label, top, height in TL_LANES:
        parts.append(_rect("lane", TL_LEFT, top, right - TL_LEFT, height))
        parts.append(_text("lane-label", TL_LEFT - 8, top + height / 2 + 4, label))
    for i in range(round(t_max / step) + 1):
        parts.append(_line("grid", x(i * step), x(i * step), 20, TL_AXIS))
        parts.append(_text("tick", x(i * step), TL_AXIS + 14, tick_label(i * step, step)))
    parts.append(_text("tick unit", TL_LEFT - 8, TL_AXIS + 14, "s"))
    if sample.video_duration is not None and sample.video_duration < t_max:
        end = x(sample.video_duration)
        parts.append(_rect("padding", end, 20, right - end, TL_AXIS - 20))
        parts.append(_line("clip-end", end, end, 14, TL_AXIS))
        parts.append(_text("mark-label", end + 3, 12, "end of clip"))
    parts += _speech(sample, x)
    parts += _decisions(sample, x)
    parts += _sentences(sample, x)
    for label, t in sample.reminders:
        parts.append(_line("reminder", x(t), x(t), 14, TL_AXIS))
        parts.append(_text("mark-label reminder-label", x(t) + 3, 12, f"{label} {t:g} s"))
    parts.append(_line("axis", TL_LEFT, right, TL_AXIS, TL_AXIS))
    parts.append(_line("playhead", TL_LEFT, TL_LEFT, 16, TL_AXIS))
    parts.append("</svg>")
    return "".join(parts)


def timeline_span(sample: SampleReport) -> float:
    """The last time (s) the sample's timeline has to show, plus a 2% margin."""
    times = [sample.video_duration or 0.0]
    times += [end for _, end in sample.input_speech]
    times += [mark.t for mark in sample.decisions]
    times += [s.end for s in sample.sentences or ()]
    times += [t for _, t in sample.reminders]
    return max(times) * 1.02


def _timeline_title(sample: SampleReport) -> str:
    speak = sum(mark.decision == "speak" for mark in sample.decisions)
    return (
        f"{sample.split}/{sample.id}: {len(sample.input_speech)} speech segment(s), "
        f"{len(sample.decisions) - speak} listen and {speak} speak decision(s), "
        f"{len(sample.sentences or ())} sentence(s)"
    )


def _speech(sample: SampleReport, x: _Scale) -> list[str]:
    _, top, height = TL_LANES[0]
    return [
        _rect(
            "speech",
            x(a),
            top + 2,
            max(MIN_BAR, x(b) - x(a)),
            height - 4,
            f"question speech {seconds(a)} to {seconds(b)}",
        )
        for a, b in sample.input_speech
    ]


def _decisions(sample: SampleReport, x: _Scale) -> list[str]:
    """A full-height mark per speak decision, a short tick per listen."""
    _, top, height = TL_LANES[1]
    return [
        _rect("speak", x(m.t) - 1.25, top, 2.5, height)
        if m.decision == "speak"
        else _rect("listen", x(m.t) - 0.75, top + height / 2 - 3, 1.5, 6)
        for m in sample.decisions
    ]


def _sentences(sample: SampleReport, x: _Scale) -> list[str]:
    """One bar per sentence from its start to its end, alternating between two rows so neighbours show."""
    _, top, height = TL_LANES[2]
    row = (height - 4) / 2
    out = []
    for index, sentence in enumerate(sample.sentences or (), start=1):
        left = x(sentence.start)
        width = max(MIN_BAR, x(sentence.end) - left)
        y = top + 2 + (index - 1) % 2 * row
        title = f"#{index} {seconds(sentence.start)} to {seconds(sentence.end)}: {sentence.text}"
        out.append('<g class="sentence">' + _rect("bar", left, y, width, row - 1, title))
        if width >= 7 * len(str(index)) + 4:
            out.append(_text("number", left + 3, y + row - 3, str(index)))
        out.append("</g>")
    return out


@dataclass(frozen=True)
class Interval:
    """A bar in a `lanes` figure: `[start, end)` in seconds, its CSS class, tooltip and row (0 or 1)."""

    start: float
    end: float
    css: str
    title: str
    row: int = 0


LANE_HEIGHT = 30


def lanes(
    title: str,
    rows: Sequence[tuple[str, Sequence[Interval]]],
    marks: Sequence[tuple[float, str]],
    span: float,
) -> str:
    """Labelled lanes of intervals on the same axis as `timeline` for `span` (so the two align), with
    labelled vertical marks: the figure a benchmark draws under a sample's timeline."""
    t_max, step = nice_axis(span, 10)
    scale = (TL_WIDTH - TL_LEFT - TL_RIGHT) / t_max

    def x(t: float) -> float:
        return TL_LEFT + max(0.0, min(t, t_max)) * scale

    axis = 20 + LANE_HEIGHT * len(rows) + 6
    height = axis + 20
    parts = [f'<svg class="lanes" viewBox="0 0 {TL_WIDTH} {height}" role="img"><title>{esc(title)}</title>']
    for index, (label, intervals) in enumerate(rows):
        top = 20 + index * LANE_HEIGHT
        parts.append(_rect("lane", TL_LEFT, top, x(t_max) - TL_LEFT, LANE_HEIGHT - 4))
        parts.append(_text("lane-label", TL_LEFT - 8, top + LANE_HEIGHT / 2 + 2, label))
        row = (LANE_HEIGHT - 8) / 2
        for item in intervals:
            left = x(item.start)
            width = max(MIN_BAR, x(item.end) - left)
            parts.append(_rect(item.css, left, top + 2 + item.row % 2 * row, width, row - 1, item.title))
    for i in range(round(t_max / step) + 1):
        parts.append(_text("tick", x(i * step), axis + 14, tick_label(i * step, step)))
    for t, label in marks:
        parts.append(_line("answer-mark", x(t), x(t), 14, axis))
        parts.append(_text("mark-label", x(t) + 3, 12, label))
    parts.append(_line("axis", TL_LEFT, x(t_max), axis, axis))
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class Series:
    """One line of a CDF: sorted values, their p50/p99, a colour slot (`s0`...`s5`) and the source's dash."""

    label: str
    values: Sequence[float]
    p50: float | None
    p99: float | None
    colour: int
    dashed: bool


def cdf(series: Sequence[Series], unit: str, title: str) -> str:
    """Empirical CDFs of `series` on one axis from 0, with p50/p99 reference lines and a dot where each series
    crosses them; a figure with no values says so."""
    width = CDF_WIDTH - CDF_LEFT - CDF_RIGHT
    height = CDF_HEIGHT - CDF_TOP - CDF_BOTTOM
    left, right, bottom = CDF_LEFT, CDF_LEFT + width, CDF_TOP + height
    top_value, step = nice_axis(max((v for s in series for v in s.values), default=0.0), 5)

    def x(value: float) -> float:
        return left + max(0.0, min(value, top_value)) / top_value * width

    def y(share: float) -> float:
        return bottom - share * height

    parts = [
        f'<svg class="cdf" viewBox="0 0 {CDF_WIDTH} {CDF_HEIGHT}" role="img"><title>{esc(title)}</title>',
        _rect("plot", left, CDF_TOP, width, height),
    ]
    for share in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(_line("grid", left, right, y(share), y(share)))
        parts.append(_text("tick y", left - 6, y(share) + 4, f"{share:g}"))
    for share, label in ((0.5, "p50"), (0.99, "p99")):
        parts.append(_line("ref", left, right, y(share), y(share)))
        parts.append(_text("ref-label", right + 4, y(share) + 4, label))
    for i in range(round(top_value / step) + 1):
        parts.append(_line("grid", x(i * step), x(i * step), CDF_TOP, bottom))
        parts.append(_text("tick", x(i * step), bottom + 16, tick_label(i * step, step)))
    parts.append(_text("axis-label", left + width / 2, CDF_HEIGHT - 6, unit))
    for line in series:
        if line.values:
            parts.append(_step_path(line, x, y))
            parts += _percentile_dots(line, unit, x, y)
    if not any(line.values for line in series):
        parts.append(_text("empty", left + width / 2, CDF_TOP + height / 2, "no values"))
    parts.append("</svg>")
    return "".join(parts)


def _step_path(line: Series, x: _Scale, y: _Scale) -> str:
    """The ECDF as one path: flat at 0 up to the first value, a step up by 1/n at each value, flat at 1."""
    count = len(line.values)
    steps = "".join(f"H{x(v):.1f}V{y((i + 1) / count):.1f}" for i, v in enumerate(line.values))
    dash = " dashed" if line.dashed else ""
    return (
        f'<path class="series s{line.colour}{dash}" d="M{x(0):.1f},{y(0):.1f}{steps}H{x(float("inf")):.1f}">'
        f"<title>{esc(line.label)} (n={count})</title></path>"
    )


def _percentile_dots(line: Series, unit: str, x: _Scale, y: _Scale) -> list[str]:
    return [
        f'<circle class="dot s{line.colour}" cx="{x(value):.1f}" cy="{y(share):.1f}" r="3.5">'
        f"<title>{esc(f'{line.label}: {name} {number(value)} {unit}')}</title></circle>"
        for share, name, value in ((0.5, "p50", line.p50), (0.99, "p99", line.p99))
        if value is not None
    ]


def _line(cls: str, x1: float, x2: float, y1: float, y2: float) -> str:
    return f'<line class="{cls}" x1="{x1:.1f}" x2="{x2:.1f}" y1="{y1:.1f}" y2="{y2:.1f}"/>'


def _rect(cls: str, x: float, y: float, width: float, height: float, title: str | None = None) -> str:
    shape = f'<rect class="{cls}" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}"'
    return f"{shape}><title>{esc(title)}</title></rect>" if title else f"{shape}/>"


def _text(cls: str, x: float, y: float, text: str) -> str:
    return f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}">{esc(text)}</text>'
