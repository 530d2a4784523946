"""What one attempt of a sample is given and what it leaves: the types and helpers the benchmark hooks and
the shared runner (`runner`) exchange, kept below both so neither imports the other for them (a benchmark
package imports this, never `runner`).

`RunConfig` decides how samples are run (recorded whole in `run.json`) and opens an attempt's client
(`RunConfig.client`); `Attempt` is what one session observed, handed back by a benchmark's `run_attempt`
and published (or withdrawn) by the runner. The attempt helpers every benchmark uses live here too:
`CapacityRefused` (no slot now: waited out, not an attempt), `is_capacity_refusal` and
`refused_for_capacity`, `record_close`, `record_resumes`, `record_responses` and `client_record`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from duplexkit.bench.retry import AttemptOutcome
from duplexkit.client import CloseResult, DuplexClient, SessionBounds, SessionError
from duplexkit.client.collector import EventCollector, Placement, SentenceTiming
from duplexkit.client.events import error_code_of
from duplexkit.client.protocols import PROTOCOLS, detect_protocol
from duplexkit.client.reconnect import ResumePolicy
from duplexkit.protocol.audio import AudioFormat
from duplexkit.protocol.errors import ErrorCode

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
    audio_format: AudioFormat = "pcm16"
    """The audio on the wire both ways: `pcm16`, or telephone audio (`g711_ulaw`, `g711_alaw`: 8 kHz), as
    a phone line carries it (tau-Voice benchmarks at 8 kHz mu-law)."""
    sentence_timing: SentenceTiming = "audio"
    """How Omni-DuplexEval sentences are timed (`collector.SentenceTiming`): `audio`, the span of their own
    audio, or `arrival`, their deltas' arrival as vLLM-Omni's runner times them."""

    def client(self, bounds: SessionBounds | None = None, **overrides: Any) -> DuplexClient:
        """The client of one attempt, as every benchmark opens it: this run's server, key, model,
        protocol, resume policy, output placement and audio format, the connect bounded by `bounds`
        (default: the run's). `overrides` are further `DuplexClient` options, or replace these."""
        options: dict[str, Any] = {
            "api_key": self.api_key,
            "model": self.model,
            "protocol": self.protocol,
            "open_timeout_s": (bounds or self.bounds).open_timeout_s,
            "resume": self.resume_policy(),
            "placement": self.placement,
            "audio_format": self.audio_format,
        }
        return DuplexClient(self.url, **(options | overrides))

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


CAPACITY_CODES = frozenset({ErrorCode.SESSION_CAPACITY_EXHAUSTED.value, "resource_exhausted"})
"""Refusals that mean "no slot now" (ours, and vLLM-Omni's), not a failed attempt."""
CAPACITY_HTTP_STATUSES = frozenset({429, 503})
"""Handshake statuses that mean the same, from servers that refuse before accepting the socket."""


def is_capacity_refusal(event: dict[str, Any]) -> bool:
    """A capacity code (also in vLLM-Omni's flat handshake errors), or any retryable `rate_limit_error`."""
    error = event.get("error")
    if isinstance(error, str):
        return str(event.get("code")) in CAPACITY_CODES
    if not isinstance(error, dict):
        return False
    if str(error.get("code")) in CAPACITY_CODES:
        return True
    return error.get("type") == "rate_limit_error" and error.get("retryable") is True


def record_close(
    close: CloseResult | None, outcome: AttemptOutcome, meta: dict[str, Any], bounds: SessionBounds
) -> None:
    """An attempt's close into its outcome and `meta["close"]`: a close that outlived its outer wait
    (`None`: `close_timeout_s + close_grace_s`) or was not answered cleanly is a `close_timeout` of the
    bound that actually applied (`CloseResult.bound_s`: the wait for `session.closed`, or the socket's
    closing handshake for a protocol that closes with the socket)."""
    bound_s = bounds.close_timeout_s + bounds.close_grace_s if close is None else close.bound_s
    if close is None or not close.clean:
        outcome.close_timeout = bound_s
    meta["close"] = (
        {"clean": False, "outcome": "timeout", "bound_s": bound_s}
        if close is None
        else {
            "clean": close.clean,
            "outcome": close.outcome,
            "elapsed_s": round(close.elapsed_s, 3),
            "bound_s": bound_s,
        }
    )


class CapacityRefused(Exception):
    """The server has no free session slot right now (retryable, not an attempt)."""


def bounds_record(
    bounds: SessionBounds, input_bound_s: float, *waits: str, **more: float | None
) -> dict[str, float | None]:
    """What a sample's `meta["bounds"]` records of the bounds its attempt ran under: the configure bound
    and the input's (`input_bound_s`), each of `bounds`' named `waits` (`commit`, `drain`, `ack`, `close`:
    `<wait>_timeout`), then `more` under their own names (a benchmark's own words for a bound)."""
    record: dict[str, float | None] = {
        "configure_timeout": bounds.configure_timeout_s,
        "input_timeout": input_bound_s,
    }
    for wait in waits:
        record[f"{wait}_timeout"] = getattr(bounds, f"{wait}_timeout_s")
    return record | more


def refused_for_capacity(exc: SessionError) -> SessionError | CapacityRefused:
    """What a session error that ends an attempt's opening is: `CapacityRefused` when the server refused
    for capacity (`is_capacity_refusal`), else itself. `raise refused_for_capacity(exc) from None`."""
    return CapacityRefused(str(exc)) if is_capacity_refusal(exc.event or {}) else exc


def record_responses(collector: EventCollector, outcome: AttemptOutcome) -> None:
    """The server's errors (their codes) and whether every response it opened finished, into `outcome`."""
    outcome.server_errors = [str(error_code_of(f)) for f in collector.failures()]
    outcome.response_done = bool(collector.responses()) and not collector.open_responses()


def client_record(client: DuplexClient) -> dict[str, Any]:
    """What every sample records about its client whatever the benchmark: where its output was placed on
    the input timeline (`audio_placement`), the audio on the wire (`audio_format`: `pcm16`, or G.711 at
    telephone quality), the model the server said served the session (`server_model`, from
    `session.created`; `None` when it named none; `server_model_identity`, the `id` of its
    `model_identity`: what exactly served it) and what the wire protocol counted (`wire`, Moshi's
    frames)."""
    record: dict[str, Any] = {
        "audio_placement": client.collector.placement,
        "audio_format": client.audio_format,
        "server_model": client.server_model,
        "server_model_identity": client.server_model_identity,
    }
    wire = client.protocol.wire_report()
    if wire is not None:
        record["wire"] = wire
    return record


def record_resumes(client: DuplexClient, meta: dict[str, Any], outcome: AttemptOutcome) -> None:
    """A sample's `resumed: N` (sessions resumed after a lost connection); a resync fails the attempt,
    since the events the server could not replay are lost to the sample."""
    meta["resumed"] = client.resumed
    if client.resync is not None and outcome.transport_error is None:
        outcome.transport_error = f"resync_required: {client.resync.get('reason')}"
