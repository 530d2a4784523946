"""`duplexkit demo` does the whole job: bench on the builtin dataset, offline scores, the report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from duplexkit.cli import build_parser, main


def test_demo_runs_the_builtin_benchmark_scores_it_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--pace", "as-fast-as-possible", "--limit", "2"]) == 0
    assert "then open http://127.0.0.1:8000/ in a browser" in capsys.readouterr().out
    run = json.loads((out / "run.json").read_text())
    assert run["dataset"]["source"] == "builtin" and run["counts"]["published"] == 2
    published = [p for p in out.glob("records/*_*/*.json") if not p.name.endswith(".meta.json")]
    assert len(published) == 2
    summary = json.loads((out / "scores" / "summary.json").read_text())
    assert summary["judge"]["kind"] == "builtin" and summary["coverage"]["scored"] == 2
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("command", ["serve", "talk", "bench", "merge", "score", "report", "demo"])
def test_every_subcommand_documents_its_options(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    assert f"usage: duplexkit {command}" in capsys.readouterr().out
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    undocumented = [
        action.dest
        for action in subparsers.choices[command]._actions
        if not action.help and not isinstance(action, argparse._HelpAction)
    ]
    assert undocumented == []
