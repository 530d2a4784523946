"""The shared judging harness: the `Judge` protocol, the OpenAI-compatible chat client, lenient reply parsing,
video frames for judges, and `score_run` (every published sample judged once, cached, summarised).

What a benchmark's judges ask and how its summary reads live in its package (Omni-DuplexEval:
`duplexkit.bench.omni_duplex_eval`); `score_run` reaches them through the benchmark's hooks. See
docs/scoring.md.
"""

from duplexkit.bench.judge.base import Judge, JudgeInfo, SampleScore, ScoringError
from duplexkit.bench.judge.client import ChatClient, ContextOverflow, JudgeRequestError, JudgeUnreachable
from duplexkit.bench.judge.run import RunError, Summary, score_run

__all__ = [
    "ChatClient",
    "ContextOverflow",
    "Judge",
    "JudgeInfo",
    "JudgeRequestError",
    "JudgeUnreachable",
    "RunError",
    "SampleScore",
    "ScoringError",
    "Summary",
    "score_run",
]
