"""A `duplexkit bench --benchmark omniinteract` run is read by (a stand-in for) OmniInteract's official
scorer through the manifest the run writes, to the same IA-QTF1 and NCCS `duplexkit score` gives, with the
same (deterministic) judge verdicts on both sides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duplexkit.cli import main
from tests.bench.judge.conftest import FakeJudge, completion
from tests.bench.omniinteract import official_eval

VERDICTS = official_eval.Verdicts(hallucination=False, ack=1.0, core=0.8, quality=0.6)
REPLY = json.dumps(
    {
        "hallucination": 0,
        "ack_score": 1.0,
        "core_score": 0.8,
        "spoiler": 0,
        "quality": 0.6,
        "trigger_phrase": "",
    }
)


def test_the_official_scorer_reads_a_run_to_the_same_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_judge: FakeJudge, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "run"
    argv = ["bench", "--benchmark", "omniinteract", "--dataset", "builtin", "--model", "scripted"]
    argv += ["--out", str(out), "--concurrency", "6", "--settle", "1"]
    assert main(argv) == 0, capsys.readouterr()
    fake_judge.script = lambda body: completion(REPLY)
    assert main(["score", str(out), "--judge-url", fake_judge.url, "--judge-model", "judge-x"]) == 0
    summary = json.loads((out / "scores" / "summary.json").read_text())

    # the completion bound is the reference runners' 900 s unless --drain-timeout says otherwise
    assert json.loads((out / "run.json").read_text())["config"]["drain_timeout_s"] == 900.0
    batch = json.loads((out / "batch_summary.json").read_text())
    assert batch["total"] == batch["success"] == len(batch["results"]) == 6 and batch["incomplete"] == 0
    assert all(r["status"] == "ok" and Path(r["output_dir"], ".done").is_file() for r in batch["results"])
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert {r["scene_type"] for r in rows} == {"multi_turn", "nested", "1QnA"} and len(rows) == 6
    transcript = json.loads(Path(rows[0]["model_json"]).read_text())
    assert isinstance(transcript, dict) and transcript["chunks"], "the official reader takes {chunks: [...]}"

    theirs = official_eval.evaluate(str(out / "manifest.jsonl"), lambda: VERDICTS)
    ours = summary["ia_qtf1"]
    assert theirs["all_global"] is not None and theirs["all_global"] > 0
    assert theirs["all_global"] == pytest.approx(ours["ia_qtf1"], abs=1e-4)
    assert theirs["1q1a_global"] == pytest.approx(ours["1q1a_global"]["ia_qtf1"], abs=1e-4)
    assert theirs["nccs"] == pytest.approx(summary["interruption"]["nccs"], abs=1e-4)
