"""Every attempted sample counts in the means: a judge error is reported and counted, never dropped."""

from __future__ import annotations

from duplexkit.bench.judge.base import JudgeInfo
from duplexkit.bench.omni_duplex_eval.scoring import summarise

JUDGE = JudgeInfo(kind="llm", model="m", url=None, prompt_version="v", prompt_source="test")


def meta(sample_id: str, family: str = "pr") -> dict[str, str]:
    return {"split": "PR_correction", "id": sample_id, "family": family, "task": "correction"}


def test_a_judge_error_stays_in_the_denominator_as_zero() -> None:
    metas = [meta("a"), meta("b"), meta("c"), meta("d")]
    outcomes = {
        ("PR_correction", "a"): ("scored", {"all_success": 1.0}),
        ("PR_correction", "b"): ("cached", {"all_success": 1.0}),
        ("PR_correction", "c"): ("error", {}),
        ("PR_correction", "d"): ("skipped", {}),
    }
    summary = summarise(JUDGE, metas, outcomes)
    # 2 successes over 4 attempted samples, by hand: 0.5 (dropping the error would read 2/3)
    assert summary.pr["mean_all_success"] == 0.5
    assert (summary.pr["samples"], summary.pr["scored"], summary.pr["skipped"], summary.pr["errors"]) == (
        4,
        2,
        1,
        1,
    )
    assert summary.pr["by_task"]["correction"]["mean_all_success"] == 0.5
    assert summary.coverage == {"total": 4, "scored": 2, "skipped": 1, "errors": 1, "cached": 1}
    assert not summary.complete and summary.to_json()["complete"] is False
