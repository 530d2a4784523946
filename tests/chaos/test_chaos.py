"""The chaos suite at small counts (full counts: `benchmarks/chaos.py`; figures in docs/reliability.md)."""

from __future__ import annotations

from tests.chaos import scenarios


async def test_disconnects_mid_response_resume_with_nothing_lost_or_duplicated() -> None:
    report = await scenarios.disconnect_mid_response(4, seed=1)
    assert report.runs == 4
    assert report.faults_fired == 4 and report.resumed_sessions == 4
    assert report.failed_sessions == 0
    assert report.lost_events == 0 and report.duplicated_events == 0 and report.mismatched_events == 0
    assert report.input_mismatches == 0


async def test_fuzzed_client_events_never_crash_the_server_and_invalid_ones_get_coded_errors() -> None:
    report = await scenarios.fuzz_events(600, seed=2)
    assert report.frames == 600 and report.crashes == 0
    assert report.unanswered_invalid == 0 and report.uncoded_errors == 0 and report.internal_errors == 0
    assert set(report.by_kind) == set(scenarios.FUZZ_KINDS)
    assert sum(report.errors.values()) > 300  # most fuzzed frames are invalid, and each said so
