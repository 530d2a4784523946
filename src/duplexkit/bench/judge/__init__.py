"""The shared judging harness: the `Judge` protocol, the OpenAI-compatible chat client, lenient reply parsing,
video frames for judges, `score_run` (every published sample judged once, cached, summarised) and
`make_judge` (a benchmark's judge from `JudgeSettings`).

What a benchmark's judges ask and how its summary reads live in its package (Omni-DuplexEval:
`duplexkit.bench.omni_duplex_eval`); `score_run` reaches them through the benchmark's hooks. See
docs/scoring.md.
"""

from duplexkit.bench.judge.base import Judge, JudgeInfo, SampleScore, ScoringError
from duplexkit.bench.judge.client import ChatClient, ContextOverflow, JudgeRequestError, JudgeUnreachable
from duplexkit.bench.judge.run import RunError, Summary, format_summary, score_run
from duplexkit.bench.judge.settings import JudgeSettings, make_judge

__all__ = [
    "ChatClient",
    "ContextOverflow",
    "Judge",
    "JudgeInfo",
    "JudgeRequestError",
    "JudgeSettings",
    "JudgeUnreachable",
    "RunError",
    "SampleScore",
    "ScoringError",
    "Summary",
    "format_summary",
    "make_judge",
    "score_run",
]
