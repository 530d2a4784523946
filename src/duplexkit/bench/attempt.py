"""What one attempt of a sample is given and what it leaves: the types the benchmark hooks and the shared
runner (`runner`) exchange, kept below both so neither imports the other for them.

`RunConfig` decides how samples are run (recorded whole in `run.json`); `Attempt` is what one session
observed, handed back by a benchmark's `run_attempt` and published (or withdrawn) by the runner.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from duplexkit.bench.retry import AttemptOutcome
from duplexkit.client import SessionBounds
from duplexkit.client.collector import Placement, SentenceTiming
from duplexkit.client.protocols import PROTOCOLS, detect_protocol
from duplexkit.client.reconnect import ResumePolicy

DEADLINE_MARGIN_S = 5.0
"""What the attempt's outer deadline adds to the sum of its inner bounds (scheduling, media conversion)."""


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides how samples are run; recorded whole in `run.json`.

    `url` is the server of one attempt (the runner sets it from its pool); `concurrency` is per server.
    """

    url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    pace: Literal["realtime", "as-fast-as-possible"] = "realtime"
    fps: float = 1.0
    chunk_ms: int = 200
    concurrency: int = 4
    bounds: SessionBounds = field(default_factory=SessionBounds)
    capacity_wait_max_s: float = 300.0
    keep_audio: bool = True
    resume: bool = True
    """Resume a session whose connection drops (`ResumePolicy`); the sample records `resumed: N`."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    protocol: str = "auto"
    """The wire protocol (`client.protocols`); `auto` detects it from the URL."""
    placement: Placement | None = None
    """Where output sits on the input timeline (`collector.Placement`; `None`: the protocol's default,
    `concatenated` for Moshi as Full-Duplex-Bench's client does, else `arrival`)."""
    sentence_timing: SentenceTiming = "audio"
    """How Omni-DuplexEval sentences are timed (`collector.SentenceTiming`): `audio`, the span of their own
    audio, or `arrival`, their deltas' arrival as vLLM-Omni's runner times them."""

    def resume_policy(self) -> ResumePolicy | None:
        """The client's resume policy for this run's sessions (duplex protocol only; others cannot)."""
        return ResumePolicy() if self.resume and self.resolved_protocol() == "duplex" else None

    def to_json(self) -> dict[str, Any]:
        """The config as recorded in `run.json`, with the bounds' fields inline."""
        data: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if key == "bounds":
                data.update(value)
            else:
                data[key] = value
        data["api_key"] = "***" if self.api_key else None
        return data

    def attempt_deadline_s(self, clip_s: float) -> float:
        """The outer bound of one attempt: every inner bound added up (`SessionBounds.total_s`, from the
        connect to the close's grace), plus `DEADLINE_MARGIN_S`, plus the capacity wait a server that
        admits by handshake may take (`SessionBounds.capacity_timeout_s`)."""
        admits = PROTOCOLS[self.resolved_protocol()].admits_with_ready
        capacity_s = (self.bounds.capacity_timeout_s or 0.0) if admits else 0.0
        return self.bounds.total_s(clip_s) + DEADLINE_MARGIN_S + capacity_s

    def resolved_protocol(self) -> str:
        """The wire protocol's name, `auto` resolved from the URL."""
        return detect_protocol(self.url) if self.protocol == "auto" else self.protocol


@dataclass(slots=True)
class Attempt:
    outcome: AttemptOutcome
    sentences: list[dict[str, Any]]
    meta: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    audio: np.ndarray | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    """Benchmark payloads for its `write_artifacts` (e.g. FDB's `output.json`), not recorded in the meta."""
    server_url: str | None = None
    """The server this attempt ran on (`None`: it never got one)."""
    capacity_wait_s: float = 0.0
    """How long its open socket waited for a session slot (a server that admits by handshake)."""
