"""`duplexkit bench` as a command: what it records, what it refuses before running, how it reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duplexkit.bench.retry import AttemptOutcome, Verdict, failure_reason, verdict
from duplexkit.bench.summary import print_run_summary
from duplexkit.cli import main
from duplexkit.commands.bench import _redacted

FAST = ["--model", "scripted", "--pace", "as-fast-as-possible", "--settle", "0.3", "--limit", "1"]


def test_secrets_on_the_command_line_are_not_recorded() -> None:
    argv = ["duplexkit", "bench", "--api-key", "sk-1", "--judge-api-key=sk-2", "--url", "ws://x"]
    assert _redacted(argv) == [
        "duplexkit",
        "bench",
        "--api-key",
        "***",
        "--judge-api-key=***",
        "--url",
        "ws://x",
    ]


def test_the_recorded_command_of_a_run_holds_no_api_key(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["bench", "--dataset", "builtin", "--out", str(out), *FAST, "--api-key", "sk-SECRET"]) == 0
    recorded = (out / "run.json").read_text()
    assert "sk-SECRET" not in recorded and "***" in recorded


def test_scoring_an_as_fast_as_possible_run_is_refused_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["bench", "--dataset", "builtin", "--out", str(out), *FAST, "--score"]) == 2
    assert "--allow-invalid-clock" in capsys.readouterr().err
    assert not out.exists()


def test_a_run_folder_is_not_resumed_with_another_selection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["bench", "--dataset", "builtin", "--out", str(out), *FAST, "--split", "RTD_counting"]) == 0
    started = json.loads((out / "run.json").read_text())["started_at"]
    assert main(["bench", "--dataset", "builtin", "--out", str(out), *FAST, "--split", "PR_correction"]) == 2
    assert "another dataset selection" in capsys.readouterr().err
    assert main(["bench", "--dataset", "builtin", "--out", str(out), *FAST, "--split", "RTD_counting"]) == 0
    assert json.loads((out / "run.json").read_text())["started_at"] == started  # a resume keeps the start


def test_exhausted_capacity_fails_the_sample_without_a_retry() -> None:
    outcome = AttemptOutcome(capacity_exhausted=True)
    assert verdict(outcome, 1) is Verdict.FAIL
    assert failure_reason(outcome).startswith("capacity_exhausted")


def test_in_a_pipe_the_summary_keeps_every_label_whole_and_says_which_way_is_better(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Captured output is not a terminal: the table takes the width it needs (no "server_request_st…")."""
    source = "server_request_start_and_client_receive"
    stats = {"count": 3, "mean": 812.5, "p50": 800.0, "p99": 990.0}
    print_run_summary(
        tmp_path,
        {"attempted": 3, "published": 3, "failed": 0, "retried": 0},
        {"ttfp_ms": {source: stats}, "rtf": {source: {**stats, "mean": 0.93}}},
        skipped=0,
    )
    lines = capsys.readouterr().out.splitlines()
    [ttfp] = [line for line in lines if "ttfp_ms" in line]
    assert source in ttfp and "↓" in ttfp and "…" not in "".join(lines)
    assert any("lower is better" in line for line in lines)


def test_chunk_ms_defaults_to_one_moshi_frame_for_the_moshi_protocol_and_placement_is_recorded(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    assert main(["bench", "--dataset", "builtin", "--out", str(out), *FAST, "--protocol", "moshi"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["chunk_ms"] == 80 and run["config"]["placement"] is None
    assert run["config"]["sentence_timing"] == "audio"
    [meta_path] = out.glob("records/*/*.meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta["chunk_ms"] == 80 and meta["audio_placement"] == "concatenated"
    assert meta["sentence_timing"] == "audio"
    other = tmp_path / "other"
    argv = ["bench", "--dataset", "builtin", "--out", str(other), *FAST, "--placement", "arrival"]
    assert main([*argv, "--sentence-timing", "arrival"]) == 0
    [meta_path] = other.glob("records/*/*.meta.json")
    config = json.loads((other / "run.json").read_text())["config"]
    assert config["chunk_ms"] == 200 and config["placement"] == "arrival"
    assert config["sentence_timing"] == "arrival"
    meta = json.loads(meta_path.read_text())
    assert meta["audio_placement"] == "arrival" and meta["sentence_timing"] == "arrival"
    # the sentences sit where Omni-DuplexEval's batch scorers look: {response_root}/{split}/{id}.json
    assert json.loads((other / meta["split"] / f"{meta['id']}.json").read_text())
    assert json.loads((other / "run.json").read_text())["layout"]["sentences"] == "{split}/{id}.json"
    assert [p.name for p in (other / "records" / meta["split"]).iterdir()] == [meta_path.name]
    # an Omni-DuplexEval option: another benchmark refuses it
    fdb = ["bench", "--benchmark", "fdb", "--dataset", "builtin", "--out", str(tmp_path / "f"), *FAST]
    assert main([*fdb, "--sentence-timing", "arrival"]) == 2
