"""The model plugin interface: what a model declares, how it is configured per session, how it is stepped.

A plugin is loaded once per process and shared; `new_session` gives each session its own state. The server
steps a session's model once per unit, in order, and never two units of one session at once. A step is an
async iterator of decisions so a plugin can stream a reply in several segments; CPU-bound plugins must do
their work off the event loop (e.g. `asyncio.to_thread`) so one slow step never stalls other sessions.

A plugin that can step many sessions in one call (one batched forward pass on a GPU) sets `batching` and
implements `step_batch`; the server then gathers the units due across sessions into batches instead of
calling `ModelSession.step`. Per-session state still lives in each `ModelSession`.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from duplexkit.engine import Decision, EngineConfig, Unit
from duplexkit.protocol.client_events import FunctionTool, ToolChoice

CONTINUATION_BUDGET_MS = 8_000
"""How long the server keeps stepping a reply on synthesised silence after input pauses: 8 units of the
protocol's default 1 s grid (vLLM-Omni's bound), the same time for models with smaller units."""


@dataclass(frozen=True, slots=True)
class ModelCapabilities:
    """What a model can do; advertised to clients in `session.created.session.capabilities`."""

    chunk_period_ms: int = 1000
    first_unit_ms: int | None = None
    input_sample_rate_hz: int = 16_000
    output_sample_rate_hz: int = 24_000
    modalities: tuple[Literal["audio", "text"], ...] = ("audio", "text")
    accepts_video: bool = False
    supports_barge_in: bool = True
    function_calling: bool = False
    """The model calls the session's `tools` (`FunctionCall` decisions). One that cannot still takes a
    session that declares them (as OpenAI's realtime models all do): they are echoed and never called,
    and `session.capabilities.supports_function_calling` says so."""
    input_clocked: bool = False
    """The model steps only on the client's input frames, as its own server does (Moshi: one output frame
    per input frame): the engine never steps synthesised silence into it to continue a reply past the
    input, so a stalled or late input never shifts what the model hears; the reply waits for more input."""

    def engine_config(
        self,
        model: str,
        *,
        max_sessions: int,
        server_vad: bool = False,
        model_identity: Mapping[str, str] | None = None,
    ) -> EngineConfig:
        return EngineConfig(
            model=model,
            model_identity=None if model_identity is None else dict(model_identity),
            chunk_period_ms=self.chunk_period_ms,
            first_unit_ms=self.first_unit_ms,
            input_sample_rate_hz=self.input_sample_rate_hz,
            output_sample_rate_hz=self.output_sample_rate_hz,
            modalities=self.modalities,
            accepts_video=self.accepts_video,
            supports_barge_in=self.supports_barge_in,
            supports_function_calling=self.function_calling,
            max_sessions=max_sessions,
            continuation_limit=max(1, math.ceil(CONTINUATION_BUDGET_MS / self.chunk_period_ms)),
            input_clocked=self.input_clocked,
            server_vad=server_vad,
        )


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings; a session's overrides produce a new value and never touch the plugin's defaults."""

    temperature: float = 0.7
    max_tokens: int = 512
    instructions: str | None = None
    voice: str | None = None
    tools: tuple[FunctionTool, ...] = ()
    """The functions the session offers the model (`session.tools`); the model calls them with
    `FunctionCall` decisions and receives their outputs on `Unit.tool_outputs`."""
    tool_choice: ToolChoice = "auto"

    def with_overrides(
        self,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        instructions: str | None = None,
        voice: str | None = None,
        tools: Sequence[FunctionTool] | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> SamplingParams:
        return replace(
            self,
            temperature=self.temperature if temperature is None else temperature,
            max_tokens=self.max_tokens if max_tokens is None else max_tokens,
            instructions=self.instructions if instructions is None else instructions,
            voice=self.voice if voice is None else voice,
            tools=self.tools if tools is None else tuple(tools),
            tool_choice=self.tool_choice if tool_choice is None else tool_choice,
        )


class ModelSession(ABC):
    """One session's model state."""

    sampling: SamplingParams

    @abstractmethod
    def configure(self, sampling: SamplingParams, extra_body: Mapping[str, Any]) -> None:
        """Apply the session's settings; raise `ValueError` (naming the key) for a bad `extra_body` value,
        leaving the previous settings in place."""

    @abstractmethod
    def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        """Decide for one unit: yield `Listen`, or one or more `Speak` segments (the last may end the turn).
        `request_started_at` is the server's monotonic time when the stepper took this unit for the model
        (the server's TTFT/TTFP clock starts earlier, when the unit was submitted to the queue)."""

    async def prepare(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """Bring the model's state in line with the settings `configure` accepted (e.g. prefill a persona
        prompt) before the server announces them: awaited before `session.created` / `session.updated`
        (and so before the Moshi handshake) and before the session's next unit is stepped."""

    def interrupt(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """The reply in progress was cut off (barge-in, cancel): drop what remains of it."""

    def heard(self, text: str) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """What the listener heard of your latest reply, per the server's playback ledger (the client's
        `playback.ack`s, trimmed at a barge-in); called again as that grows. Conversation history built
        from this holds only what was played."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to do by default
        """The session ended: give back shared resources (decoders, tasks). Called once, always."""


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """How the server gathers units into a batch: at most `max_size` units, and a batch leaves no later
    than `max_wait_ms` after its oldest unit became due (the wait budget), full or not."""

    max_size: int = 32
    max_wait_ms: float = 20.0

    def __post_init__(self) -> None:
        if self.max_size < 1:
            raise ValueError(f"batch max_size must be at least 1, got {self.max_size}")
        if not (math.isfinite(self.max_wait_ms) and self.max_wait_ms >= 0):
            raise ValueError(f"batch max_wait_ms must be a finite number >= 0, got {self.max_wait_ms}")


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One session's unit in a batch; `session` is the `ModelSession` this plugin's `new_session` made."""

    session: ModelSession
    unit: Unit
    request_started_at: float


@dataclass(frozen=True, slots=True)
class SlotStats:
    """A slotted plugin's occupancy and work so far, read by the server's `/metrics` at scrape time.

    `frames_frozen` counts, per batched call, the occupied slots that had no frame in it (held still by
    the exec mask while the others stepped)."""

    slots: int
    in_use: int
    ticks: int
    tick_seconds: float
    frames_stepped: int
    frames_frozen: int


@dataclass(frozen=True, slots=True)
class ModelParameter:
    """One `--model-arg KEY=VALUE` key a model accepts, and what it sets (its `--help` text)."""

    name: str
    help: str


def check_model_args(model: str, parameters: Sequence[ModelParameter], args: Mapping[str, str]) -> None:
    """`ValueError` naming the keys of `args` that `model`'s `parameters` do not list: a misspelt
    server-level argument must not silently fall back to a default."""
    known = {p.name for p in parameters}
    unknown = sorted(set(args) - known)
    if unknown:
        valid = ", ".join(sorted(known))
        raise ValueError(f"unknown {model} model argument(s) {', '.join(unknown)}; valid: {valid}")


@dataclass(frozen=True, slots=True)
class ReplyCapacity:
    """How many replies a model makes at once at full speed, and why: sessions past it queue their
    replies, so a run at higher concurrency measures the queue rather than the model."""

    replies: int
    why: str


class ModelPlugin(ABC):
    name: str
    capabilities: ModelCapabilities
    default_sampling: SamplingParams
    batching: BatchPolicy | None = None
    """Set (with `step_batch`) by plugins that step many sessions at once; `None`: per-session stepping."""
    max_sessions: int | None = None
    """Sessions the plugin can hold at once (its slots); the server admits no more than this, refusing
    the rest with the retryable capacity error. `None`: no limit of the plugin's own."""
    reply_capacity: ReplyCapacity | None = None
    """`None`: the model has no such bound of its own (the machine's cores do)."""
    parameters: ClassVar[tuple[ModelParameter, ...]] = ()
    """Every `--model-arg` key `from_args` accepts: the one source of its check for unknown keys and of the
    command line's help."""

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> ModelPlugin:
        """The model built from `--model-arg` pairs; `ValueError` names an unknown key (one not in
        `parameters`), a bad value or the extra to install. Defined by the built-in models (`MODELS`)."""
        raise NotImplementedError(f"{cls.__name__} is not a built-in model: it takes no --model-arg")

    def identity(self) -> dict[str, str]:
        """What exactly this plugin serves, beyond its name: `id`, one string that differs whenever the
        model does (a checkpoint's content fingerprint, the cascade's LLM and voice, a remote responder's
        model), and the parts it is made of. `session.created` (`session.model_identity`), `/healthz` and
        every run record carry it; runs of different ids do not merge. Called once per server."""
        return {"id": self.name}

    def slot_stats(self) -> SlotStats | None:
        """Occupancy and tick figures of a slotted plugin; `None` for plugins without slots."""
        return None

    @abstractmethod
    def new_session(self) -> ModelSession:
        """Fresh per-session state, starting from the plugin's defaults."""

    async def step_batch(self, items: Sequence[BatchItem]) -> Sequence[Decision | Exception]:
        """Decide for every item at once: one `Listen` or `Speak` per item, in the items' order, or an
        exception for an item that failed (only that session's response fails). Never holds two units of
        one session; a session's units arrive in order. Called only when `batching` is set."""
        raise NotImplementedError(f"{type(self).__name__} sets batching but does not implement step_batch")


FINGERPRINT_SAMPLE_BYTES = 4 * 1024 * 1024
"""How much of a file's start, middle and end `content_fingerprint` reads."""


def content_fingerprint(*paths: Path) -> str:
    """A fingerprint of the files' content: `sha256:` and 16 hex digits of a SHA-256 over each file's size
    and its first, middle and last 4 MiB (all of a file up to 12 MiB). Sampled, so a 15 GB checkpoint is
    told apart in milliseconds: two checkpoints that differ only between those samples, at the same size,
    would share it (no fine-tune or quantisation does)."""
    digest = hashlib.sha256()
    for path in paths:
        size = path.stat().st_size
        digest.update(f"{path.name}:{size}:".encode())
        with path.open("rb") as handle:
            if size <= 3 * FINGERPRINT_SAMPLE_BYTES:
                digest.update(handle.read())
                continue
            for offset in (0, size // 2, size - FINGERPRINT_SAMPLE_BYTES):
                handle.seek(offset)
                digest.update(handle.read(FINGERPRINT_SAMPLE_BYTES))
    return f"sha256:{digest.hexdigest()[:16]}"
