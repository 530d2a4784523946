"""Hostile input for the fuzzers: frames that are not JSON, JSON that is absurd, text past the bounds."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import strategies as st


def examples(ci: int) -> int:
    """The examples a fuzzer runs: `ci` in the suite, `DUPLEXKIT_FUZZ_SCALE` times as many on demand
    (`benchmarks/chaos.py --only protocol_fuzz` sets it)."""
    return max(1, round(ci * float(os.environ.get("DUPLEXKIT_FUZZ_SCALE", "1"))))


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)


def absurd_json() -> st.SearchStrategy[Any]:
    """JSON values of any shape: odd scalars, short nestings, objects with any keys."""
    return st.recursive(
        _SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(
                st.sampled_from(["type", "event_id", "audio", "item", "session", "x"]), inner, max_size=4
            ),
        ),
        max_leaves=12,
    )


def _deep(depth: int) -> str:
    return '{"type": "session.update", "session": ' + "[" * depth + "]" * depth + "}"


def junk_frames() -> st.SearchStrategy[str | bytes]:
    """Frames no parser may accept: bytes, cut JSON, non-finite numbers, nesting past the bound, a
    frame past the size bound, and random text."""
    return st.one_of(
        st.binary(max_size=64),
        st.text(max_size=64),
        st.sampled_from(
            [
                "",
                "{",
                '{"type": "session.update"',
                '{"type": NaN}',
                '{"type": "input_audio_buffer.append", "audio": Infinity}',
                "[]",
                "null",
                "5",
                '"type"',
                '{"no_type": 1}',
                '{"type": 5}',
                '{"type": null}',
                '{"type": "session.updat"}',
                '{"type": "\\ud800"}',
                b"\xff\xfe\x00",
                _deep(201),
                _deep(5_000),
            ]
        ),
        st.sampled_from([16 * 1024 * 1024]).map(
            lambda n: '{"type": "session.heartbeat", "pad": "' + "x" * n + '"}'
        ),
    )
