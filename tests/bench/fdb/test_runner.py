"""The FDB runner against the scripted model over a real socket: full duplex, FDB folders, resumable."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from duplexkit.bench.artifacts import RunDir
from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.benchmark import get_benchmark
from duplexkit.bench.fdb.dataset import Selection, find_samples, load_dataset
from duplexkit.bench.fdb.scoring import score_dir
from duplexkit.bench.runner import BenchmarkRunner
from duplexkit.client import SessionBounds
from duplexkit.client.wavfile import read_wav, write_wav
from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.bench.conftest import speech_like

REPLY = "Sure thing, I can help."
SCRIPTED = {"first_output_ms": "30", "token_ms": "2", "ms_per_char": "60", "reply": REPLY}


def write_sample(folder: Path, rate: int, task_file: str, task: object) -> None:
    folder.mkdir(parents=True)
    speech = speech_like(1.0, rate_hz=rate)
    clip = np.concatenate([np.zeros(rate // 2, np.float32), speech, np.zeros(3 * rate, np.float32)])
    write_wav(folder / "input.wav", clip, rate)
    (folder / task_file).write_text(json.dumps(task), encoding="utf-8")


async def test_the_runner_writes_fdb_folders_on_the_input_timeline(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_sample(data / "turn" / "t1", 16_000, "turn_taking.json", [{"timestamp": [1.5, 4.5]}])
    interrupt = [{"context": "c", "interrupt": "i", "timestamp": [0.5, 1.5]}]
    write_sample(data / "interrupt" / "i1", 24_000, "interrupt.json", interrupt)
    dataset = load_dataset(str(data), Selection())
    run_dir = RunDir(tmp_path / "run")
    bounds = SessionBounds(settle_s=0.3, close_timeout_s=3.0)
    async with EmbeddedServer(load_model("scripted", SCRIPTED), ServerConfig(max_sessions=4)) as server:
        config = RunConfig(url=server.url, concurrency=2, bounds=bounds)
        runner = BenchmarkRunner(config, run_dir, benchmark=get_benchmark("fdb"))
        results = await runner.run(list(dataset.samples))
        assert {r.status for r in results} == {"published"}, [r.error for r in results]
        resumed = await runner.run(list(dataset.samples))
    assert {r.status for r in resumed} == {"skipped"}

    folder = run_dir.sample_dir("turn", "t1")
    assert {p.name for p in folder.iterdir()} >= {
        "input.wav",
        "turn_taking.json",
        "output.wav",
        "output.json",
        "events.json",
    }
    inp, in_rate = read_wav(folder / "input.wav")
    out, out_rate = read_wav(folder / "output.wav")
    # FDB's scorers assume 16 kHz (their Silero call names no rate): output.wav is written at it
    assert out_rate == 16_000 and len(out) == round(len(inp) / in_rate * 16_000)
    # full duplex: the client never committed, yet the model spoke on its own
    events = json.loads((folder / "events.json").read_text())
    assert not any(e.get("type") == "input_audio_buffer.committed" for e in events)
    assert np.abs(out).max() > 0.01
    words = json.loads((folder / "output.json").read_text())
    assert words["word_timing"]["source"] == "server" and words["word_timing"]["marks"] is True
    assert [c["text"] for c in words["chunks"]] == ["Sure", "thing,", "I", "can", "help."]
    first = words["chunks"][0]["timestamp"][0]
    meta = json.loads(run_dir.meta_path("turn", "t1").read_text())
    unit_s = meta["unit_ms"] / 1000
    # speech ends at 1.5 s; the scripted model answers after one silent unit, where its audio sits
    assert 1.5 <= first <= 1.5 + 2 * unit_s + 0.2
    voiced = np.flatnonzero(np.abs(out) > 0.01) / 16_000
    assert abs(voiced[0] - first) < 0.1

    # the 24 kHz interruption input was resampled to 16 kHz for the stream and kept as given in the folder
    i_out, i_out_rate = read_wav(run_dir.sample_dir("interrupt", "i1") / "output.wav")
    i_in, i_rate = read_wav(run_dir.sample_dir("interrupt", "i1") / "input.wav")
    assert i_rate == 24_000 and i_out_rate == 16_000 and len(i_out) == len(i_in) * 2 // 3
    i_words = json.loads((run_dir.sample_dir("interrupt", "i1") / "output.json").read_text())
    assert i_words["word_timing"]["cut_at_s"] == 1.5
    assert all(c["timestamp"][0] >= 1.5 for c in i_words["chunks"])

    assert (
        meta["task"] == "turn_taking"
        and meta["status"] == "published"
        and meta["word_timing"]["source"] == "server"
    )

    # FDB's layout is what the scorer reads: the run folder scores as it stands
    assert {(s.split, s.id) for s in find_samples(run_dir.root)} == {("turn", "t1"), ("interrupt", "i1")}
    scores = await score_dir(run_dir.root, segmenter=lambda p: ([], 4.0))
    turn = scores["tasks"]["turn"]
    # a 1.4 s reply (24 characters at 60 ms) is a take-over; its latency runs from the span start at 1.5 s
    assert turn["tor"] == 1.0 and turn["latency_s"] == round(first - 1.5, 6)


async def test_an_unreachable_server_is_retried_once_then_recorded_as_failed(tmp_path: Path) -> None:
    import socket

    data = tmp_path / "data"
    write_sample(data / "turn" / "t1", 16_000, "turn_taking.json", [{"timestamp": [1.5, 4.5]}])
    dataset = load_dataset(str(data), Selection())
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_dir = RunDir(tmp_path / "run")
    config = RunConfig(
        url=f"ws://127.0.0.1:{port}/v1/realtime", bounds=SessionBounds(configure_timeout_s=2.0)
    )
    (result,) = await BenchmarkRunner(config, run_dir, benchmark=get_benchmark("fdb")).run(
        list(dataset.samples)
    )
    assert result.status == "failed" and result.retried
    meta = json.loads(run_dir.meta_path("turn", "t1").read_text())
    assert meta["retry_count"] == 1 and meta["error"].startswith("transport_error")
    assert not (run_dir.sample_dir("turn", "t1") / "output.wav").exists()
    assert not run_dir.is_published("turn", "t1")
