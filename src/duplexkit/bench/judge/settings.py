"""The judge a user asks for, as plain values, and the checks every benchmark's judge shares.

`duplexkit score` and `duplexkit bench --score` parse their judge options into `JudgeSettings`;
`make_judge` resolves which kind of judge is meant and hands the settings to the benchmark's `judge` hook,
which builds its own judge (its prompts, its builtin judge) with the helpers below. Refusals raise
`ConfigError` with a message naming the option to change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from duplexkit.bench.errors import ConfigError
from duplexkit.bench.judge.client import TEMPERATURE, ChatClient

if TYPE_CHECKING:
    from duplexkit.bench.judge.base import Judge


@dataclass(frozen=True)
class JudgeSettings:
    """Which judge, where, and how many requests in flight."""

    kind: Literal["llm", "builtin"] | None = None
    """`None`: an LLM judge when `url` is given, else the builtin judge for a run on the built-in dataset."""
    url: str | None = None
    model: str | None = None
    api_key: str = "none"
    timeout_s: float = 120.0
    concurrency: int = 4
    reminder_window_s: float | None = None
    """Omni-DuplexEval: PR reminders are judged on the sentences starting in [t, t + this]; `None`: its
    default. Other benchmarks ignore it."""
    protocol_dir: Path | None = None
    """Omni-DuplexEval: read its judge prompts from this folder instead of duplexkit's own."""

    def refuse_builtin_extras(self) -> None:
        """The builtin judge calls no model: refuse settings that name one."""
        if self.url or self.model or self.protocol_dir:
            raise ConfigError("--judge builtin takes no --judge-url, --judge-model or --protocol-dir")

    def check_llm(self) -> None:
        """An LLM judge needs a URL, a model and a positive timeout."""
        if not self.url or not self.model:
            raise ConfigError("an LLM judge needs both --judge-url and --judge-model")
        if self.timeout_s <= 0:
            raise ConfigError("--judge-timeout must be positive")

    def chat_client(self, *, temperature: float = TEMPERATURE, max_tokens: int | None = None) -> ChatClient:
        """The chat client of an LLM judge (after `check_llm`)."""
        assert self.url is not None and self.model is not None
        return ChatClient(
            base_url=self.url,
            model=self.model,
            api_key=self.api_key,
            concurrency=self.concurrency,
            timeout_s=self.timeout_s,
            temperature=temperature,
            max_tokens=max_tokens,
        )


class JudgeHook(Protocol):
    """What `make_judge` needs of a benchmark: its `judge` hook (`benchmark.JudgeScoring.judge`)."""

    def judge(self, settings: JudgeSettings) -> Judge: ...


def make_judge(benchmark: JudgeHook, settings: JudgeSettings, dataset_source: str | None) -> Judge:
    """`benchmark`'s judge for `settings`, for a run on the dataset `dataset_source` (its recorded spec).

    With neither `kind` nor `url`, a run on the built-in dataset (`builtin`) gets the builtin judge; any
    other run needs a judge named. Raises `ConfigError` when the settings cannot build a judge.
    """
    kind = settings.kind or ("llm" if settings.url else "builtin" if dataset_source == "builtin" else None)
    if kind is None:
        raise ConfigError(
            "give --judge-url URL and --judge-model NAME (or --judge builtin for the built-in dataset)"
        )
    if settings.reminder_window_s is not None and not settings.reminder_window_s > 0:
        raise ConfigError("--reminder-window must be positive")
    return benchmark.judge(replace(settings, kind=kind))
