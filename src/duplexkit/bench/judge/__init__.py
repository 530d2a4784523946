"""Judging a run: the Omni-DuplexEval rubric with an LLM judge, or offline for the built-in dataset.

`score_run(run_dir, judge)` scores a run folder with a `Judge`: `LLMJudge(ChatClient(...), prompts)` for any
OpenAI-compatible judge model, or `BuiltinJudge()` for the built-in dataset. See docs/scoring.md.
"""

from duplexkit.bench.judge.base import Judge, JudgeInfo, SampleScore, ScoreRequest, ScoringError
from duplexkit.bench.judge.builtin import BuiltinJudge
from duplexkit.bench.judge.client import ChatClient, ContextOverflow, JudgeRequestError, JudgeUnreachable
from duplexkit.bench.judge.prompts import BUILTIN_PROMPTS, PROMPT_VERSION, PromptSet, load_protocol_dir
from duplexkit.bench.judge.run import RunError, Summary, score_run
from duplexkit.bench.judge.scorers import LLMJudge

__all__ = [
    "BUILTIN_PROMPTS",
    "PROMPT_VERSION",
    "BuiltinJudge",
    "ChatClient",
    "ContextOverflow",
    "Judge",
    "JudgeInfo",
    "JudgeRequestError",
    "JudgeUnreachable",
    "LLMJudge",
    "PromptSet",
    "RunError",
    "SampleScore",
    "ScoreRequest",
    "ScoringError",
    "Summary",
    "load_protocol_dir",
    "score_run",
]
