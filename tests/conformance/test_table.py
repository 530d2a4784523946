"""docs/protocol.md's "Tested against real clients" table is the matrix's own (`matrix.table`)."""

from __future__ import annotations

from pathlib import Path

from tests.conformance import matrix

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
START, END = "<!-- conformance-matrix: python -m tests.conformance.matrix -->", "<!-- /conformance-matrix -->"


def test_the_docs_table_is_the_matrix() -> None:
    text = DOC.read_text()
    body = text[text.index(START) + len(START) : text.index(END)].strip()
    assert body == matrix.table(), "regenerate it: python -m tests.conformance.matrix"


def test_every_cell_runs_or_says_why_not() -> None:
    counts = matrix.counts()
    assert sum(counts.values()) == len(matrix.CLIENTS) * len(matrix.MODELS) * len(matrix.PACINGS)
    params = [p for f in {c.file for c in matrix.CLIENTS} for p in matrix.cells(f)]
    assert len(params) == sum(counts.values())
    for param in params:
        for mark in param.marks:  # type: ignore[attr-defined]
            assert mark.name in ("skip", "xfail") and mark.kwargs["reason"]
    for client in matrix.CLIENTS:
        assert (Path(__file__).parent / client.file).exists()
        assert client.tools is None or (DOC.parents[1] / client.tools).exists()
