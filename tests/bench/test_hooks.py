"""The hooks a Python user of the library calls without the CLI: a benchmark's judge from plain settings,
its run checks, the bench options it owns, and FDB's scoring by its own rules."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from duplexkit.bench.benchmark import BENCHMARKS, get_benchmark
from duplexkit.bench.errors import ConfigError
from duplexkit.bench.judge import JudgeSettings, RunError, make_judge, score_run
from duplexkit.cli import build_parser
from tests.bench.fdb.helpers import sample_folder


def _bench_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = commands.choices["bench"]
    return parser


def test_every_benchmark_owns_distinct_bench_options() -> None:
    flags = {flag for action in _bench_parser()._actions for flag in action.option_strings}
    owned = [flag for name in BENCHMARKS for flag in get_benchmark(name).options]
    assert set(owned) <= flags
    assert len(owned) == len(set(owned)), "an option belongs to one benchmark only"


async def test_judge_scoring_is_an_optional_part_of_a_benchmark(tmp_path: Path) -> None:
    """FDB is scored by its own rules: it has no judge scoring, and `score_run` refuses its runs with the
    command that scores them; the judged benchmarks hand `score_run` their scoring hooks."""
    assert get_benchmark("fdb").judge_scoring is None
    for name in ("omni-duplex-eval", "omniinteract"):
        scoring = get_benchmark(name).judge_scoring
        assert scoring is not None and callable(scoring.summarise) and callable(scoring.score_request)
    for name in BENCHMARKS:  # each is scored one way or the other, and carries no hooks it refuses
        benchmark = get_benchmark(name)
        assert benchmark.judge_scoring is not None or benchmark.folder_scorer is not None
        if benchmark.judge_scoring is None:
            assert not hasattr(benchmark, "summarise") and not hasattr(benchmark, "score_request")
    (tmp_path / "run.json").write_text(json.dumps({"benchmark": "fdb"}))
    judge = make_judge(get_benchmark("omni-duplex-eval").judge_scoring, JudgeSettings(), "builtin")  # type: ignore[arg-type]
    with pytest.raises(RunError, match="--benchmark fdb"):
        await score_run(tmp_path, judge)


async def test_make_judge_resolves_the_kind_and_defers_to_the_benchmark() -> None:
    ode, omni = get_benchmark("omni-duplex-eval"), get_benchmark("omniinteract")
    builtin = make_judge(ode, JudgeSettings(), "builtin")
    assert builtin.info.kind == "builtin" and builtin.info.reminder_window_s == 10.0
    assert make_judge(omni, JudgeSettings(), "builtin").info.reminder_window_s is None
    llm = make_judge(omni, JudgeSettings(url="http://127.0.0.1:9/v1", model="m"), None)
    assert (llm.info.kind, llm.info.model, llm.info.url) == ("llm", "m", "http://127.0.0.1:9/v1")
    await llm.aclose()
    with pytest.raises(ConfigError, match="give --judge-url"):
        make_judge(ode, JudgeSettings(), "some/manifest.jsonl")
    with pytest.raises(ConfigError, match="OmniInteract uses its own"):
        make_judge(omni, JudgeSettings(kind="builtin", protocol_dir=Path("p")), None)
    with pytest.raises(ConfigError, match="--reminder-window must be positive"):
        make_judge(ode, JudgeSettings(reminder_window_s=0.0), "builtin")


def test_fdb_refuses_a_run_it_cannot_score(tmp_path: Path) -> None:
    fdb = get_benchmark("fdb")
    with pytest.raises(ConfigError, match="drop --no-audio"):
        fdb.check_config(keep_audio=False, score=True, scoring={})
    with pytest.raises(ConfigError, match="add --score"):
        fdb.check_config(keep_audio=True, score=False, scoring={"words": "asr"})
    fdb.check_config(keep_audio=True, score=True, scoring={"words": "asr"})
    sample_folder(tmp_path / "data" / "pause" / "p1", task_file="pause.json", words=[])
    dataset = fdb.load_dataset(str(tmp_path / "data"), fdb.selection_from_json({}))
    with pytest.raises(ConfigError, match="overlaps the dataset"):
        fdb.check_out(tmp_path / "data" / "pause" / "run", dataset)
    fdb.check_out(tmp_path / "run", dataset)


async def test_fdb_scores_a_folder_by_its_own_rules(tmp_path: Path) -> None:
    scorer = get_benchmark("fdb").folder_scorer
    assert scorer is not None
    assert all(get_benchmark(n).folder_scorer is None for n in BENCHMARKS if n not in ("fdb", "fdb2", "fdb3"))
    sample_folder(tmp_path / "pause" / "p1", task_file="pause.json", words=[], output=False)
    warnings: list[str] = []
    scores = await scorer.score(
        tmp_path, JudgeSettings(), {"words": "asr"}, allow_invalid_clock=False, warn=warnings.append
    )
    assert warnings == [f"{tmp_path / 'pause' / 'p1'}: [no_output_wav] output.wav is missing"]
    assert scores.complete and scores.written == tmp_path / "fdb_scores.json"
    assert json.loads(scores.written.read_text())["tasks"]["pause"]["tor"] == 0.0
    assert scores.text.splitlines()[3].split()[:2] == ["pause", "pause"]  # after the legend and header
    with pytest.raises(ConfigError, match="relevance LLM"):
        await scorer.score(
            tmp_path, JudgeSettings(kind="builtin"), {}, allow_invalid_clock=False, warn=warnings.append
        )
