"""docs/protocol.md stays true to the protocol modules: every event, field and error code is documented where
a reader looks for it, and the error table agrees with the code table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from duplexkit.protocol import CLIENT_EVENT_TYPES, ERROR_SPECS, SERVER_EVENT_TYPES, ErrorCode
from duplexkit.protocol.server_events import MeasurementOrigin, ResponseRequestMetrics

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"
ENVELOPE_FIELDS = {"event_id", "server_event_seq", "type"}
CLIENT_PART = "Client → server events"
SERVER_PART = "Server → client events"


def _sections(text: str) -> dict[str, tuple[str, str]]:
    """`### heading` → (the `## part` it sits in, its body up to the next heading of level 2 or 3)."""
    sections: dict[str, tuple[str, str]] = {}
    part, heading, body = "", None, []
    for line in [*text.splitlines(), "## end"]:
        if line.startswith(("## ", "### ")):
            if heading is not None:
                assert heading not in sections, f"duplicate heading {heading!r}"
                sections[heading] = (part, "\n".join(body))
            heading, body = (line[4:].strip(), []) if line.startswith("### ") else (None, [])
            if line.startswith("## "):
                part = line[3:].strip()
        else:
            body.append(line)
    return sections


def _part(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"no '## {title}' section"
    return match.group(1)


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sections(doc: str) -> dict[str, tuple[str, str]]:
    return _sections(doc)


def _model_fields(event_model: type) -> list[str]:
    return sorted(set(event_model.model_fields) - ENVELOPE_FIELDS)  # type: ignore[attr-defined]


def _field_cells(body: str) -> str:
    """The first column of every table row in a section: where its fields are named."""
    return "\n".join(
        line.strip().strip("|").split("|")[0] for line in body.splitlines() if line.startswith("|")
    )


@pytest.mark.parametrize("event_type", sorted(CLIENT_EVENT_TYPES))
def test_client_event_has_its_own_section_listing_every_field(
    event_type: str, sections: dict[str, tuple[str, str]]
) -> None:
    heading = f"`{event_type}`"
    assert heading in sections, f"docs/protocol.md has no '### {heading}'"
    part, body = sections[heading]
    assert part == CLIENT_PART
    cells = _field_cells(body)
    missing = [name for name in _model_fields(CLIENT_EVENT_TYPES[event_type]) if f"`{name}`" not in cells]
    assert not missing, f"{event_type}: fields without a row in its section's table: {missing}"


@pytest.mark.parametrize("event_type", sorted(SERVER_EVENT_TYPES))
def test_server_event_has_its_own_section_listing_every_field(
    event_type: str, sections: dict[str, tuple[str, str]]
) -> None:
    heading = f"`{event_type}`"
    assert heading in sections, f"docs/protocol.md has no '### {heading}'"
    part, body = sections[heading]
    assert part == SERVER_PART
    cells = _field_cells(body)
    missing = [name for name in _model_fields(SERVER_EVENT_TYPES[event_type]) if f"`{name}`" not in cells]
    assert not missing, f"{event_type}: fields without a row in its section's table: {missing}"


def test_no_event_section_documents_an_event_that_does_not_exist(
    sections: dict[str, tuple[str, str]],
) -> None:
    documented = {
        heading.strip("`") for heading, (part, _) in sections.items() if part in (CLIENT_PART, SERVER_PART)
    }
    assert documented == set(CLIENT_EVENT_TYPES) | set(SERVER_EVENT_TYPES)


def _error_rows(doc: str) -> dict[str, list[str]]:
    rows = {}
    for line in _part(doc, "Error codes").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_error_table_lists_every_error_code_and_nothing_else(doc: str) -> None:
    assert set(_error_rows(doc)) == {code.value for code in ErrorCode}


@pytest.mark.parametrize("code", list(ErrorCode))
def test_error_table_row_agrees_with_the_code_table(code: ErrorCode, doc: str) -> None:
    error_type, retryable, when = _error_rows(doc)[code.value][:3]
    assert error_type == ERROR_SPECS[code].type
    assert retryable == ("yes" if ERROR_SPECS[code].retryable else "no")
    assert when, f"{code.value}: the 'when' column is empty"


def test_metrics_section_documents_every_metrics_field(doc: str) -> None:
    body = _part(doc, "Per-response metrics")
    names = set(ResponseRequestMetrics.model_fields) | set(MeasurementOrigin.model_fields)
    missing = sorted(name for name in names if not re.search(rf"\b{name}\b", body))
    assert not missing, f"metrics fields not documented: {missing}"
    assert '"server_monotonic_request_start"' in body
