"""FDB-v3 end to end through the CLI: one short recording in FDB-v3's layout, run in real time against the
embedded scripted model (told the expected calls: `--oracle-calls`), the mock API run by our client, scored,
reported; the run folder then scored by the stand-in for FDB-v3's own scorers to the same numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from duplexkit.bench import synth
from duplexkit.cli import main
from duplexkit.client.wavfile import write_wav
from tests.bench.fdb3.official_scorers import evaluate

SPEAKER = "0123456789abcdef01234567"
FDB3_RESULT_FIELDS = {
    # FDB-v3's `run_tool_benchmark.py` (`process_single`) writes these for a completed example
    *("pid", "example_id", "category", "title", "provider", "evaluated_at", "status", "room_name"),
    *("stream_start_time", "inference_time_s", "input_transcript", "input_asr_chunks", "user_speech_end_rel"),
    *("latency", "user_done_unix", "transcript", "asr_chunks", "audio_agent_speech_start"),
    *("perceived_total_latency", "actual_tool_calls"),
}
SCENARIO = {
    "id": "ecommerce_77",
    "domain": "ecommerce_support",
    "difficulty": "easy",
    "title": "Track an order",
    "dialogue": [{"user": "Um, where is my order B O B one two?", "ai": "It is on its way."}],
    "expected_tool_calls": [{"function": "track_order", "args": {"order_id": "BOB12"}}],
    "disfluency_features": ["FILLER"],
    "state_rollback_test": False,
}


def test_bench_fdb3_runs_scores_and_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    folder = data / f"ecommerce_77_{SPEAKER}"
    folder.mkdir(parents=True)
    speech = synth.buzz("Um where is my order B O B one two")
    silence = np.zeros(16_000 // 2, dtype=np.float32)
    # 0.5 s, the request, then room for the scripted model's turn end, the call and its spoken answer
    write_wav(
        folder / "input.wav", np.concatenate([silence, speech, np.zeros(5 * 16_000, np.float32)]), 16_000
    )
    (folder / "metadata.json").write_text(json.dumps(SCENARIO))
    out = tmp_path / "run"
    args = ["bench", "--benchmark", "fdb3", "--dataset", str(data), "--out", str(out), "--model", "scripted"]
    args += ["--model-arg", "reply=Your order {output}", "--oracle-calls", "--score", "--report"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "GPT-Realtime" in printed and "--oracle-calls" in printed
    recording = out / "ecommerce_support" / folder.name
    result = json.loads((recording / "result_duplexkit.json").read_text())
    assert set(result) >= FDB3_RESULT_FIELDS and result["status"] == "completed"
    assert set(result["latency"]) == {"input_duration_s", "output_duration_s", "first_speech_s"}
    [call] = result["actual_tool_calls"]
    assert (call["function"], call["args"]) == ("track_order", {"order_id": "BOB12"})
    # the call came after the user's speech ended, and the answer after the call, on the stream's clock
    assert 0 < result["user_speech_end_rel"] < call["timestamp_start"] <= result["audio_agent_speech_start"]
    assert result["transcript"].startswith("Your order")
    records = json.loads((recording / "tool_calls.json").read_text())
    assert records[0]["status"] == "answered" and json.loads(records[0]["output"])["order_id"] == "BOB12"
    scores = json.loads((out / "fdb3_scores.json").read_text())
    assert scores["pass_rate"]["overall_pass_rate"] == 1.0 and scores["oracle_calls"] is True
    theirs = evaluate(out / "benchmark_data_v2.json", out, "duplexkit")
    assert (theirs["scored"], theirs["overall_pass_rate"], theirs["tool_selection_acc"]) == (1, 1.0, 1.0)
    assert theirs["avg_response_latency_s"] == scores["evaluation"]["latency"]["avg_response_latency_s"]
    page = (out / "report.html").read_text()
    assert "FDB-v3: per domain" in page and "API calls on the input timeline" in page
