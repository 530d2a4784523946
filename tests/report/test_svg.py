"""The figures: one mark per recorded thing, on a shared axis, escaped."""

from __future__ import annotations

import re
from pathlib import Path

from duplexkit.bench.report import load_run
from duplexkit.bench.report.svg import TL_LEFT, Series, cdf, timeline, timeline_span
from tests.report.runs import standard_run


def _count(svg: str, cls: str) -> int:
    return len(re.findall(rf'class="{cls}"', svg))


def test_the_timeline_draws_speech_decisions_sentences_and_events(tmp_path: Path) -> None:
    sample = load_run(standard_run(tmp_path)).samples[0]

    svg = timeline(sample, "t1")

    assert svg.startswith('<svg id="t1" class="timeline"') and svg.endswith("</svg>")
    assert _count(svg, "speech") == 1
    assert (_count(svg, "listen"), _count(svg, "speak")) == (3, 2)
    assert svg.count('<g class="sentence">') == 2
    assert _count(svg, "reminder") == 2 and "R1 4 s" in svg and "R2 7.5 s" in svg
    assert "end of clip" in svg and _count(svg, "playhead") == 1
    assert "#1 4.20 s to 5.00 s: The light turned red." in svg


def test_the_timeline_maps_seconds_to_x_as_its_data_attributes_say(tmp_path: Path) -> None:
    sample = load_run(standard_run(tmp_path)).samples[0]

    svg = timeline(sample, "t1", span=20.0)

    scale = re.search(r'data-px-per-s="([0-9.]+)"', svg)
    reminder = re.search(r'class="reminder" x1="([0-9.]+)"', svg)
    assert scale is not None and reminder is not None
    assert f'data-x0="{TL_LEFT}"' in svg
    assert float(reminder.group(1)) == round(TL_LEFT + 4.0 * float(scale.group(1)), 1)
    assert ">20<" in svg  # the shared span reaches the axis
    assert timeline_span(sample) == 10.0 * 1.02


def test_an_empty_timeline_still_has_its_lanes(tmp_path: Path) -> None:
    sample = load_run(standard_run(tmp_path)).samples[1]

    svg = timeline(sample, "t2")

    assert _count(svg, "lane") == 3 and _count(svg, "speech") == 0 and '<g class="sentence">' not in svg


def test_a_cdf_draws_one_step_line_per_series_with_percentile_dots() -> None:
    series = [
        Series("A · server-anchored", [100.0, 200.0, 300.0], 200.0, 300.0, 0, False),
        Series("B · client receive", [150.0], 150.0, 150.0, 1, True),
    ]

    svg = cdf(series, "ms", "TTFT")

    assert svg.count("<path ") == 2 and 'class="series s1 dashed"' in svg
    assert svg.count('<circle class="dot') == 4
    assert "p50" in svg and "p99" in svg and ">ms<" in svg


def test_a_cdf_without_values_says_so() -> None:
    assert "no values" in cdf([], "ms", "TTFT")
    assert "<path" not in cdf([Series("A", [], None, None, 0, False)], "ms", "TTFT")
