"""The built-in FDB dataset end to end through the CLI: generated offline, run in real time against the
embedded scripted model, scored and reported; plus what the bench command refuses for fdb."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from duplexkit.bench.fdb import builtin
from duplexkit.bench.fdb.dataset import find_samples
from duplexkit.cli import main


def test_generated_layout_has_ground_truth_spans_and_is_labelled_synthetic(tmp_path: Path) -> None:
    # a fake voice: 0.1 s of tone per word, so the spans can be checked by hand
    def speak(text: str) -> np.ndarray:
        n = round(0.1 * len(text.split()) * 16_000)
        return (0.2 * np.sin(np.arange(n) * 0.1)).astype(np.float32)

    builtin.generate(tmp_path, speak)
    samples = {f"{s.split}/{s.id}": s for s in find_samples(tmp_path)}
    assert {s.task for s in samples.values()} == {"pause", "turn_taking", "interruption", "backchannel"}
    assert all(s.synthetic for s in samples.values())
    # numeric ids, as FDB names its sample folders (its backchannel script reads only digit names)
    assert all(s.id.isdigit() for s in samples.values())
    # turn_taking/1: 0.5 s lead-in, 6 words = 0.6 s of speech, then 4 s: the span is [1.1, 5.1]
    assert samples["turn_taking/1"].span == pytest.approx((1.1, 5.1))
    # interruption/1: 8 words (0.8 s) from 0.5, 4 s gap, then 5 words (0.5 s): the interruption is [5.3, 5.8]
    assert samples["interruption/1"].span == pytest.approx((5.3, 5.8))
    assert samples["interruption/1"].interrupt == "Wait, who invented the pedals?"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["synthetic"] is True and len(manifest["samples"]) == 8


def test_bench_builtin_score_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "run"
    args = ["bench", "--benchmark", "fdb", "--dataset", "builtin", "--out", str(out), "--model", "scripted"]
    args += ["--task", "turn_taking", "--task", "pause", "--settle", "0.3", "--score", "--report"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "turn_taking" in printed and "synthetic" in printed
    scores = json.loads((out / "fdb_scores.json").read_text())
    assert set(scores["tasks"]) == {"turn_taking", "pause"} and scores["synthetic"] is True
    turn = scores["tasks"]["turn_taking"]
    # the scripted model answers each question with "This is a scripted reply." (1.5 s): a take-over
    assert turn["tor"] == 1.0 and turn["latency_s"] is not None and 0.0 <= turn["latency_s"] < 4.0
    run = json.loads((out / "run.json").read_text())
    assert run["benchmark"] == "fdb" and run["dataset"]["selection"]["tasks"] == ["turn_taking", "pause"]
    page = (out / "report.html").read_text()
    assert "Full-Duplex-Bench: per task" in page and "PersonaPlex" in page and "not comparable" in page
    # resuming the same command skips every published sample
    assert main(args) == 0
    assert "skipped (already published) 4" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--family", "rtd"], "--family do not apply to --benchmark fdb"),
        (["--no-audio"], "drop --no-audio"),
        (["--words", "asr"], "add --score"),
    ],
)
def test_bench_fdb_refuses(
    tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    folder = data / "s1"
    folder.mkdir(parents=True)
    from duplexkit.client.wavfile import write_wav

    write_wav(folder / "input.wav", np.zeros(1600, dtype=np.float32), 16_000)
    (folder / "pause.json").write_text("[]")
    assert (
        main(["bench", "--benchmark", "fdb", "--dataset", str(data), "--out", str(tmp_path / "o"), *extra])
        == 2
    )
    assert message in capsys.readouterr().err


def test_a_split_named_like_the_run_folders_own_folders_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from duplexkit.client.wavfile import write_wav

    folder = tmp_path / "data" / "records" / "1"  # a task folder named `records` would hold our records
    folder.mkdir(parents=True)
    write_wav(folder / "input.wav", np.zeros(1600, dtype=np.float32), 16_000)
    (folder / "pause.json").write_text("[]")
    argv = ["bench", "--benchmark", "fdb", "--dataset", str(tmp_path / "data"), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "[reserved_split] split 'records'" in capsys.readouterr().err


def test_bench_fdb_refuses_an_out_inside_the_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from duplexkit.client.wavfile import write_wav

    folder = tmp_path / "data" / "s1"
    folder.mkdir(parents=True)
    write_wav(folder / "input.wav", np.zeros(1600, dtype=np.float32), 16_000)
    (folder / "pause.json").write_text("[]")
    assert (
        main(
            [
                "bench",
                "--benchmark",
                "fdb",
                "--dataset",
                str(tmp_path / "data"),
                "--out",
                str(tmp_path / "data" / "run"),
            ]
        )
        == 2
    )
    assert "overlaps the dataset" in capsys.readouterr().err


def test_score_refuses_an_as_fast_as_possible_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.bench.fdb.helpers import sample_folder

    root = tmp_path / "run"
    sample_folder(root / "pause" / "p1", task_file="pause.json", words=[])
    (root / "run.json").write_text(
        json.dumps({"benchmark": "fdb", "config": {"pace": "as-fast-as-possible"}})
    )
    assert main(["score", str(root)]) == 2
    assert "clock=invalid" in capsys.readouterr().err
    assert main(["score", str(root), "--allow-invalid-clock"]) == 0
    assert json.loads((root / "scores" / "summary.json").read_text())["fdb"]["by_task"]["pause"]["tor"] == 0.0


def test_a_run_is_scored_only_by_its_own_benchmark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "run"
    root.mkdir()
    (root / "run.json").write_text(json.dumps({"benchmark": "fdb"}))
    assert main(["score", str(root), "--benchmark", "omni-duplex-eval"]) == 2
    assert "RUN_DIR is a fdb run; it cannot be scored by omni-duplex-eval's rules" in capsys.readouterr().err
    assert not (root / "scores").exists()


def test_fdb_options_are_refused_for_omni_duplex_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--dataset", "builtin", "--out", str(tmp_path / "o"), "--task", "pause"]) == 2
    assert "--task do not apply to --benchmark omni-duplex-eval" in capsys.readouterr().err
    (tmp_path / "r").mkdir()
    assert main(["score", str(tmp_path / "r"), "--benchmark", "omni-duplex-eval", "--words", "asr"]) == 2
    assert "Full-Duplex-Bench options" in capsys.readouterr().err
    assert main(["score", str(tmp_path / "r"), "--benchmark", "fdb", "--judge", "builtin"]) == 2
    assert "relevance LLM" in capsys.readouterr().err


def test_the_report_shows_the_fdb_selection_and_survives_missing_scores(tmp_path: Path) -> None:
    from duplexkit.bench.fdb.report import REPORT
    from duplexkit.bench.report import load_run
    from tests.bench.fdb.helpers import sample_folder

    root = tmp_path / "run"
    sample_folder(root / "pause" / "p1", task_file="pause.json", words=[])
    run = {"benchmark": "fdb", "dataset": {"selection": {"tasks": ["pause"], "ids": [], "limit": None}}}
    (root / "run.json").write_text(json.dumps(run))
    (root / "records" / "pause").mkdir(parents=True)
    (root / "records" / "pause" / "p1.meta.json").write_text(
        json.dumps({"split": "pause", "id": "p1", "status": "published"})
    )
    data = load_run(root)
    assert data.run.selection == "tasks: pause · limit: none"
    assert REPORT.extra is not None and "No fdb_scores.json" in REPORT.extra(data)
