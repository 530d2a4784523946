"""`response.listen` written by hand (`wire._listen_json`) against the general serialiser.

Whatever listen event the stamper is given, in any dialect, its text is byte for byte what pydantic's
`model_dump_json(exclude_none=True)` writes under the dialect's name: ids with any characters, every
reason, numbers of any magnitude (the hand-written path declines those the serialiser spells its own way),
integers where a float is declared, extra fields.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.protocol import server_events as se
from duplexkit.protocol import wire
from duplexkit.protocol.dialects import Dialect, wire_name
from duplexkit.protocol.wire import ServerEventStamper

_ids = st.one_of(st.none(), st.text(max_size=12), st.from_regex(r"resp_[0-9a-f]{12}", fullmatch=True))
_ms = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=0, max_value=1e7),
    st.integers(min_value=0, max_value=10**7).map(float),
    st.sampled_from([0.0, -0.0, 1e-4, 9.99e-5, 1e15, 1e16, 123456789.0625]),
)


def _general(event: se.ResponseListen, dialect: Dialect) -> str:
    """What the stamper wrote before the hand-written path: pydantic's text, the name swapped."""
    text = event.model_dump_json(exclude_none=True)
    return text.replace('"response.listen"', json.dumps(wire_name("response.listen", dialect)), 1)


@settings(max_examples=400, deadline=None)
@given(
    dialect=st.sampled_from(list(Dialect)),
    response_id=_ids,
    info_id=_ids,
    reason=st.sampled_from(get_args(se.ListenReason)),
    model_listen=st.booleans(),
    unit_end_ms=_ms,
    extra=st.one_of(st.none(), st.dictionaries(st.sampled_from(["note", "x"]), st.integers(), max_size=1)),
)
def test_listen_text_is_the_serialisers(
    dialect: Dialect,
    response_id: str | None,
    info_id: str | None,
    reason: se.ListenReason,
    model_listen: bool,
    unit_end_ms: float | None,
    extra: dict[str, Any] | None,
) -> None:
    event = se.ResponseListen(
        response_id=response_id,
        unit_end_ms=unit_end_ms,
        response=se.ListenInfo(
            id=info_id, metadata=se.ListenMetadata(reason=reason, model_listen=model_listen)
        ),
        **(extra or {}),
    )
    text = ServerEventStamper(dialect).encode(event)
    assert text == _general(event, dialect)
    assert json.loads(text)["server_event_seq"] == 1
    plain = unit_end_ms is None or unit_end_ms == 0 or 1e-4 <= abs(unit_end_ms) < 1e15
    if plain and not extra:  # the common event does take the hand-written path
        assert wire._listen_json(event, wire_name("response.listen", dialect)) == text


def test_integer_milliseconds_are_written_as_the_model_holds_them() -> None:
    """A model built without validation may hold an int where a float is declared: the serialiser's
    spelling wins (the hand-written path declines)."""
    event = se.ResponseListen.model_construct(
        unit_end_ms=80,
        response=se.ListenInfo(metadata=se.ListenMetadata(reason="buffering", model_listen=False)),
    )
    assert ServerEventStamper().encode(event) == _general(event, Dialect.GA)
