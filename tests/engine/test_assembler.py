"""The unit assembler as a specification: appends of any size and rate become units on the unit grid.

Unit k always covers the same span of the media clock however the client chunked its audio; input at
another rate is resampled to the model's rate with exact unit sizes; a commit flushes the residual as a
final unit; video frames ride with the unit their append closes. Last, the same through `EngineSession`.
"""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.engine import EngineConfig, EngineSession
from duplexkit.engine.assembler import AssembledUnit, UnitAssembler
from duplexkit.protocol.audio import EncodedAudio, encode_audio, encode_base64_audio
from duplexkit.protocol.units import UnitGrid
from duplexkit.protocol.wire import parse_client_event

MODEL_RATE = 16_000
JPEG = b"\xff\xd8\xff\xe0" + bytes(12)


def _noise(ms: int, rate: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, ms * rate // 1000).astype(np.float32)


def _pieces(signal: np.ndarray, piece: int) -> list[np.ndarray]:
    return [signal[i : i + piece] for i in range(0, len(signal), piece)]


def _feed(assembler: UnitAssembler, pieces: list[np.ndarray], rate: int) -> list[AssembledUnit]:
    units: list[AssembledUnit] = []
    for piece in pieces:
        units += assembler.push(piece, rate)
    return units


def _spans(units: list[AssembledUnit]) -> list[tuple[float, float, int, bool]]:
    return [(u.start_ms, u.end_ms, len(u.samples), u.final) for u in units]


# --- the grid ---------------------------------------------------------------------------------------


def test_units_close_every_chunk_period() -> None:
    assembler = UnitAssembler(UnitGrid(200), MODEL_RATE)
    signal = _noise(1000, MODEL_RATE)
    units = assembler.push(signal, MODEL_RATE)
    assert _spans(units) == [(k * 200.0, (k + 1) * 200.0, 3200, False) for k in range(5)]
    assert np.array_equal(np.concatenate([u.samples for u in units]), signal)
    assert assembler.buffered_samples == 0


def test_an_append_that_does_not_reach_a_boundary_closes_no_unit() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    assert assembler.push(_noise(999, MODEL_RATE), MODEL_RATE) == []
    assert assembler.buffered_samples == 999 * 16
    assert assembler.media_ms == pytest.approx(999.0)
    [unit] = assembler.push(_noise(1, MODEL_RATE), MODEL_RATE)
    assert (unit.start_ms, unit.end_ms) == (0.0, 1000.0)


def test_the_first_unit_may_close_late_on_a_1030_ms_grid() -> None:
    assembler = UnitAssembler(UnitGrid(1000, 1030), MODEL_RATE)
    units = _feed(assembler, _pieces(_noise(2500, MODEL_RATE), 320), MODEL_RATE)
    units.append(assembler.flush())
    assert _spans(units) == [
        (0.0, 1030.0, 16_480, False),
        (1030.0, 2030.0, 16_000, False),
        (2030.0, 2500.0, 7_520, True),
    ]


@settings(max_examples=40, deadline=None)
@given(
    rate=st.sampled_from([16_000, 24_000]),
    period=st.sampled_from([200, 1000]),
    cuts=st.sets(st.integers(1, 2299), max_size=25),
)
def test_units_do_not_depend_on_how_appends_are_chunked(rate: int, period: int, cuts: set[int]) -> None:
    signal = _noise(2300, rate)
    bounds = [0, *sorted(c * rate // 1000 for c in cuts), len(signal)]
    pieces = [signal[a:b] for a, b in itertools.pairwise(bounds)]

    whole = UnitAssembler(UnitGrid(period), MODEL_RATE)
    expected = [*whole.push(signal, rate), whole.flush()]
    chunked = UnitAssembler(UnitGrid(period), MODEL_RATE)
    actual = [*_feed(chunked, pieces, rate), chunked.flush()]

    assert _spans(actual) == _spans(expected)
    for got, want in zip(actual, expected, strict=True):
        assert np.array_equal(got.samples, want.samples)


@settings(max_examples=40, deadline=None)
@given(
    rate=st.sampled_from([16_000, 24_000]),
    fmt=st.sampled_from(["pcm16", "pcm_f32le", "g711_ulaw"]),
    cuts=st.sets(st.integers(1, 1199), max_size=12),
    clear_at=st.integers(0, 14),
)
def test_a_payload_in_its_wire_encoding_gives_the_units_its_decoded_samples_give(
    rate: int, fmt: Any, cuts: set[int], clear_at: int
) -> None:
    """What the engine pushes (the append's payload, converted into the unit buffer) against the float
    samples it decodes to, on a 200 ms grid, with a clear and a rate change on the way."""
    signal = _noise(1200, rate)
    bounds = [0, *sorted(c * rate // 1000 for c in cuts), len(signal)]
    payloads = [EncodedAudio(encode_audio(signal[a:b], fmt), fmt) for a, b in itertools.pairwise(bounds)]
    encoded, decoded = UnitAssembler(UnitGrid(200), MODEL_RATE), UnitAssembler(UnitGrid(200), MODEL_RATE)
    got: list[AssembledUnit] = []
    want: list[AssembledUnit] = []
    for i, payload in enumerate([*payloads, *payloads]):
        in_rate = rate if i < len(payloads) else MODEL_RATE
        got += encoded.push(payload, in_rate)
        want += decoded.push(payload.decode(), in_rate)
        if i == clear_at:
            encoded.clear()
            decoded.clear()
    got.append(encoded.flush())
    want.append(decoded.flush())
    assert _spans(got) == _spans(want)
    for a, b in zip(got, want, strict=True):
        assert a.samples.dtype == np.float32 and np.array_equal(a.samples, b.samples)


def test_a_unit_handed_out_keeps_its_samples_whatever_comes_after() -> None:
    """Units are views of the assembler's buffer: later input, a clear or a commit never writes behind a
    cut."""
    assembler = UnitAssembler(UnitGrid(80), MODEL_RATE)
    signal = _noise(3000, MODEL_RATE)
    units = _feed(assembler, _pieces(signal[:20_000], 1280), MODEL_RATE)
    kept = [u.samples.copy() for u in units]
    assembler.push(signal[20_000:20_500], MODEL_RATE)
    assembler.clear()
    units += _feed(assembler, _pieces(signal[20_500:], 700), MODEL_RATE)
    units.append(assembler.flush())
    assert len(units) > 30
    for unit, before in zip(units, kept, strict=False):
        assert np.array_equal(unit.samples, before)


# --- resampling -------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [8_000, 24_000, 44_100, 48_000])
def test_input_at_another_rate_is_resampled_to_exact_unit_sizes(rate: int) -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    units = _feed(assembler, _pieces(_noise(2500, rate), rate // 50), rate)  # 20 ms appends
    units.append(assembler.flush())
    assert _spans(units) == [
        (0.0, 1000.0, 16_000, False),
        (1000.0, 2000.0, 16_000, False),
        (2000.0, 2500.0, 8_000, True),
    ]
    assert all(u.samples.dtype == np.float32 for u in units)


def test_resampled_units_carry_the_resampled_signal() -> None:
    t = np.arange(24_000 * 2) / 24_000
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    units = [*_feed(assembler, _pieces(tone, 480), 24_000), assembler.flush()]
    out = np.concatenate([u.samples for u in units])
    expected = (0.5 * np.sin(2 * np.pi * 440 * np.arange(32_000) / 16_000)).astype(np.float32)
    assert len(out) == 32_000
    assert np.max(np.abs(out[2000:30_000] - expected[2000:30_000])) < 1e-2


# --- commit and clear -------------------------------------------------------------------------------


def test_a_commit_flushes_the_residual_as_a_final_unit_and_the_grid_stays_on_the_media_clock() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    assert len(assembler.push(_noise(2400, MODEL_RATE), MODEL_RATE)) == 2
    residual = assembler.flush()
    assert _spans([residual]) == [(2000.0, 2400.0, 6_400, True)]
    [next_unit] = assembler.push(_noise(600, MODEL_RATE), MODEL_RATE)
    assert _spans([next_unit]) == [(2400.0, 3000.0, 9_600, False)]


def test_a_commit_with_nothing_buffered_flushes_an_empty_final_unit() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    assembler.push(_noise(1000, MODEL_RATE), MODEL_RATE)
    assert _spans([assembler.flush()]) == [(1000.0, 1000.0, 0, True)]


def test_a_commit_of_resampled_input_pays_back_the_resampler_lag() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    assembler.push(_noise(300, 24_000), 24_000)
    assert assembler.buffered_samples < 4_800  # soxr holds back its filter delay
    residual = assembler.flush()
    assert _spans([residual]) == [(0.0, 300.0, 4_800, True)]
    assert assembler.buffered_samples == 0


def test_clear_drops_buffered_input_but_keeps_the_media_clock() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    assembler.push(_noise(500, MODEL_RATE), MODEL_RATE, (JPEG,))
    assembler.clear()
    assert assembler.buffered_samples == 0
    assert assembler.media_ms == pytest.approx(500.0)
    [unit] = assembler.push(_noise(500, MODEL_RATE), MODEL_RATE)
    assert _spans([unit]) == [(500.0, 1000.0, 8_000, False)]
    assert unit.frames == ()


def test_a_rate_change_mid_stream_keeps_the_grid() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    units = assembler.push(_noise(600, 24_000), 24_000)
    units += assembler.push(_noise(400, MODEL_RATE), MODEL_RATE)
    units += assembler.push(_noise(1000, MODEL_RATE), MODEL_RATE)
    assert _spans(units)[:1] == [(0.0, 1000.0, 16_000, False)]
    assert _spans([*units, assembler.flush()])[-1][1] == pytest.approx(2000.0)


# --- video frames -----------------------------------------------------------------------------------


def test_frames_ride_with_the_unit_their_append_closes() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    closed: list[AssembledUnit] = []
    for k in range(8):  # 250 ms appends: appends 3 and 7 close units 0 and 1
        frames = (b"frame%d" % k,) if k in (3, 7) else ()
        closed += assembler.push(_noise(250, MODEL_RATE), MODEL_RATE, frames)
    assert [u.frames for u in closed] == [(b"frame3",), (b"frame7",)]


def test_a_frame_on_an_append_that_closes_no_unit_rides_with_the_next_unit_to_close() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    assert assembler.push(_noise(400, MODEL_RATE), MODEL_RATE, (b"early",)) == []
    [unit] = assembler.push(_noise(600, MODEL_RATE), MODEL_RATE, (b"closing",))
    assert unit.frames == (b"early", b"closing")
    assert assembler.flush().frames == ()


def test_frames_of_a_residual_ride_with_the_final_unit() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    assembler.push(_noise(300, MODEL_RATE), MODEL_RATE, (b"last",))
    assert assembler.flush().frames == (b"last",)


def test_frames_ride_with_the_unit_their_append_closes_when_input_is_resampled() -> None:
    assembler = UnitAssembler(UnitGrid(1000), MODEL_RATE)
    closed: list[AssembledUnit] = []
    for k in range(3):  # each 1000 ms append at 24 kHz closes unit k on the media clock
        closed += assembler.push(_noise(1000, 24_000), 24_000, (b"frame%d" % k,))
    closed.append(assembler.flush())
    assert [u.frames for u in closed[:3]] == [(b"frame0",), (b"frame1",), (b"frame2",)]


# --- through the engine session ---------------------------------------------------------------------


def _session(**config: Any) -> EngineSession:
    engine = EngineSession("sess_test", EngineConfig(model="scripted", **config))
    engine.start(0.0)
    return engine


def _append(engine: EngineSession, samples: np.ndarray, **fields: Any) -> Any:
    event = {"type": "input_audio_buffer.append", "audio": encode_base64_audio(samples, "pcm16"), **fields}
    return engine.handle(parse_client_event(json.dumps(event)), 0.0)


def test_a_session_cuts_units_on_its_configured_chunk_period() -> None:
    engine = _session(chunk_period_ms=200)
    units = _append(engine, np.zeros(16_000, np.float32)).units
    assert [u.index for u in units] == [0, 1, 2, 3, 4]
    assert [(u.start_ms, u.end_ms) for u in units] == [(k * 200.0, (k + 1) * 200.0) for k in range(5)]
    assert all(len(u.samples) == 3200 and u.sample_rate_hz == MODEL_RATE for u in units)


def test_a_session_on_a_1030_ms_grid_advertises_and_cuts_it() -> None:
    engine = EngineSession("sess_test", EngineConfig(model="scripted", first_unit_ms=1030))
    [created] = engine.start(0.0).events
    assert created.session.capabilities.first_unit_ms == 1030
    [unit] = _append(engine, np.zeros(16_480, np.float32)).units
    assert (unit.end_ms, len(unit.samples)) == (1030.0, 16_480)


def test_a_session_resamples_an_append_that_states_its_rate() -> None:
    engine = _session()
    units = _append(engine, np.zeros(60_000, np.float32), sample_rate_hz=24_000).units
    commit = engine.handle(parse_client_event('{"type": "input_audio_buffer.commit"}'), 0.0)
    units += commit.units
    assert [(u.start_ms, u.end_ms, len(u.samples), u.final) for u in units] == [
        (0.0, 1000.0, 16_000, False),
        (1000.0, 2000.0, 16_000, False),
        (2000.0, 2500.0, 8_000, True),
    ]


def test_a_session_resamples_input_at_the_rate_set_by_session_update() -> None:
    engine = _session()
    engine.handle(
        parse_client_event('{"type":"session.update","session":{"input_sample_rate_hz":24000}}'), 0.0
    )
    [unit] = _append(engine, np.zeros(36_000, np.float32)).units
    assert (unit.end_ms, len(unit.samples)) == (1000.0, 16_000)


def test_frames_reach_the_model_only_when_it_accepts_video() -> None:
    frame = base64.b64encode(JPEG).decode()
    with_video = _session(accepts_video=True)
    [unit] = _append(with_video, np.zeros(16_000, np.float32), video_frames=[frame]).units
    assert unit.frames == (JPEG,)
    without_video = _session()
    [unit] = _append(without_video, np.zeros(16_000, np.float32), video_frames=[frame]).units
    assert unit.frames == ()


@pytest.mark.parametrize(("grid", "append_ms"), [(UnitGrid(1000, 1030), 200), (UnitGrid(1000), 300)])
def test_frame_k_reaches_unit_k_when_appends_do_not_divide_the_units(grid: UnitGrid, append_ms: int) -> None:
    """The client's rule: frame k rides the append that closes unit k, wherever in it the boundary falls."""
    assembler = UnitAssembler(grid, 16_000)
    units = []
    for i in range(20):
        closes = grid.units_closed_between(i * append_ms, (i + 1) * append_ms)
        frames = tuple(f"frame{k}".encode() for k in closes)
        units += assembler.push(np.zeros(16 * append_ms, np.float32), 16_000, frames)
    assert len(units) >= 3
    assert [u.frames for u in units] == [(f"frame{k}".encode(),) for k in range(len(units))]


def test_a_commit_whose_residual_ends_past_a_units_end_leaves_the_next_unit_whole() -> None:
    """Found by the engine fuzzer (tests/fuzz/test_engine_fuzz.py): 3 s at 8 kHz, a few samples at 48 kHz
    and 1 s at 24 kHz, each rate change flushing the last resampler's tail, then a commit: the residual
    ended 2 samples past the 4 s unit end, and the next append cut a unit of -2 samples, which corrupted
    the buffer (a later append raised ValueError out of the engine: the session ended `internal_error`)."""
    grid = UnitGrid(80, None)
    assembler = UnitAssembler(grid, 16_000)
    assembler.push(np.zeros(24_000, np.float32), 8_000)
    assembler.push(np.zeros(7, np.float32), 48_000)
    assembler.push(np.zeros(24_000, np.float32), 24_000)
    final = assembler.flush()
    assert final.final and final.end_ms > 4000.0  # past the 4 s unit's end
    units = [u for _ in range(20) for u in assembler.push(np.zeros(160, np.float32), 16_000)]
    assert units and all(len(u.samples) > 0 for u in units)
    assert units[0].start_ms == final.end_ms and units[0].end_ms == 4080.0
    assert all(b.start_ms == a.end_ms for a, b in itertools.pairwise(units))


def test_a_commit_on_a_units_end_makes_no_empty_unit_after_it() -> None:
    assembler = UnitAssembler(UnitGrid(80, None), 16_000)
    assembler.push(np.zeros(24 * 80, np.float32), 24_000)  # 80 ms at 24 kHz: held by the resampler
    assert len(assembler.flush().samples) == 1280  # the whole first unit, as the final one
    [unit] = assembler.push(np.zeros(1280, np.float32), 16_000)
    assert (unit.start_ms, unit.end_ms, len(unit.samples)) == (80.0, 160.0, 1280)
