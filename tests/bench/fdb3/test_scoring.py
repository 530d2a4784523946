"""FDB-v3's scoring rules held to hand-computed examples (its own dry-run cases among them), and a folder of
FDB-v3 results scored by duplexkit and by a stand-in for FDB-v3's scorers (`official_scorers`) to the same
numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from duplexkit.bench.fdb3 import BENCHMARK
from duplexkit.bench.fdb3 import metrics as m
from duplexkit.bench.fdb3.judge import PROMPT_SHA256, ArgumentJudge, parse_verdict, prompt_digest
from duplexkit.bench.judge import JudgeSettings
from duplexkit.client.wavfile import write_wav
from tests.bench.fdb.conftest import FakeOpenAI
from tests.bench.fdb.conftest import fake_openai as fake_openai  # the fixture, by its name
from tests.bench.fdb3.official_scorers import evaluate

LONDON = {"function": "search_flights", "args": {"destination": "London", "date": "August 20"}}
ALICE = {"function": "book_flight", "args": {"passenger_name": "Alice"}}
ISO_LONDON = {"function": "search_flights", "args": {"destination": "london", "date": "2026-08-20"}}


def _score(expected: list[dict[str, Any]], actual: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    selection = m.tool_selection(expected, actual)
    pairs = m.pair_calls(expected, actual)
    verdicts = [None if got is None else m.exact_match(w["args"], got["args"]) for w, got in pairs]
    argument = m.argument_accuracy(pairs, verdicts)
    return selection, argument, m.strict_pass(expected, selection, argument)


def test_fdb3_dry_run_cases_by_hand() -> None:
    # 1: both tools, the date formatted differently: the exact rule (no judge) fails that argument
    selection, argument, passed = _score([LONDON, ALICE], [ISO_LONDON, ALICE])
    assert (selection["score"], argument["score"]) == (1.0, 0.5)
    assert passed["failure_reason"] == "Wrong arguments for: ['search_flights']"
    # 2: book_flight missing: recall 1/2, precision 1/1, F1 = 2 * 0.5 / 1.5
    selection, argument, passed = _score([LONDON, ALICE], [{**LONDON}])
    assert (selection["recall"], selection["precision"], selection["score"]) == (0.5, 1.0, 0.667)
    assert argument["score"] == 0.5 and passed["failure_reason"] == "Missing tools: ['book_flight']"
    # 4: an extra call: precision 2/3, F1 = 2 * (2/3) / (5/3) = 0.8
    extra = {"function": "update_identity_doc", "args": {"doc_type": "passport"}}
    selection, argument, passed = _score([LONDON, ALICE], [LONDON, ALICE, extra])
    assert (selection["precision"], selection["score"], argument["score"]) == (0.667, 0.8, 1.0)
    assert not passed["passed"] and "Unexpected tools: ['update_identity_doc']" in passed["failure_reason"]
    # 3: the agent spoke 2 s before the user finished: an interruption
    latency = m.response_latency({"user_speech_end_rel": 10.0, "audio_agent_speech_start": 8.0})
    assert latency["agent_response_latency_s"] == -2.0 and latency["is_interruption"]


def test_multisets_references_and_empty_calls() -> None:
    track = {"function": "track_order", "args": {"order_id": "BOB12"}}
    selection, _, passed = _score([track, track], [track])
    assert (selection["recall"], selection["precision"], selection["unmatched_expected"]) == (
        0.5,
        1.0,
        ["track_order"],
    )
    assert not passed["passed"]
    # a $-reference accepts any value present; numbers compare as they are (1 is not "1")
    cart = {
        "function": "add_to_cart",
        "args": {"product_id": "$RESULT_0.products[0].product_id", "quantity": 1},
    }
    assert m.exact_match(cart["args"], {"product_id": "P1A2B", "quantity": 1}) == (
        True,
        "All arguments match",
    )
    assert not m.exact_match(cart["args"], {"product_id": "P1A2B", "quantity": "1"})[0]
    assert not m.exact_match(cart["args"], {"quantity": 1})[0]  # a missing argument
    assert m.exact_match({"doc_type": "driver_license"}, {"doc_type": "Driver License "})[0]
    selection, argument, passed = _score([], [])
    assert (selection["score"], argument["score"], passed["passed"]) == (1.0, 1.0, True)
    # no call at all where one was expected: F1 0 (recall 0, precision 1 by upstream's convention)
    selection, argument, _ = _score([track], [])
    assert (selection["recall"], selection["precision"], selection["score"], argument["score"]) == (
        0,
        1,
        0,
        0,
    )


def test_user_speech_end_and_latency_breakdown() -> None:
    assert m.user_speech_end([[0.5, 1.0], [1.2, 2.0], [4.5, 5.0]]) == 2.0  # the first gap over 2 s
    assert m.user_speech_end([[0.5, 1.0], [2.5, 3.0]]) == 3.0
    assert m.user_speech_end([]) == 0.0
    result = {
        "user_speech_end_rel": 3.0,
        "audio_agent_speech_start": 3.4,
        "asr_chunks": [{"timestamp": [3.4, 3.9]}, {"timestamp": [5.1, 6.0]}],
        "actual_tool_calls": [{"timestamp_start": 3.2, "timestamp_end": 4.8}],
    }
    assert m.latency_breakdown(result) == {
        "first_response_s": 0.4,
        "tool_call_s": 0.2,
        "task_completion_s": 2.1,  # the first speech after the call returned at 4.8
    }
    assert m.latency_breakdown({"user_speech_end_rel": 0}) == dict.fromkeys(
        ("first_response_s", "tool_call_s", "task_completion_s")
    )


def test_aggregates_exclude_interruptions_and_count_silence() -> None:
    def row(latency: float | None, taken: bool, f1: float, passed: bool) -> dict[str, Any]:
        timing = (
            {"available": False}
            if latency is None
            else {"available": True, "agent_response_latency_s": latency, "is_interruption": latency < 0}
        )
        return {
            "domain": "d",
            "difficulty": "easy",
            "turn_take_success": taken,
            "metrics": {"tool_selection_acc": {"score": f1}, "argument_acc": {"score": f1}},
            "latency": timing,
            "passed": passed,
            "failure_reason": "" if passed else "Missing tools: ['x']",
            "num_tools": 1,
            "disfluency": ["FILLER"],
            "state_rollback": passed,
        }

    rows = [row(2.5, True, 1.0, True), row(-2.0, True, 0.5, False), row(1.5, True, 1.0, True)]
    rows.append(row(None, False, 0.0, False))
    report = m.evaluation_report(rows)
    assert report["turn_taking"]["turn_take_rate"] == 0.75
    assert report["by_metric"]["tool_selection_acc"] == round(2.5 / 3, 3)  # turn-taken only
    assert report["by_metric"]["tool_selection_acc_all"] == round(2.5 / 4, 3)
    latency = report["latency"]
    assert (latency["interruption_rate"], latency["avg_response_latency_s"]) == (0.333, 2.0)
    assert latency["std_response_latency_s"] == 0.707  # sqrt((0.25 + 0.25) / 1)
    passing = m.pass_rate_report(rows)
    assert (passing["overall_pass_rate"], passing["failure_breakdown"]["wrong_tools"]) == (0.5, 2)
    assert passing["by_state_rollback"] == {"with_rollback": 1.0, "without_rollback": 0.0}
    assert passing["by_disfluency_feature"] == {"FILLER": 0.5}


def test_judge_prompt_is_pinned_and_replies_read_leniently() -> None:
    assert prompt_digest() == PROMPT_SHA256
    assert parse_verdict('```json\n{"correct": true, "explanation": "ok"}\n```') == (True, "ok")
    assert parse_verdict('Sure. {"correct": false}') == (False, "")
    with pytest.raises(ValueError):
        parse_verdict('{"correct": "yes"}')
    judge = ArgumentJudge.over(
        base_url="http://127.0.0.1:9/v1", model="m", api_key="k", concurrency=1, timeout_s=1
    )
    assert (judge.chat.seed, judge.chat.temperature, judge.chat.max_tokens) == (0, 0.0, 200)


RESULTS: dict[str, tuple[list[dict[str, Any]], str, float | None]] = {
    # example → (its actual calls, what the agent said, when it first spoke)
    "travel_09": ([ISO_LONDON, ALICE], "Booked.", 12.5),
    "travel_10": (
        [{"function": "search_flights", "args": {"destination": "London", "date": "August 20"}}],
        "Found",
        8.0,
    ),
    "finance_03": ([], "", None),
}


def _released_folder(root: Path) -> Path:
    """FDB-v3's layout with its runner's result files for a provider, and the scenario file beside."""
    data = root / "fdb_v3_data_released"
    scenarios = []
    for index, (example, (calls, said, start)) in enumerate(RESULTS.items()):
        scenarios.append(
            {
                "id": example,
                "domain": "travel_identity" if example.startswith("travel") else "finance_billing",
                "difficulty": "medium",
                "title": example,
                "expected_tool_calls": [LONDON, ALICE],
                "disfluency_features": ["SELF_CORRECTION"],
                "state_rollback_test": index == 0,
            }
        )
        folder = data / f"{example}_{'ab' * 12}"
        folder.mkdir(parents=True)
        write_wav(folder / "input.wav", np.zeros(1600, dtype=np.float32), 16_000)
        result = {
            "example_id": example,
            "status": "completed",
            "transcript": said,
            "asr_chunks": [{"text": said, "timestamp": [start, start + 1]}] if start else [],
            "user_speech_end_rel": 10.0,
            "actual_tool_calls": calls,
        }
        if start is not None:
            result["audio_agent_speech_start"] = start
        (folder / "result_gpt_realtime.json").write_text(json.dumps(result))
    (root / "benchmark_data_v2.json").write_text(json.dumps({"benchmark_name": "t", "scenarios": scenarios}))
    return data


async def test_a_folder_of_fdb3_results_scores_as_fdb3s_scorers_score_it(tmp_path: Path) -> None:
    data = _released_folder(tmp_path)
    warnings: list[str] = []
    scored = await BENCHMARK.folder_scorer.score(  # type: ignore[union-attr]
        data,
        JudgeSettings(),
        {"provider": "gpt_realtime"},
        allow_invalid_clock=False,
        warn=warnings.append,
    )
    assert scored.complete and not warnings
    ours = json.loads((data / "fdb3_scores.json").read_text())
    theirs = evaluate(tmp_path / "benchmark_data_v2.json", data, "gpt_realtime")
    by_metric, latency = ours["evaluation"]["by_metric"], ours["evaluation"]["latency"]
    assert theirs["scored"] == len(ours["samples"]) == 3
    assert (theirs["turn_take_rate"], theirs["tool_selection_acc"], theirs["argument_acc"]) == (
        ours["evaluation"]["turn_taking"]["turn_take_rate"],
        by_metric["tool_selection_acc"],
        by_metric["argument_acc"],
    )
    assert theirs["tool_selection_acc_all"] == by_metric["tool_selection_acc_all"]
    assert (theirs["interruption_rate"], theirs["avg_response_latency_s"]) == (
        latency["interruption_rate"],
        latency["avg_response_latency_s"],
    )
    assert theirs["overall_pass_rate"] == ours["pass_rate"]["overall_pass_rate"] == 0.0
    # hand-computed: F1 1.0 and 0.667 on the two examples that spoke; one interrupted (8.0 < 10.0)
    assert (by_metric["tool_selection_acc"], latency["interruption_rate"]) == (0.834, 0.5)
    assert (data / "gpt_realtime_pass_rate_report.json").is_file()
    assert "GPT-Realtime" in scored.text and "↑" in scored.text
    # a folder without the provider's results: each recording reported, nothing invented
    missing = await BENCHMARK.folder_scorer.score(  # type: ignore[union-attr]
        data, JudgeSettings(), {"provider": "grok"}, allow_invalid_clock=False, warn=warnings.append
    )
    assert not missing.complete and len(warnings) == 3 and "no_result" in warnings[0]


async def test_the_argument_judge_decides_through_an_openai_compatible_endpoint(
    tmp_path: Path,
    fake_openai: FakeOpenAI,
) -> None:
    def chat(body: dict[str, Any]) -> str:
        content = body["messages"][0]["content"]
        if "completed what the user asked" in content:  # response quality: the whole answer
            return (
                '{"correct": true, "explanation": "done"}' if '"Booked."' in content else '{"correct": false}'
            )
        sent = next(line for line in content.splitlines() if line.startswith("Arguments"))
        if "2026-08-20" in sent:  # rule 2: a date formatted differently is the same date
            return '```json\n{"correct": true, "explanation": "same date"}\n```'
        return "I cannot say."  # unreadable: the exact-match rule decides, and says so

    fake_openai.chat = chat
    data = _released_folder(tmp_path)
    settings = JudgeSettings(url=fake_openai.url, model="judge-x", concurrency=2)
    scored = await BENCHMARK.folder_scorer.score(  # type: ignore[union-attr]
        data, settings, {"provider": "gpt_realtime"}, allow_invalid_clock=False, warn=lambda _: None
    )
    scores = json.loads((data / "fdb3_scores.json").read_text())
    assert scores["judge"]["model"] == "judge-x" and "judge-x" in scored.text
    # travel_09 now passes: its ISO date was judged right; travel_10 still misses book_flight
    assert scores["pass_rate"]["overall_pass_rate"] == round(1 / 3, 3)
    details = {r["scenario_id"]: r["metrics"]["argument_acc"]["details"] for r in scores["samples"]}
    assert details["travel_09"][0]["explanation"] == "same date"
    assert details["travel_09"][1]["explanation"].startswith("judge reply unreadable")
    # response quality over the two examples that spoke (the silent one is 0 without asking the judge)
    assert scores["evaluation"]["by_metric"]["response_qual"] == 0.5
    requests = fake_openai.chat_requests
    assert len(requests) == 3 + 2  # one per (expected, actual) pair (2 + 1) and per spoken answer (2)
    assert {(r["seed"], r["temperature"], r["max_tokens"]) for r in requests} == {(0, 0.0, 200)}
