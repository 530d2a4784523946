"""The offline builtin judge on the real built-in dataset, and the `duplexkit score` command."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from duplexkit.bench.judge import score_run
from duplexkit.bench.omni_duplex_eval import BuiltinJudge, LLMJudge
from duplexkit.bench.omni_duplex_eval.builtin import generate_builtin
from duplexkit.bench.omni_duplex_eval.builtin_judge import NOT_COMPARABLE
from duplexkit.bench.omni_duplex_eval.dataset import Sample, Selection, load_dataset
from duplexkit.commands import score
from tests.bench.judge.conftest import FakeJudge, image_count, sentences, write_run_json, write_sample

PERFECT = {
    "RTD_counting": sentences(
        ("A red square appears, so there is one square.", 3.0, 3.5),
        ("A green square and then a blue square join it, so there are three squares.", 7.0, 8.0),
    ),
    "RTD_fine_grained_movement": sentences(
        ("The white dot is moving to the left.", 2.0, 3.0), ("Now it moves to the right.", 7.0, 7.5)
    ),
    "RTD_OCR": sentences(("The sign says OPEN.", 2.0, 2.5), ("Now it says CLOSED.", 8.0, 8.5)),
    "PR_correction": sentences(("You are wrong: the square is blue, not red.", 1.0, 2.0)),
    "PR_event_reminder": sentences(("It just turned red.", 4.5, 5.0), ("Now it is blue.", 7.5, 8.0)),
    "PR_post_event_reminder": sentences(("The green light is off: take the cake out.", 5.5, 6.5)),
}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_builtin(tmp_path_factory.mktemp("builtin"))


@pytest.fixture(scope="module")
def builtin_samples(manifest: Path) -> tuple[Sample, ...]:
    return load_dataset(str(manifest), Selection()).samples


def _run_for(run_dir: Path, samples: tuple[Sample, ...], responses: dict[str, list[dict[str, Any]]]) -> Path:
    for sample in samples:
        write_sample(
            run_dir,
            sample.split,
            sample.id,
            responses.get(sample.split, []),
            question=sample.question_text,
            answer1=sample.answer1,
            answer2=sample.answer2,
            reminders=(sample.reminder1, sample.reminder2),
            duration=sample.video_duration or 0.0,
        )
    return run_dir


async def test_perfect_answers_score_high_and_silence_scores_zero(
    builtin_samples: tuple[Sample, ...], tmp_path: Path
) -> None:
    write_run_json(tmp_path / "good", "builtin")
    good = await score_run(
        _run_for(tmp_path / "good", builtin_samples, PERFECT), BuiltinJudge(), samples=builtin_samples
    )
    assert good.pr["mean_all_success"] == 1.0
    assert good.rtd["mean_content_score"] == 3.0
    assert good.rtd["mean_avg_temporal_score"] == 3.0

    write_run_json(tmp_path / "silent", "builtin")
    silent = await score_run(
        _run_for(tmp_path / "silent", builtin_samples, {}), BuiltinJudge(), samples=builtin_samples
    )
    assert silent.pr["mean_all_success"] == 0.0
    assert silent.rtd["mean_content_score"] == 0.0 and silent.rtd["mean_avg_temporal_score"] == 0.0

    summary = json.loads((tmp_path / "good" / "scores" / "summary.json").read_text())
    assert summary["judge"]["kind"] == "builtin" and summary["note"] == NOT_COMPARABLE
    record = json.loads((tmp_path / "good" / "scores" / "RTD_counting" / "squares_appear.json").read_text())
    assert record["judge"]["kind"] == "builtin" and record["judge"]["url"] is None


async def test_mistimed_or_wrong_answers_lose_points(
    builtin_samples: tuple[Sample, ...], tmp_path: Path
) -> None:
    wrong = {
        "RTD_counting": sentences(("A blue square appears.", 2.5, 3.0), ("Hello there.", 4.0, 4.5)),
        "PR_event_reminder": sentences(("It just turned blue.", 4.5, 5.0), ("Now it is blue.", 7.5, 8.0)),
        "PR_correction": sentences(("Yes, it is red.", 1.0, 2.0)),
    }
    write_run_json(tmp_path, "builtin")
    await score_run(_run_for(tmp_path, builtin_samples, wrong), BuiltinJudge(), samples=builtin_samples)

    def scores(split: str, sample_id: str) -> dict[str, Any]:
        record = json.loads((tmp_path / "scores" / split / f"{sample_id}.json").read_text())
        return dict(record["scores"]) | {"details": record["details"]}

    counting = scores("RTD_counting", "squares_appear")
    assert counting["avg_temporal_score"] == 1.0  # blue appears at 5 s, far from the window (0.5, 1.0)
    assert [s["is_relevant"] for s in counting["details"]["temporal"]["sentences"]] == [1, 0]
    assert counting["content_score"] == 0.75  # one fact of four named
    assert scores("PR_event_reminder", "background_changes_colour")["all_success"] == 0
    assert scores("PR_correction", "square_colour_claim")["all_success"] == 0


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="duplexkit")
    commands = parser.add_subparsers(dest="command", required=True)
    score.register(commands)
    return parser.parse_args(list(argv))


def test_the_command_scores_a_run_on_its_recorded_dataset_with_the_builtin_judge(
    builtin_samples: tuple[Sample, ...], manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run_json(tmp_path, str(manifest))
    _run_for(tmp_path, builtin_samples, PERFECT)
    args = _parse("score", str(tmp_path), "--judge", "builtin")
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "scored 6/6 samples (0 cached)" in out and "PR: mean_all_success ↑=1.000  (n=3)" in out
    assert "not comparable to published Omni-DuplexEval numbers" in out


def test_the_command_with_an_llm_judge_reads_the_video_from_the_dataset(
    builtin_samples: tuple[Sample, ...], manifest: Path, tmp_path: Path, fake_judge: FakeJudge
) -> None:
    write_run_json(tmp_path, str(manifest))
    _run_for(tmp_path, builtin_samples, PERFECT)
    args = _parse(
        "score", str(tmp_path), "--judge-url", fake_judge.url, "--judge-model", "m", "--workers", "2"
    )
    assert args.handler(args) == 0
    assert sum(image_count(r) for r in fake_judge.requests) > 6  # frames decoded from the dataset's videos
    summary = json.loads((tmp_path / "scores" / "summary.json").read_text())
    assert summary["coverage"]["scored"] == 6 and summary["judge"]["model"] == "m"


def test_judge_selection(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert isinstance(score.judge_from_args(_parse("score", "r"), "builtin", 4), BuiltinJudge)
    assert score.judge_from_args(_parse("score", "r"), str(tmp_path / "manifest.jsonl"), 4) is None
    assert "give --judge-url URL and --judge-model NAME" in capsys.readouterr().err
    args = _parse("score", "r", "--judge-url", "http://127.0.0.1:9/v1")
    assert score.judge_from_args(args, "builtin", 4) is None
    assert "needs both --judge-url and --judge-model" in capsys.readouterr().err
    args = _parse("score", "r", "--judge", "builtin", "--judge-model", "m")
    assert score.judge_from_args(args, None, 4) is None
    args = _parse("score", "r", "--judge-url", "http://127.0.0.1:9/v1", "--judge-model", "m")
    assert isinstance(score.judge_from_args(args, "builtin", 4), LLMJudge)


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse("score", str(tmp_path / "missing"), "--judge", "builtin")
    assert args.handler(args) == 2
    assert "is not a directory" in capsys.readouterr().err
    args = _parse("score", str(tmp_path), "--judge", "builtin", "--workers", "0")
    assert args.handler(args) == 2


async def test_the_reminder_window_decides_which_sentences_answer_an_event_and_keys_the_cache(
    builtin_samples: tuple[Sample, ...], tmp_path: Path
) -> None:
    """The background turns red at 4 s and blue at 7 s; the replies come 6 s after each event."""
    late = {"PR_event_reminder": sentences(("It turned red.", 10.0, 10.5), ("Now it is blue.", 13.0, 13.5))}
    write_run_json(tmp_path, "builtin")
    run = _run_for(tmp_path, builtin_samples, late)
    record_path = tmp_path / "scores" / "PR_event_reminder" / "background_changes_colour.json"

    await score_run(run, BuiltinJudge(reminder_window_s=5.0), samples=builtin_samples)
    narrow = json.loads(record_path.read_text())
    assert narrow["scores"]["all_success"] == 0 and narrow["judge"]["reminder_window_s"] == 5.0
    assert [e["window"] for e in narrow["details"]["events"]] == [[4.0, 9.0], [7.0, 12.0]]

    wide = await score_run(run, BuiltinJudge(reminder_window_s=10.0), samples=builtin_samples)
    assert wide.coverage["cached"] == 0  # another window is another judge: nothing is reused
    assert json.loads(record_path.read_text())["scores"]["all_success"] == 1
