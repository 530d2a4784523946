"""The FDB folder loader (task detection, coded errors) and scoring existing folders, through the CLI too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from duplexkit.bench.fdb.dataset import FdbDatasetError, Selection, find_samples, load_dataset
from duplexkit.bench.fdb.scoring import score_dir
from duplexkit.cli import main
from tests.bench.fdb.conftest import FakeOpenAI
from tests.bench.fdb.helpers import sample_folder


def build_tree(root: Path) -> Path:
    sample_folder(root / "pause" / "p1", task_file="pause.json", words=[("uh", 1.0, 1.3), ("huh", 1.3, 1.6)])
    sample_folder(
        root / "pause" / "p2", task_file="pause.json", words=[("sure", 2.0, 2.5), ("thing", 2.7, 3.2)]
    )
    tt = [{"timestamp": [12.0, 15.0]}]
    sample_folder(
        root / "turn" / "t1",
        task_file="turn_taking.json",
        task=tt,
        seconds=16,
        words=[("hello", 14.2, 14.6), ("there", 14.7, 15.4)],
    )
    sample_folder(
        root / "turn" / "t2",
        task_file="turn_taking.json",
        task=tt,
        seconds=16,
        words=[("so", 11.0, 11.4), ("anyway", 11.5, 12.6)],
    )
    sample_folder(root / "turn" / "t3", task_file="turn_taking.json", task=tt, seconds=16, words=[])
    it = [{"context": "Tell me about cats.", "interrupt": "What about dogs?", "timestamp": [5.0, 6.0]}]
    # words before the end of the interruption are cut; the reply starts 0.5 s after it
    sample_folder(
        root / "interrupt" / "i1",
        task_file="interrupt.json",
        task=it,
        seconds=10,
        words=[
            ("cats", 3.0, 3.4),
            ("are", 3.5, 3.7),
            ("dogs", 6.5, 6.9),
            ("are", 7.0, 7.2),
            ("loyal", 7.3, 7.9),
        ],
    )
    (root / "icc_backchannel").mkdir()
    sample_folder(root / "icc_backchannel" / "7", task_file=None, seconds=10, words=[("mhm", 2.1, 2.4)])
    return root


def fake_segmenter(path: Path) -> tuple[list[tuple[float, float]], float]:
    """Speech where the words are (what a VAD would find on a real voice), and the clip's length."""
    from duplexkit.client.wavfile import read_wav

    samples, rate = read_wav(path)
    if path.name == "output.wav":
        data = json.loads((path.parent / "output.json").read_text())
        return [(c["timestamp"][0] - 0.1, c["timestamp"][1] + 0.1) for c in data["chunks"]], len(
            samples
        ) / rate
    return [], len(samples) / rate


def test_tasks_are_detected_from_the_files(tmp_path: Path) -> None:
    samples = find_samples(build_tree(tmp_path / "fdb"))
    assert {(s.split, s.id, s.task) for s in samples} == {
        ("pause", "p1", "pause"),
        ("pause", "p2", "pause"),
        ("turn", "t1", "turn_taking"),
        ("turn", "t2", "turn_taking"),
        ("turn", "t3", "turn_taking"),
        ("interrupt", "i1", "interruption"),
        ("icc_backchannel", "7", "backchannel"),
    }
    one_task = find_samples(tmp_path / "fdb" / "turn")
    assert [s.id for s in one_task] == ["t1", "t2", "t3"] and one_task[0].span == (12.0, 15.0)
    assert load_dataset(str(tmp_path / "fdb"), Selection(tasks=("pause",))).samples[0].id == "p1"


@pytest.mark.parametrize(
    ("files", "code"),
    [
        ({}, "no_samples"),
        ({"input.wav": b""}, "no_task"),
        ({"input.wav": b"", "pause.json": b"[]", "turn_taking.json": b"[]"}, "ambiguous_task"),
        ({"input.wav": b"", "turn_taking.json": b'[{"timestamp": [3, 1]}]'}, "bad_task_file"),
        ({"input.wav": b"", "interrupt.json": b"not json"}, "bad_task_file"),
        ({"input.wav": b"", "pause.json": b"[]", "metadata.json": b"[1]"}, "bad_metadata"),
        ({"input.wav": b"", "metadata.json": b"not json"}, "bad_metadata"),
    ],
)
def test_a_folder_fitting_no_task_gets_a_coded_error(
    tmp_path: Path, files: dict[str, bytes], code: str
) -> None:
    folder = tmp_path / "set" / "s1"
    folder.mkdir(parents=True)
    (tmp_path / "set" / "other").mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    with pytest.raises(FdbDatasetError) as caught:
        find_samples(tmp_path / "set")
    assert caught.value.code == code and code in str(caught.value)


def test_scores_by_hand(tmp_path: Path) -> None:
    root = build_tree(tmp_path / "fdb")
    scores = asyncio.run(score_dir(root, segmenter=fake_segmenter))
    tasks = scores["tasks"]
    # pause: p1 TOR 0 (2 words over 0.6 s), p2 TOR 1 (1.2 s) → 0.5; no latency
    assert tasks["pause"]["tor"] == 0.5 and tasks["pause"]["latency_s"] is None
    # turn-taking: t1 TOR 1 latency 2.2, t2 TOR 1 latency clipped to 0, t3 no words TOR 0
    # → TOR 2/3, latency (2.2 + 0) / 2 = 1.1
    assert tasks["turn"]["tor"] == pytest.approx(2 / 3)
    assert tasks["turn"]["latency_s"] == pytest.approx(1.1)
    per = {r["id"]: r for r in tasks["turn"]["per_sample"]}
    assert per["t1"]["latency_s"] == pytest.approx(2.2) and per["t2"]["latency_s"] == 0.0
    assert per["t3"]["latency_s"] is None
    # interruption: the 3 words after 6.0 s span 1.4 s → TOR 1, latency 6.5 - 6.0 = 0.5; no judge → null
    assert tasks["interrupt"]["tor"] == 1.0 and tasks["interrupt"]["latency_s"] == pytest.approx(0.5)
    assert tasks["interrupt"]["relevance"] is None
    assert tasks["interrupt"]["per_sample"][0]["reply"] == "dogs are loyal"
    # backchannel: one 0.5 s segment with one word → a backchannel; TOR 0; 1 per 10 s; no human file → no JSD
    bc = tasks["icc_backchannel"]
    assert (bc["tor"], bc["frequency"], bc["jsd"]) == (0.0, pytest.approx(0.1), None)
    assert bc["per_sample"][0]["jsd_note"] == "no --icc-distribution given"
    written = json.loads((root / "fdb_scores.json").read_text())
    assert written["tasks"]["turn"]["latency_s"] == pytest.approx(1.1)


def test_jsd_with_a_human_distribution(tmp_path: Path) -> None:
    root = build_tree(tmp_path / "fdb")
    human = {"7": [0.0] * 10 + [1.0] + [0.0] * 40}
    bc = asyncio.run(score_dir(root, segmenter=fake_segmenter, human=human))["tasks"]["icc_backchannel"]
    assert bc["jsd"] is not None and 0.0 < bc["jsd"] <= 1.0


def test_missing_output_json_is_a_coded_sample_error(tmp_path: Path) -> None:
    root = tmp_path / "fdb"
    sample_folder(root / "pause" / "p1", task_file="pause.json", words=[("uh", 1.0, 1.3)])
    sample_folder(root / "pause" / "p2", task_file="pause.json", words=None)
    tasks = asyncio.run(score_dir(root, segmenter=fake_segmenter))["tasks"]
    assert tasks["pause"]["errors"] == 1 and tasks["pause"]["tor"] == 0.0
    assert next(r for r in tasks["pause"]["per_sample"] if r["id"] == "p2")["error"] == "no_output_json"


def test_score_cli_on_someone_elses_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "theirs"
    sample_folder(root / "p1", task_file="pause.json", words=[("uh", 1.0, 1.3), ("huh", 1.3, 1.6)])
    sample_folder(root / "p2", task_file="pause.json", words=[("sure", 2.0, 2.5), ("thing", 2.7, 3.2)])
    assert main(["score", "--benchmark", "fdb", str(root)]) == 0
    out = capsys.readouterr().out
    assert "theirs" in out and "0.500" in out
    assert json.loads((root / "fdb_scores.json").read_text())["tasks"]["theirs"]["tor"] == 0.5
    assert main(["score", "--benchmark", "fdb", str(tmp_path / "nothing")]) == 2
    assert "[not_a_folder]" in capsys.readouterr().err


def test_v15_sample_gets_stop_and_response_latency_from_merged_segments(tmp_path: Path) -> None:
    root = tmp_path / "v15"
    it = [{"context": "c", "interrupt": "i", "timestamp": [4.0, 6.0]}]
    folder = sample_folder(
        root / "s1", task_file="interrupt.json", task=it, seconds=12, words=[("ok", 6.5, 7.8)]
    )
    (folder / "metadata.json").write_text(json.dumps({"category": "user_interruption"}))
    (folder / "clean_input.wav").write_bytes((folder / "input.wav").read_bytes())

    def segments(path: Path) -> tuple[list[tuple[float, float]], float]:
        if path.name == "input.wav":  # user: [1, 2] and [2.5, 3] merge (gap 0.5 ≤ 0.6); [4, 6]
            return [(1.0, 2.0), (2.5, 3.0), (4.0, 6.0)], 12.0
        # model: [3.4, 5.0] and [5.5, 6.2] merge (gap 0.5 ≤ 0.5); [6.9, 7.8] stays apart (gap 0.7)
        return [(3.4, 5.0), (5.5, 6.2), (6.9, 7.8)], 12.0

    (sample,) = find_samples(root)
    assert sample.version == "v1.5" and "clean_input.wav" in sample.task_files
    row = asyncio.run(score_dir(root, segmenter=segments))["tasks"]["v15"]["per_sample"][0]
    # merged user [1, 3], [4, 6]; merged model [3.4, 6.2], [6.9, 7.8] (gap 0.7 > 0.5 stays apart)
    # overlap [4.0, 6.0] → stop latency 2.0; responses: user end 3.0 → model 3.4 (0.4), 6.0 → 6.9 (0.9)
    assert row["stop_latencies_s"] == pytest.approx([2.0])
    assert row["response_latencies_s"] == pytest.approx([0.4, 0.9])


def test_score_cli_retimes_words_through_a_transcription_endpoint(
    tmp_path: Path, fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_openai.transcribe = lambda form: {
        "text": "well I think so",
        "words": [
            {"word": "well", "start": 14.2, "end": 14.5},
            {"word": "I", "start": 14.6, "end": 14.7},
            {"word": "think", "start": 14.8, "end": 15.1},
            {"word": "so", "start": 15.2, "end": 15.5},
        ],
    }
    root = tmp_path / "turn"
    sample_folder(
        root / "t1", task_file="turn_taking.json", task=[{"timestamp": [12.0, 16.0]}], seconds=16, words=None
    )
    args = ["score", "--benchmark", "fdb", str(root), "--words", "transcription"]
    args += ["--transcription-url", fake_openai.url, "--transcription-model", "whisper-x"]
    assert main(args) == 0
    written = json.loads((root / "t1" / "output.json").read_text())
    assert written["word_timing"] == {"source": "transcription", "url": fake_openai.url, "model": "whisper-x"}
    scores = json.loads((root / "fdb_scores.json").read_text())["tasks"]["turn"]
    # 4 words over 1.3 s → TOR 1; first word at 14.2 after the span start 12.0 → 2.2
    assert scores["tor"] == 1.0 and scores["latency_s"] == pytest.approx(2.2)
    assert main(["score", "--benchmark", "fdb", str(root), "--words", "transcription"]) == 2
    assert "--transcription-url" in capsys.readouterr().err


def test_a_v15_folder_without_a_task_file_is_an_overlap_sample(tmp_path: Path) -> None:
    root = tmp_path / "background_speech"
    folder = sample_folder(
        root / "b1", task_file=None, seconds=6, words=[("so", 1.0, 1.2), ("anyway", 1.3, 2.4)]
    )
    (folder / "metadata.json").write_text(json.dumps({"scenario": "background"}))
    (sample,) = find_samples(root)
    assert (sample.task, sample.version) == ("overlap", "v1.5")
    segments = {"input.wav": [(0.5, 3.0)], "output.wav": [(1.0, 2.4)]}
    row = asyncio.run(score_dir(root, segmenter=lambda p: (segments[p.name], 6.0)))["tasks"][
        "background_speech"
    ]
    # 2 words over 1.4 s → TOR 1 (no latency for this task); the model talked over the user for 1.4 s
    assert row["tor"] == 1.0 and row["latency_s"] is None
    assert row["per_sample"][0]["stop_latencies_s"] == pytest.approx([1.4])
