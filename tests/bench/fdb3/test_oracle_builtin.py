"""Full-Duplex-Bench v3's built-in oracle run (`--oracle-calls`: the scripted model is told each case's
expected calls) end to end through the server's tool contract. `ecommerce_02` chains two calls (search,
then add to cart): the answer must be asked for once both have their outputs. When each output asked for
one while the other call was still pending, the scripted policy issued its calls again: 72 calls, no
answer, Pass@1 0.875."""

from __future__ import annotations

import json
from pathlib import Path

from duplexkit.cli import main


def test_the_built_in_oracle_run_makes_each_call_once_and_passes_every_case(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["bench", "--benchmark", "fdb3", "--dataset", "builtin", "--oracle-calls", "--model", "scripted"]
    assert main([*args, "--out", str(out), "--score", "--concurrency", "8"]) == 0
    results = sorted(out.glob("*/*/result_duplexkit.json"))
    assert len(results) == 8
    for path in results:
        result = json.loads(path.read_text())
        expected = json.loads((path.parent / "metadata.json").read_text())["expected_tool_calls"]
        made = [(c["function"], c["args"]) for c in result["actual_tool_calls"]]
        assert made == [(c["function"], c["args"]) for c in expected], path.parent.name
        assert result["status"] == "completed" and result["transcript"], path.parent.name
    scores = json.loads((out / "fdb3_scores.json").read_text())
    assert scores["pass_rate"]["overall_pass_rate"] == 1.0
