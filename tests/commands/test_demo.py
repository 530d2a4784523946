"""`duplexkit demo` does the whole job: bench on the builtin dataset, offline scores, the report."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import pytest

from duplexkit import commands
from duplexkit.cli import build_parser, main
from duplexkit.models import MODELS


def test_demo_runs_the_builtin_benchmark_scores_it_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--pace", "as-fast-as-possible", "--limit", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    # The concurrency is the model's own reply capacity, and the output says why.
    [why] = [line for line in printed if "at a time" in line]
    assert "2 samples" in why and "1 at a time (cascade: " in why and "one context" in why
    assert json.loads((out / "run.json").read_text())["config"]["concurrency"] == 1
    # The last lines are a command that runs as typed, then the playground's URL.
    command, url = printed[-2].split(), printed[-1]
    assert Path(command[0]).is_file() and command[0].endswith("duplexkit") and command[1:] == ["serve"]
    assert url.startswith("then open http://127.0.0.1:8000/")
    run = json.loads((out / "run.json").read_text())
    assert run["dataset"]["source"] == "builtin" and run["counts"]["published"] == 2
    published = list(out.glob("*_*/*.json"))  # Omni-DuplexEval sentences: <split>/<id>.json
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


def test_no_subcommand_imports_the_cli_that_registers_it() -> None:
    """`cli` imports `commands`; a command that imported `cli` back (demo once did) would close a cycle."""
    folder = Path(commands.__file__).parent
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "duplexkit.cli" not in imported, path.name


@pytest.mark.parametrize("command", ["serve", "talk", "bench"])
def test_model_arg_help_lists_every_key_of_every_built_in_model(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for name, model in MODELS.items():
        assert f"[{name}]" in text
        for parameter in model.parameters:
            assert f"{parameter.name}: {' '.join(parameter.help.split())}" in text, (name, parameter.name)
