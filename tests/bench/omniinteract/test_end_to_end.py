"""`duplexkit bench --benchmark omniinteract --dataset builtin --score --report` offline: the embedded server
with the scripted model, the built-in set, the offline judge (labelled not comparable) and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duplexkit.cli import main


def test_the_builtin_set_runs_scores_and_reports_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "run"
    argv = ["bench", "--benchmark", "omniinteract", "--dataset", "builtin", "--model", "scripted"]
    argv += ["--out", str(out), "--score", "--report", "--limit", "3", "--concurrency", "3", "--settle", "1"]
    code = main(argv)
    printed = capsys.readouterr().out
    assert code == 0, printed
    run = json.loads((out / "run.json").read_text())
    assert run["benchmark"] == "omniinteract" and run["dataset"]["selection"]["limit"] == 3
    assert run["eligibility"]["eligible"] is False and len(run["eligibility"]["ineligible_cases"]) == 3
    assert "not eligible for official scoring: 1q1a/0001 (clipped" in printed
    summary = json.loads((out / "scores" / "summary.json").read_text())
    assert summary["judge"]["kind"] == "builtin" and "not comparable" in summary["note"]
    assert summary["coverage"] == {"total": 3, "scored": 3, "skipped": 0, "errors": 0, "cached": 0}
    assert summary["word_timing"] == {"audio_text_marks": 3}
    by_scenario = summary["ia_qtf1"]["by_scenario"]
    assert {"realtime", "proactive", "nested", "interrupted"} <= set(by_scenario)
    assert 0.0 <= summary["ia_qtf1"]["ia_qtf1"] <= 1.0
    # the scripted model answers the commit too, and that reply plays past the end of the input
    assert summary["eligibility"]["eligible"] is False
    assert all(
        any(r.startswith("clipped") for r in case["reasons"])
        for case in summary["eligibility"]["ineligible_cases"]
    )
    for name in ("0001", "0002", "0003"):
        folder = out / "1q1a" / name
        assert (folder / ".done").is_file() and (folder / "output.wav").is_file()
        score = json.loads((out / "scores" / "1q1a" / f"{name}.json").read_text())
        assert score["status"] == "scored" and score["details"]["slots"]
    page = (out / "report.html").read_text()
    assert "IA-QTF1 by scenario" in page and "All Global" in page
    assert "IA-QTF1 ↑ All Global=" in printed and "best published 0.368 (MiniCPM-o 4.5" in printed
    assert "NOR ↓=" in printed and "NCCS ↑=" in printed
    # scoring again reuses every cached score
    assert main(["score", str(out)]) == 0
    assert json.loads((out / "scores" / "summary.json").read_text())["coverage"]["cached"] == 3


def test_options_of_another_benchmark_and_a_folder_of_another_benchmark_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = str(tmp_path / "run")
    assert main(["bench", "--dataset", "builtin", "--subset", "1q1a", "--out", out]) == 2
    assert "--subset do not apply to --benchmark omni-duplex-eval" in capsys.readouterr().err
    omni = ["bench", "--benchmark", "omniinteract", "--dataset", "builtin", "--out", out]
    assert main([*omni, "--family", "rtd"]) == 2
    assert "--family do not apply to --benchmark omniinteract" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text(json.dumps({"dataset": {"fingerprint": "x"}}))  # an older run
    assert main(omni) == 2
    assert "holds a run of another benchmark" in capsys.readouterr().err
