"""A `duplexkit bench --benchmark fdb` run folder is read by (a stand-in for) FDB's own evaluation scripts,
unchanged, to the same numbers `duplexkit score` gives.

The stand-in (`official_scripts`) is written from FDB's documented contract; Silero, a third-party model
both sides run, is called the way FDB's backchannel script calls it: on the raw samples with no rate, so
16 kHz is assumed whatever `output.wav` holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from duplexkit.bench.fdb import builtin
from duplexkit.bench.fdb.segments import speech_segments
from duplexkit.cli import main
from duplexkit.client.wavfile import write_wav
from tests.bench.conftest import speech_like
from tests.bench.fdb import official_scripts as fdb
from tests.bench.fdb.conftest import FakeOpenAI

RATING = "Analysis: it answers the new question.\nI would rate the AI's response as 4."


def silero_as_fdb_calls_it(samples: np.ndarray) -> list[tuple[int, int]]:
    """Speech spans in samples of the raw samples taken as 16 kHz (FDB passes no rate)."""
    return [(round(a * 16_000), round(b * 16_000)) for a, b in speech_segments(samples, 16_000)]


def test_fdb_scripts_walk_a_run_folder_and_agree_with_duplexkit_score(
    tmp_path: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    data, run = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    builtin.generate(data, lambda text: speech_like(0.3 * len(text.split())))
    human = {str(i): list(np.random.default_rng(i).uniform(0.0, 1.0, 60)) for i in range(3)}
    (tmp_path / "icc_gt_distribution.json").write_text(json.dumps(human))
    bench = ["bench", "--benchmark", "fdb", "--dataset", str(data), "--out", str(run), "--model", "scripted"]
    bench += ["--settle", "0.3", "--concurrency", "8"]
    assert main(bench) == 0, capsys.readouterr()
    fake_openai.chat = lambda body: RATING
    score = [
        "score",
        str(run),
        "--allow-invalid-clock",
        "--icc-distribution",
        str(tmp_path / "icc_gt_distribution.json"),
    ]
    score += ["--judge-url", fake_openai.url, "--judge-model", "judge-x"]
    assert main(score) == 0, capsys.readouterr()
    ours = json.loads((run / "fdb_scores.json").read_text())["tasks"]

    # Every task folder holds sample folders only, named by digits as FDB names them.
    for task in ("pause", "turn_taking", "interruption", "backchannel"):
        assert sorted(p.name for p in (run / task).iterdir()) == ["1", "2"]
        assert all((run / task / n).is_dir() for n in ("1", "2"))
    assert fdb.pause_handling(str(run / "pause")) == pytest.approx(ours["pause"]["tor"])
    tor, latency = fdb.smooth_turn_taking(str(run / "turn_taking"))
    assert (tor, latency) == pytest.approx((ours["turn_taking"]["tor"], ours["turn_taking"]["latency_s"]))
    tor, latency, relevance = fdb.user_interruption(str(run / "interruption"), lambda *_: RATING)
    entry = ours["interruption"]
    assert (tor, latency, relevance) == pytest.approx((entry["tor"], entry["latency_s"], entry["relevance"]))
    found = fdb.backchannel(str(run / "backchannel"), human, silero_as_fdb_calls_it)
    assert found is not None, "FDB's backchannel script found no sample folder (it reads digit names only)"
    entry = ours["backchannel"]
    assert found == pytest.approx((entry["jsd"], entry["tor"], entry["frequency"]))


def test_fdb_backchannel_script_agrees_on_a_sample_with_speech(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Model speech: a 0.9 s "mhm", a 2.5 s reply of four words, then a 0.9 s "yeah": HEAD's walk
    # lists every segment (Silero may split the reply) and the last one's verdict (a backchannel) sets TOR 0.
    rate = 16_000
    out = np.zeros(12 * rate, dtype=np.float32)
    words = []
    for start, seconds, texts in (
        (1.0, 0.9, ["mhm"]),
        (4.0, 2.5, ["well", "I", "think", "so"]),
        (8.0, 0.9, ["yeah"]),
    ):
        out[round(start * rate) : round(start * rate) + round(seconds * rate)] = speech_like(
            seconds, seed=round(start)
        )
        step = seconds / len(texts)
        words += [
            {"text": t, "timestamp": [start + i * step, start + (i + 1) * step]} for i, t in enumerate(texts)
        ]
    folder = tmp_path / "icc" / "backchannel" / "3"
    folder.mkdir(parents=True)
    write_wav(folder / "input.wav", np.zeros_like(out), rate)
    write_wav(folder / "output.wav", out, rate)
    (folder / "output.json").write_text(json.dumps({"text": "", "chunks": words}))
    human = {"3": list(np.linspace(1.0, 2.0, 50))}
    (tmp_path / "gt.json").write_text(json.dumps(human))
    root = tmp_path / "icc"
    assert (
        main(["score", str(root), "--benchmark", "fdb", "--icc-distribution", str(tmp_path / "gt.json")]) == 0
    )
    entry = json.loads((root / "fdb_scores.json").read_text())["tasks"]["backchannel"]
    assert len(entry["per_sample"][0]["backchannels"]) >= 3 and entry["tor"] == 0.0
    found = fdb.backchannel(str(root / "backchannel"), human, silero_as_fdb_calls_it)
    assert found == pytest.approx((entry["jsd"], entry["tor"], entry["frequency"]))
