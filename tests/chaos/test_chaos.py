"""The chaos suite at small counts (full counts: `benchmarks/chaos.py`; figures in docs/reliability.md)."""

from __future__ import annotations

from tests.chaos import scenarios


async def test_disconnects_mid_response_resume_with_nothing_lost_or_duplicated() -> None:
    report = await scenarios.disconnect_mid_response(3, seed=1)
    assert report.runs == 3
    assert report.faults_fired == 3 and report.resumed_sessions == 3
    assert report.failed_sessions == 0
    assert report.lost_events == 0 and report.duplicated_events == 0 and report.mismatched_events == 0
    assert report.input_mismatches == 0


async def test_fuzzed_client_events_never_crash_the_server_and_invalid_ones_get_coded_errors() -> None:
    report = await scenarios.fuzz_events(600, seed=2)
    assert report.frames == 600 and report.crashes == 0
    assert report.unanswered_invalid == 0 and report.uncoded_errors == 0 and report.internal_errors == 0
    assert set(report.by_kind) == set(scenarios.FUZZ_KINDS)
    assert sum(report.errors.values()) > 300  # most fuzzed frames are invalid, and each said so


async def test_open_close_cycles_leave_tasks_fds_and_slots_as_they_were() -> None:
    report = await scenarios.open_close_cycles(12, warmup=3)
    assert report.completed + report.cancelled == 15 and report.failed == 0
    assert report.cancelled == report.kinds["cancelled_open"] == 5
    assert report.slots_in_use_after == 0
    # Nothing is left running but the test itself, and no descriptor more than after the warm-up. (Under
    # CI's load, warm-up tasks have outlived the baseline's settling and been gone by the end: counted
    # against the start, that read as fewer tasks at the end. Not understood yet; see docs/reliability.md.)
    assert report.end["tasks"] == 1 and report.end["fds"] <= report.start["fds"]
    assert report.end["rss_mib"] - report.start["rss_mib"] < scenarios.RSS_TOLERANCE_MIB


async def test_cancelling_the_lifecycle_anywhere_leaks_no_slot_task_or_response() -> None:
    report = await scenarios.cancellation_walk(8, loop_steps=12)
    assert report.points == 20 and report.failed == 0
    assert report.slots_in_use_after == 0 and report.leaked_tasks == 0
    assert report.orphaned_responses == 0 and report.unended_sessions == 0


async def test_a_faulty_model_session_fails_only_its_own_replies() -> None:
    report = await scenarios.model_faults(1, step_deadline_s=0.2)
    sessions = report.sessions
    assert sessions["healthy"] == {"errors": [], "responses": ["completed"], "closed_cleanly": 1}
    assert sessions["raise"]["errors"] == ["model_step_failed"]
    assert sessions["hang"]["errors"] == ["model_step_timeout"]
    assert sessions["budget"]["errors"] == ["model_step_failed"]
    assert all(s["closed_cleanly"] == 1 for s in sessions.values())  # each session outlived its fault


async def test_a_stalled_reader_is_dropped_and_a_healthy_session_beside_it_is_served() -> None:
    report = await scenarios.slow_reader()
    assert report.dropped_reason == "client_too_slow"
    assert report.healthy["appends"] == 10 and report.healthy["ttft_p50_ms"] is not None


async def test_at_twice_capacity_refusals_are_retryable_and_the_admitted_sessions_are_served() -> None:
    report = await scenarios.overload(capacity=2, seconds=1.0)
    assert report.refusals > 0 and report.retryable_refusals == report.refusals
    assert report.baseline["appends"] == report.overload["appends"] == 10
    assert report.overload["ttft_p50_ms"] is not None  # every admitted session got its reply


async def test_clients_closing_cleanly_anywhere_free_their_slots_at_once() -> None:
    report = await scenarios.clean_closes(12, seed=3)
    assert report.sessions == 12 and set(report.by_dialect) == set(scenarios.CLEAN_CLOSE_DIALECTS)
    assert report.not_released == 0 and report.slots_in_use_after == 0  # a 30 s grace held none of them


async def test_random_clients_at_every_door_get_coded_answers_and_leave_no_slot_or_failed_task() -> None:
    report = await scenarios.door_fuzz(32, seed=5)
    assert report.clients == 32 and set(report.by_door) == set(scenarios.DOORS)
    assert report.failed_clients == 0
    assert report.unanswered_invalid == 0 and report.uncoded_errors == 0 and report.internal_errors == 0
    assert report.overdue_sessions == 0 and report.leaked_slots == 0 and report.task_failures == 0
    assert sum(report.messages.values()) > 100 and sum(report.errors.values()) > 10
