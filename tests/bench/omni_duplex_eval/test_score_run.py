"""`score_run` with the LLM judge against a fake OpenAI-compatible judge on loopback."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from duplexkit.bench.judge import ChatClient, JudgeUnreachable, RunError, score_run
from duplexkit.bench.omni_duplex_eval import LLMJudge, load_protocol_dir
from duplexkit.bench.omni_duplex_eval.prompts import PLACEHOLDERS, PROMPT_VERSION, REQUIRED
from tests.bench.judge.conftest import (
    CONTENT,
    CORRECTION,
    REMINDER,
    TEMPORAL,
    FakeJudge,
    FakeSample,
    Reply,
    completion,
    error,
    image_count,
    is_follow_up,
    kind_of,
    make_judge,
    sentences,
    user_text,
    valid_replies,
    write_run_json,
    write_sample,
)

RTD = ("RTD_counting", "squares")


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _score_file(run: Path, split: str, sample_id: str) -> dict[str, Any]:
    result: dict[str, Any] = _read(run / "scores" / split / f"{sample_id}.json")
    return result


def _trace(run: Path, split: str, sample_id: str) -> list[dict[str, Any]]:
    path = run / "scores" / split / f"{sample_id}.trace.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    write_run_json(run_dir, "unused: samples are passed in")
    return run_dir


def _rtd_run(run: Path, video: bytes, *, duration: float = 12.0) -> list[FakeSample]:
    write_sample(
        run,
        *RTD,
        sentences(("A red square appears.", 4.0, 5.0), ("Okay.", 1.0, 1.2), ("Too late.", 14.0, 15.0)),
        duration=duration,
    )
    return [FakeSample(*RTD, video=video)]


async def test_an_rtd_sample_is_judged_by_the_rubric(
    fake_judge: FakeJudge, run: Path, video12: bytes
) -> None:
    rate_limited: list[str] = []

    def script(request: dict[str, Any]) -> Reply:
        text = user_text(request)
        if kind_of(request) == CONTENT:
            if not rate_limited:
                rate_limited.append(text)
                return error(429, "rate limited")
            return completion('{"content_score": 2.25, "reasoning": "fine",}')
        if '"Okay."' in text:
            return completion('{"temporal_score": 0, "is_relevant": 0, "reasoning": "filler"}')
        return completion('{"temporal_score": 3, "is_relevant": 1, "reasoning": "right",}')

    fake_judge.script = script
    judge = make_judge(fake_judge)
    summary = await score_run(run, judge, samples=_rtd_run(run, video12))
    await judge.aclose()

    temporal = fake_judge.of_kind(TEMPORAL)
    assert sorted(image_count(r) for r in temporal) == [1, 2]  # (0, 0.5) -> midpoint; (2, 3) -> both ends
    assert not any("Too late." in user_text(r) for r in temporal)  # window (12, 13) lies past the video
    red = next(r for r in temporal if "A red square" in user_text(r))
    assert "frames from 2.00 s to 3.00 s" in user_text(red)
    limited, content = fake_judge.of_kind(CONTENT)  # 429, then the retry succeeded
    assert limited == content and image_count(content) == 4  # 12 s: one per 3 s
    assert "[4.00 s] A red square appears." in user_text(content) and "- ref one\n- ref two" in user_text(
        content
    )

    record = _score_file(run, *RTD)
    assert record["status"] == "scored"
    assert record["scores"] == {"content_score": 2.25, "avg_temporal_score": 3.0}
    assert [s["valid"] for s in record["details"]["temporal"]["sentences"]] == [True, True, False]
    assert record["judge"] == {
        "kind": "llm",
        "model": "fake-judge",
        "url": fake_judge.url,
        "prompt_version": PROMPT_VERSION,
        "prompt_source": "duplexkit",
        "reminder_window_s": 10.0,
    }
    assert not (run / "scores" / RTD[0] / f"{RTD[1]}.trace.jsonl").exists()
    assert summary.rtd["mean_content_score"] == 2.25 and summary.rtd["mean_avg_temporal_score"] == 3.0
    assert summary.rtd["by_task"]["RTD_counting"]["scored"] == 1
    written = _read(run / "scores" / "summary.json")
    assert written["judge"]["url"] == fake_judge.url and written["complete"] is True
    assert written["coverage"] == {"total": 1, "scored": 1, "skipped": 0, "errors": 0, "cached": 0}


def _prose_then(first: str, kind: str = TEMPORAL) -> Any:
    def script(request: dict[str, Any]) -> Reply:
        if kind_of(request) == kind and not is_follow_up(request):
            return completion(first)
        return valid_replies(request)

    return script


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        ("The sentence matches the frames well.", "the reply contains no JSON object"),
        ('{"temporal_score": "high", "is_relevant": 1}', 'the field temporal_score is "high", not a number'),
    ],
)
async def test_an_unparseable_reply_gets_one_follow_up_saying_why(
    fake_judge: FakeJudge, run: Path, video12: bytes, first: str, reason: str
) -> None:
    fake_judge.script = _prose_then(first)
    judge = make_judge(fake_judge)
    await score_run(run, judge, samples=_rtd_run(run, video12))
    await judge.aclose()

    follow_ups = [r for r in fake_judge.requests if is_follow_up(r)]
    assert len(follow_ups) == 2  # one per temporal call, never more
    follow_up = user_text(follow_ups[0], index=1)
    assert f"I could not read a score from your last message: {reason}." in follow_up
    assert f"<<<\n{first}\n>>>" in follow_up
    assert follow_ups[0]["messages"][1] == {"role": "assistant", "content": first}

    record = _score_file(run, *RTD)
    assert record["status"] == "scored" and record["scores"]["avg_temporal_score"] == 2.0
    trace = _trace(run, *RTD)
    assert [(line["call"], line["attempt"]) for line in trace] == [
        ("rtd_temporal[0]", 1),
        ("rtd_temporal[0]", 2),
        ("rtd_temporal[1]", 1),
        ("rtd_temporal[1]", 2),
    ]
    assert trace[0]["parse_error"] == reason and trace[0]["reply"] == first
    assert trace[1]["parse_error"] is None and trace[1]["follow_up"] == follow_up
    assert trace[0]["judge"]["model"] == "fake-judge"


async def test_a_second_unparseable_reply_makes_the_sample_an_error(
    fake_judge: FakeJudge, run: Path, video12: bytes
) -> None:
    fake_judge.script = lambda r: (
        completion("I think it is good.") if kind_of(r) == CONTENT else valid_replies(r)
    )
    judge = make_judge(fake_judge)
    summary = await score_run(run, judge, samples=_rtd_run(run, video12))

    record = _score_file(run, *RTD)
    assert record["status"] == "error" and record["scores"] is None
    assert "rtd_content: the judge's reply did not parse after a follow-up" in record["error"]
    trace = _trace(run, *RTD)
    assert [(line["attempt"], line["parse_error"]) for line in trace] == [
        (1, "the reply contains no JSON object"),
        (2, "the reply contains no JSON object"),
    ]
    assert not summary.complete and summary.coverage["errors"] == 1
    assert summary.rtd["mean_content_score"] == 0.0  # the error stays in the denominator, as 0
    assert summary.rtd["errors"] == 1 and summary.rtd["samples"] == 1

    fake_judge.requests.clear()
    fake_judge.script = valid_replies
    summary = await score_run(run, judge, samples=[FakeSample(*RTD, video=video12)])
    await judge.aclose()
    assert summary.complete and fake_judge.requests  # an error is judged again, never reused
    assert not (run / "scores" / RTD[0] / f"{RTD[1]}.trace.jsonl").exists()


async def test_a_context_overflow_halves_the_frames(fake_judge: FakeJudge, run: Path, video12: bytes) -> None:
    def script(request: dict[str, Any]) -> Reply:
        if kind_of(request) == CONTENT and image_count(request) > 4:
            return error(
                400, "This model's maximum context length is 32768 tokens. However, you requested 50000"
            )
        return valid_replies(request)

    fake_judge.script = script
    judge = make_judge(fake_judge)
    await score_run(run, judge, samples=_rtd_run(run, video12, duration=48.0))
    await judge.aclose()

    assert [image_count(r) for r in fake_judge.of_kind(CONTENT)] == [16, 8, 4]
    content = _score_file(run, *RTD)["details"]["content"]
    assert content["frames"] == 4 and content["context_overflows"] == 2 and content["content_score"] == 2.5


async def test_an_event_reminder_without_reminder_times_is_one_call_on_the_whole_response(
    fake_judge: FakeJudge, run: Path
) -> None:
    write_sample(
        run,
        "PR_event_reminder",
        "untimed",
        sentences(("It turned red.", 4.5, 5.0), ("Now blue.", 9.0, 9.5)),
        answer1="It turned red, then blue.",
        reminders=(None, None),
    )
    fake_judge.script = lambda r: completion('{"success_score": 1}')
    judge = make_judge(fake_judge)
    summary = await score_run(run, judge, samples=[])
    await judge.aclose()

    assert len(fake_judge.requests) == 1 and not fake_judge.of_kind(REMINDER)
    (call,) = fake_judge.of_kind(CORRECTION)
    assert '"It turned red. Now blue."' in user_text(call)  # every sentence, not a reminder window
    assert _score_file(run, "PR_event_reminder", "untimed")["scores"] == {"all_success": 1}
    assert summary.pr["mean_all_success"] == 1.0


async def test_pr_samples_and_failed_samples(fake_judge: FakeJudge, run: Path) -> None:
    write_sample(run, "PR_correction", "c", sentences(("No, it is blue.", 3.0, 4.0)), answer1="It is blue.")
    write_sample(
        run,
        "PR_event_reminder",
        "e",
        sentences(("It turned red!", 4.5, 5.0), ("Nice.", 16.0, 16.5)),
        reminders=(4.0, 20.0),
        duration=30.0,
    )
    write_sample(
        run, "PR_post_event_reminder", "p", sentences(("The light is off.", 5.0, 6.0)), reminders=(5.0, None)
    )
    write_sample(run, "PR_event_reminder", "failed", None, question="SECRET QUESTION", reminders=(1.0, None))
    fake_judge.script = lambda r: completion(
        '{"success_score": 0}' if "turned red" in user_text(r) else '{"success_score": 1}'
    )
    judge = make_judge(fake_judge)
    summary = await score_run(run, judge, samples=[])
    await judge.aclose()

    (correction,) = fake_judge.of_kind(CORRECTION)
    assert 'The correct facts: It is blue.\nEverything the assistant said: "No, it is blue."' in user_text(
        correction
    )
    reminders = fake_judge.of_kind(REMINDER)
    assert len(reminders) == 2  # the event at 20 s has nothing in [20, 30]: 0 without a call
    assert not any("SECRET QUESTION" in user_text(r) for r in fake_judge.requests)
    event = next(r for r in reminders if "turned red" in user_text(r))
    assert "happens at 4.00 s. Everything the assistant said from 4.00 s to\n14.00 s" in user_text(event)

    events = _score_file(run, "PR_event_reminder", "e")["details"]["events"]
    assert [(e["event_time"], e["judged"], e["success_score"]) for e in events] == [
        (4.0, True, 0),
        (20.0, False, 0),
    ]
    assert _score_file(run, "PR_post_event_reminder", "p")["scores"] == {"all_success": 1}
    assert not (run / "scores" / "PR_event_reminder" / "failed.json").exists()
    assert summary.coverage == {"total": 4, "scored": 3, "skipped": 1, "errors": 0, "cached": 0}
    assert summary.pr["mean_all_success"] == 0.5  # (1 + 0 + 1 + failed 0) / 4
    assert summary.pr["by_task"]["event_reminder"] == {
        "mean_all_success": 0.0,
        "samples": 2,
        "scored": 1,
        "skipped": 1,
        "errors": 0,
    }


def _protocol_dir(directory: Path) -> Path:
    directory.mkdir()
    markers = {"rtd_temporal": "You are grading one sentence", "rtd_content": "You are grading everything"}
    for name in PLACEHOLDERS:
        marker = markers.get(name, "corrected a mistake" if name == "pr_correction" else "alerted the user")
        (directory / f"{name}.txt").write_text(f"{marker}: {{{REQUIRED[name]}}}", encoding="utf-8")
    return directory


async def test_scores_are_reused_only_under_the_same_response_model_url_and_prompts(
    fake_judge: FakeJudge, run: Path, video12: bytes, tmp_path: Path
) -> None:
    samples = _rtd_run(run, video12)
    write_sample(run, "PR_correction", "c", sentences(("It is blue.", 3.0, 4.0)))

    async def score(**kwargs: Any) -> dict[str, int]:
        fake_judge.requests.clear()
        judge = make_judge(fake_judge, **kwargs)
        summary = await score_run(run, judge, samples=samples)
        await judge.aclose()
        return dict(summary.coverage) | {"requests": len(fake_judge.requests)}

    first = await score()
    assert first["cached"] == 0 and first["requests"] == 4
    assert await score() == {"total": 2, "scored": 2, "skipped": 0, "errors": 0, "cached": 2, "requests": 0}

    response = run / "records" / "PR_correction" / "c.json"
    response.write_text(json.dumps(sentences(("It is blue, not red.", 3.0, 4.0))), encoding="utf-8")
    assert (await score())["cached"] == 1  # only the changed response is judged again

    assert (await score(model="another-judge"))["cached"] == 0
    assert (await score(model="another-judge"))["cached"] == 2

    prompts = load_protocol_dir(_protocol_dir(tmp_path / "protocol"))
    result = await score(model="another-judge", prompts=prompts)
    assert result["cached"] == 0
    record = _score_file(run, "PR_correction", "c")
    assert record["judge"]["prompt_version"] == prompts.version
    assert record["judge"]["prompt_source"].startswith("protocol-dir ")
    assert user_text(fake_judge.of_kind(CORRECTION)[0]) == "corrected a mistake: It is blue, not red."


async def test_a_run_at_invalid_clock_is_refused_unless_allowed(fake_judge: FakeJudge, run: Path) -> None:
    write_sample(run, "PR_correction", "c", sentences(("It is blue.", 3.0, 4.0)), clock="invalid")
    judge = make_judge(fake_judge)
    with pytest.raises(RunError, match="clock=invalid"):
        await score_run(run, judge, samples=[])
    assert not (run / "scores").exists()
    summary = await score_run(run, judge, samples=[], allow_invalid_clock=True)
    await judge.aclose()
    assert summary.coverage["scored"] == 1


async def test_a_missing_video_is_a_sample_error(fake_judge: FakeJudge, run: Path) -> None:
    write_sample(run, *RTD, sentences(("A red square.", 4.0, 5.0)))
    judge = make_judge(fake_judge)
    summary = await score_run(run, judge, samples=[])
    await judge.aclose()
    assert summary.coverage["errors"] == 1 and not fake_judge.requests
    assert _score_file(run, *RTD)["error"] == "the run's dataset has no video for this sample"


async def test_an_unreachable_judge_aborts_the_run(run: Path) -> None:
    for n in range(3):
        write_sample(run, "PR_correction", f"c{n}", sentences(("It is blue.", 3.0, 4.0)))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    chat = ChatClient(
        base_url=f"http://127.0.0.1:{closed_port}/v1", model="m", api_key="k", concurrency=2, retries=0
    )
    with pytest.raises(JudgeUnreachable):
        await score_run(run, LLMJudge(chat), samples=[], workers=2)
    await chat.aclose()
    assert not (run / "scores" / "summary.json").exists()


async def test_a_folder_that_is_not_a_run(fake_judge: FakeJudge, tmp_path: Path) -> None:
    judge = make_judge(fake_judge)
    with pytest.raises(RunError, match="not a run folder"):
        await score_run(tmp_path, judge, samples=[])
    await judge.aclose()
