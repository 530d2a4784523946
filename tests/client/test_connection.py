"""build_url and ServerCapabilities: where the client connects and what it assumes about units."""

from __future__ import annotations

import pytest

from duplexkit.client import ServerCapabilities, build_url
from duplexkit.protocol.units import UnitGrid


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://host:8000", "ws://host:8000/v1/realtime?duplex=1&autostart=0"),
        ("https://host/", "wss://host/v1/realtime?duplex=1&autostart=0"),
        ("ws://host:1/v1/realtime", "ws://host:1/v1/realtime?duplex=1&autostart=0"),
        ("wss://host/v1/duplex?token=a&autostart=1", "wss://host/v1/duplex?token=a&duplex=1&autostart=0"),
    ],
)
def test_build_url_maps_the_scheme_adds_the_path_and_our_query(url: str, expected: str) -> None:
    assert build_url(url) == expected


def test_build_url_names_the_model_when_given() -> None:
    assert build_url("http://h:1", model="omni") == "ws://h:1/v1/realtime?duplex=1&autostart=0&model=omni"


@pytest.mark.parametrize("url", ["ftp://host", "host:8000", "http://", "localhost"])
def test_build_url_rejects_what_is_not_a_websocket_or_http_url(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        build_url(url)


def test_capabilities_are_read_from_the_session() -> None:
    session = {
        "capabilities": {"chunk_period_ms": 1000, "first_unit_ms": 1030, "output_sample_rate_hz": 48000}
    }
    caps = ServerCapabilities.from_session(session)
    assert caps.advertised
    assert caps.grid == UnitGrid(1000, 1030)
    assert (caps.input_sample_rate_hz, caps.output_sample_rate_hz) == (16_000, 48_000)


@pytest.mark.parametrize(
    "session",
    [{}, {"capabilities": None}, {"capabilities": {"chunk_period_ms": "1000", "first_unit_ms": -5}}, None],
)
def test_missing_or_malformed_capabilities_default_to_1000_ms_units(session: object) -> None:
    caps = ServerCapabilities.from_session(session)
    assert caps.chunk_period_ms == 1000
    assert caps.grid == UnitGrid(1000)
