"""Specification tests for duplexkit.protocol.units: ms/sample conversion, unit grid, clock, chunking."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.protocol.audio import AudioFormat, UnsupportedAudioFormat
from duplexkit.protocol.units import (
    MediaClock,
    UnitGrid,
    bytes_per_sample,
    chunk_samples,
    ms_to_samples,
    samples_to_ms,
)

RATES = [8000, 16000, 22050, 24000, 44100, 48000]

# --- conversions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ms", "rate", "samples"),
    [
        (20, 16000, 320),
        (1030, 16000, 16480),
        (1000, 24000, 24000),
        (10, 22050, 221),  # 220.5: ties round up
        (0.03125, 16000, 1),  # exactly 0.5 sample: ties round up
        (0.03, 16000, 0),  # 0.48 sample rounds down
        (0.1, 16000, 2),  # 1.6 samples rounds up
        (0, 48000, 0),
    ],
)
def test_ms_to_samples_rounds_to_the_nearest_sample_with_ties_up(ms: float, rate: int, samples: int) -> None:
    assert ms_to_samples(ms, rate) == samples


def test_samples_to_ms_is_exact_for_whole_millisecond_counts() -> None:
    assert samples_to_ms(320, 16000) == 20.0
    assert samples_to_ms(441, 44100) == 10.0
    assert samples_to_ms(3_200_000, 16000) == 200000.0
    assert samples_to_ms(1, 3) == 1000 / 3


@settings(max_examples=50)
@given(n=st.integers(min_value=0, max_value=10**9), rate=st.sampled_from(RATES))
def test_samples_survive_a_round_trip_through_milliseconds(n: int, rate: int) -> None:
    assert ms_to_samples(samples_to_ms(n, rate), rate) == n


@pytest.mark.parametrize("rate", [0, -16000, 16000.0, True])
def test_conversions_reject_non_positive_or_non_integer_rates(rate: object) -> None:
    with pytest.raises(ValueError, match="rate"):
        ms_to_samples(20, rate)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rate"):
        samples_to_ms(20, rate)  # type: ignore[arg-type]


@pytest.mark.parametrize("ms", [math.nan, math.inf])
def test_ms_to_samples_rejects_non_finite_durations(ms: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        ms_to_samples(ms, 16000)


@pytest.mark.parametrize(
    ("fmt", "size"), [("pcm16", 2), ("pcm_f32le", 4), ("g711_ulaw", 1), ("g711_alaw", 1)]
)
def test_bytes_per_sample_matches_each_wire_format(fmt: AudioFormat, size: int) -> None:
    assert bytes_per_sample(fmt) == size


def test_bytes_per_sample_rejects_unknown_formats() -> None:
    with pytest.raises(UnsupportedAudioFormat):
        bytes_per_sample("mp3")  # type: ignore[arg-type]


# --- UnitGrid ----------------------------------------------------------------------------------


def test_unit_grid_first_unit_defaults_to_the_chunk_period() -> None:
    grid = UnitGrid(1000)
    assert grid.first_unit_ms == 1000
    assert grid.first_end_ms == 1000
    assert [grid.unit_end_ms(k) for k in range(3)] == [1000, 2000, 3000]
    assert grid == UnitGrid(1000, 1000)


def test_minicpm_o_grid_closes_its_first_unit_at_1030_ms_then_every_1000_ms() -> None:
    grid = UnitGrid(chunk_period_ms=1000, first_unit_ms=1030)
    assert [grid.unit_end_ms(k) for k in range(4)] == [1030, 2030, 3030, 4030]
    assert grid.units_closed_between(0, 1000) == range(0)
    assert list(grid.units_closed_between(1000, 1030)) == [0]
    assert list(grid.units_closed_between(1020, 1040)) == [0]
    assert list(grid.units_closed_between(1030, 2030)) == [1]  # prev boundary excluded, new included
    assert list(grid.units_closed_between(0, 5000)) == [0, 1, 2, 3]
    assert grid.units_closed_between(2030, 2030) == range(0)
    assert grid.unit_count(2500, include_residual=False) == 2
    assert grid.unit_count(2500, include_residual=True) == 3
    assert grid.unit_count(3030, include_residual=True) == 3
    assert grid.unit_count(500, include_residual=False) == 0
    assert grid.unit_count(500, include_residual=True) == 1
    assert grid.unit_count(0, include_residual=True) == 0
    assert grid.residual_ms(2500) == 470.0
    assert grid.residual_ms(500) == 500.0
    assert grid.residual_ms(3030) == 0.0


def test_streaming_20ms_appends_close_each_unit_exactly_once_on_the_crossing_append() -> None:
    grid = UnitGrid(1000, 1030)
    clock = MediaClock(16000)
    closed_on: dict[int, float] = {}
    prev = clock.audio_end_ms
    for _ in range(300):  # 6 s of 20 ms appends
        new = clock.advance_ms(20)
        for k in grid.units_closed_between(prev, new):
            assert k not in closed_on
            closed_on[k] = new
        prev = new
    assert closed_on == {0: 1040.0, 1: 2040.0, 2: 3040.0, 3: 4040.0, 4: 5040.0}
    assert grid.unit_count(clock.audio_end_ms, include_residual=True) == 6


@settings(max_examples=50)
@given(
    period=st.integers(1, 2000),
    first=st.one_of(st.none(), st.integers(1, 3000)),
    a=st.floats(0, 20000, allow_nan=False),
    b=st.floats(0, 20000, allow_nan=False),
)
def test_units_closed_between_matches_a_brute_force_scan(
    period: int, first: int | None, a: float, b: float
) -> None:
    grid = UnitGrid(period, first)
    prev, new = min(a, b), max(a, b)
    expected = []
    k = 0
    while grid.unit_end_ms(k) <= new:
        if grid.unit_end_ms(k) > prev:
            expected.append(k)
        k += 1
    assert list(grid.units_closed_between(prev, new)) == expected
    assert grid.unit_count(new, include_residual=False) == k
    assert grid.unit_count(new, include_residual=True) == k + (grid.residual_ms(new) > 0)
    assert 0 <= grid.residual_ms(new) < (grid.first_end_ms if k == 0 else period)


def test_unit_grid_treats_a_time_exactly_on_a_boundary_as_closing_that_unit() -> None:
    grid = UnitGrid(20, 20)
    end = samples_to_ms(320 * 3, 16000)
    assert end == 60.0
    assert list(grid.units_closed_between(40.0, end)) == [2]


@pytest.mark.parametrize(("period", "first"), [(0, None), (-5, None), (1000, 0), (1000, -1), (True, None)])
def test_unit_grid_rejects_non_positive_periods(period: int, first: int | None) -> None:
    with pytest.raises(ValueError):
        UnitGrid(period, first)


def test_unit_grid_is_immutable_and_rejects_bad_queries() -> None:
    grid = UnitGrid(1000, 1030)
    with pytest.raises(dataclasses.FrozenInstanceError):
        grid.chunk_period_ms = 5  # type: ignore[misc]
    with pytest.raises(ValueError):
        grid.unit_end_ms(-1)
    with pytest.raises(ValueError, match="before"):
        grid.units_closed_between(2000, 1000)
    with pytest.raises(ValueError):
        grid.unit_count(-1, include_residual=True)
    with pytest.raises(ValueError, match="finite"):
        grid.units_closed_between(0, math.nan)


# --- MediaClock --------------------------------------------------------------------------------


def test_media_clock_has_no_drift_after_ten_thousand_20ms_appends_at_16khz() -> None:
    by_ms = MediaClock(16000)
    by_samples = MediaClock(16000)
    for _ in range(10_000):
        by_ms.advance_ms(20)
        last = by_samples.advance_samples(320)
    assert by_ms.audio_end_ms == 200000.0
    assert last == by_samples.audio_end_ms == 200000.0
    assert by_ms.total_samples == 3_200_000


def test_media_clock_advance_returns_the_new_cumulative_end() -> None:
    clock = MediaClock(24000)
    assert clock.audio_end_ms == 0.0
    assert clock.advance(20) == 20.0
    assert clock.advance_samples(480) == 40.0
    assert clock.advance_ms(0) == 40.0
    assert clock.rate == 24000


def test_media_clock_advance_ms_rounds_each_step_to_whole_samples() -> None:
    clock = MediaClock(22050)
    clock.advance_ms(10)  # 220.5 samples -> 221
    assert clock.total_samples == 221
    assert clock.audio_end_ms == samples_to_ms(221, 22050)


def test_rateless_media_clock_sums_exactly_without_float_drift() -> None:
    naive = 0.0
    clock = MediaClock()
    for _ in range(10_000):
        naive += 0.1
        clock.advance(0.1)
    assert naive != 1000.0  # the drift a plain float accumulator suffers
    assert clock.audio_end_ms == 1000.0
    with pytest.raises(ValueError, match="rate"):
        clock.advance_samples(1)
    with pytest.raises(ValueError, match="rate"):
        _ = clock.total_samples


@pytest.mark.parametrize("bad", [-1, -0.5, math.nan, math.inf])
def test_media_clock_never_goes_backwards_or_accepts_non_finite_durations(bad: float) -> None:
    clock = MediaClock(16000)
    with pytest.raises(ValueError):
        clock.advance_ms(bad)
    with pytest.raises(ValueError):
        clock.advance_samples(-1)
    assert clock.audio_end_ms == 0.0


# --- chunk_samples -----------------------------------------------------------------------------


def test_chunk_samples_cuts_a_clip_into_chunk_ms_pieces_with_a_short_last_piece() -> None:
    assert chunk_samples(1000, 16000, 20) == [(0, 320), (320, 640), (640, 960), (960, 1000)]
    assert chunk_samples(960, 16000, 20) == [(0, 320), (320, 640), (640, 960)]
    assert chunk_samples(5, 16000, 20) == [(0, 5)]
    assert chunk_samples(0, 16000, 20) == []


def test_chunk_samples_alternates_lengths_instead_of_drifting_when_a_chunk_is_fractional() -> None:
    slices = chunk_samples(22050, 22050, 10)
    assert len(slices) == 100
    assert {stop - start for start, stop in slices} == {220, 221}
    assert all(stop == ms_to_samples(10 * (i + 1), 22050) for i, (_, stop) in enumerate(slices))


@settings(max_examples=50)
@given(
    total=st.integers(0, 500_000),
    rate=st.sampled_from(RATES),
    chunk_ms=st.integers(1, 1000),
)
def test_chunk_samples_covers_the_whole_range_with_no_gaps_or_overlaps(
    total: int, rate: int, chunk_ms: int
) -> None:
    slices = chunk_samples(total, rate, chunk_ms)
    nominal = chunk_ms * rate / 1000
    position = 0
    for start, stop in slices:
        assert start == position
        assert start < stop
        assert stop - start <= math.ceil(nominal)
        position = stop
    assert position == total
    assert all(stop - start >= math.floor(nominal) for start, stop in slices[:-1])


@pytest.mark.parametrize(
    ("total", "rate", "chunk_ms"), [(-1, 16000, 20), (100, 0, 20), (100, 16000, 0), (100, 500, 1)]
)
def test_chunk_samples_rejects_invalid_arguments(total: int, rate: int, chunk_ms: int) -> None:
    with pytest.raises(ValueError):
        chunk_samples(total, rate, chunk_ms)
