"""The `scripted` model: a deterministic duplex double for tests and benchmarks.

By default it treats a unit as speech when its RMS is at least `speech_rms` (int16 full scale = 1.0). After
speech followed by one silent unit, or on a commit, it answers with `reply`: a soft tone of `ms_per_char`
per character, cut into one segment per unit. The first segment's first token is produced
`first_output_ms` after the unit's request started, later tokens `token_ms` apart; it really waits for
those times, so the server measures them like any model's. Otherwise it listens.

With `tool_calls` (a JSON list of `{"name", "arguments"}`) and the session offering those functions, a
turn is answered with those function calls (one response, the last call ending it) instead of the reply;
once their outputs have come and the client asks for a response (`response.create`: a final unit), it
speaks `reply` with `{output}` replaced by the outputs (joined by a space). A user who speaks while a call
waits for its output barges in (`Interrupt`): the call is retired, and the turn is answered afresh.

Alternatively a script of explicit per-unit decisions (`script`, a JSON list or a path to one) replaces
the policy: `{"listen": true}` or `{"speak": "text", "end_of_turn": true}`, one entry per stepped unit.

With `batch_size` (and optionally `batch_wait_ms`) set, the server steps its sessions through
`step_batch`: the same decisions per session, a batch lasting as long as its longest member's step.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.engine import Decision, FunctionCall, Interrupt, Listen, Speak, Unit
from duplexkit.models.base import (
    BatchItem,
    BatchPolicy,
    ModelCapabilities,
    ModelParameter,
    ModelPlugin,
    ModelSession,
    SamplingParams,
    check_model_args,
)
from duplexkit.protocol.units import ms_to_samples


@dataclass(frozen=True, slots=True)
class ScriptEntry:
    speak: str | None = None
    end_of_turn: bool = True


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    name: str
    arguments: str
    """JSON-encoded, as the wire carries it."""


@dataclass(frozen=True, slots=True)
class ScriptedParams:
    reply: str = "This is a scripted reply."
    speech_rms: float = 0.003
    first_output_ms: float = 200.0
    token_ms: float = 20.0
    ms_per_char: float = 60.0
    tone_hz: float = 220.0
    script: tuple[ScriptEntry, ...] | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()

    @classmethod
    def parse(cls, base: ScriptedParams, values: Mapping[str, Any]) -> ScriptedParams:
        """`base` with `values` applied (strings from `--model-arg` or JSON from `extra_body`).

        Unknown keys are ignored (`extra_body` is shared with other consumers); a bad value raises
        `ValueError` naming the key.
        """
        changes: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in values:
                continue
            raw = values[f.name]
            try:
                changes[f.name] = _coerce(f.name, raw)
            except (TypeError, ValueError, OSError) as exc:
                raise ValueError(f"{f.name}: {exc}") from None
        return replace(base, **changes)


def _coerce(name: str, raw: Any) -> Any:
    if name == "reply":
        if not isinstance(raw, str):
            raise TypeError("must be a string")
        return raw
    if name == "script":
        return _load_script(raw)
    if name == "tool_calls":
        return _load_calls(raw)
    value = float(raw)
    if not math.isfinite(value) or value < 0 or (name in {"ms_per_char", "tone_hz"} and value == 0):
        raise ValueError(f"must be a finite number {'> 0' if name in {'ms_per_char', 'tone_hz'} else '>= 0'}")
    return value


def _load_script(raw: Any) -> tuple[ScriptEntry, ...]:
    if isinstance(raw, str):
        raw = json.loads(Path(raw).read_text() if not raw.lstrip().startswith("[") else raw)
    if not isinstance(raw, list):
        raise TypeError("must be a list of decisions")
    entries = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or ("speak" in item) == bool(item.get("listen")):
            raise ValueError(f"entry {i} must be {{'listen': true}} or {{'speak': text}}")
        speak = item.get("speak")
        if speak is not None and not isinstance(speak, str):
            raise TypeError(f"entry {i}: 'speak' must be a string")
        entries.append(ScriptEntry(speak=speak, end_of_turn=bool(item.get("end_of_turn", True))))
    return tuple(entries)


def _load_calls(raw: Any) -> tuple[ScriptedCall, ...]:
    if isinstance(raw, str):
        raw = json.loads(Path(raw).read_text() if not raw.lstrip().startswith("[") else raw)
    if not isinstance(raw, list):
        raise TypeError("must be a list of {'name', 'arguments'} calls")
    calls = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError(f"call {i} must be {{'name': str, 'arguments': object}}")
        arguments = item.get("arguments", {})
        if not isinstance(arguments, dict):
            raise TypeError(f"call {i}: 'arguments' must be an object")
        calls.append(ScriptedCall(item["name"], json.dumps(arguments)))
    return tuple(calls)


@dataclass(frozen=True, slots=True)
class PlannedSegment:
    """A reply segment and when (ms after the request start) each of its tokens is produced."""

    tokens: tuple[str, ...]
    audio: npt.NDArray[np.float32]
    end_of_turn: bool
    token_offsets_ms: tuple[float, ...]


class ScriptedPolicy:
    """The Sans-I/O part of the scripted model: what to do for each unit, and on what schedule."""

    def __init__(self, params: ScriptedParams, capabilities: ModelCapabilities) -> None:
        self.params = params
        self.capabilities = capabilities
        self._heard_speech = False
        self._pending: list[PlannedSegment] = []
        self._steps = 0
        self._calls = 0
        self._awaiting: set[str] = set()
        """Calls made whose outputs have not come."""
        self._outputs: list[str] = []
        """Outputs received, to be spoken when the client asks for the answer."""
        self.tools: frozenset[str] = frozenset()
        """The functions the session offers; only those of `tool_calls` among them are called."""

    def decide(self, unit: Unit) -> Listen | PlannedSegment | Interrupt | list[FunctionCall]:
        for result in unit.tool_outputs:
            if result.call_id in self._awaiting:
                self._awaiting.discard(result.call_id)
                self._outputs.append(result.output)
        if self._pending:  # a reply in progress continues before anything else is decided
            return self._next_segment()
        if self._outputs and not self._awaiting and unit.final:  # the client asks for the answer
            outputs, self._outputs = " ".join(self._outputs), []
            self._pending = self._plan(self.params.reply.replace("{output}", outputs), end_of_turn=True)
            return self._next_segment()
        if self.params.script is not None:
            self._steps += 1
            return self._scripted(self._steps - 1)
        if unit.force_listen:
            return Listen()
        speech = (
            unit.is_speech if unit.is_speech is not None else _rms(unit.samples) >= self.params.speech_rms
        )
        if speech and not unit.final:
            self._heard_speech = True
            if self._awaiting:  # the user speaks while a call runs: a barge-in on it
                self._awaiting.clear()
                return Interrupt()
            return Listen()
        if self._awaiting and (unit.final or not speech):  # the turn's calls wait for their outputs
            return Listen("silence_or_noise")
        if unit.final or (self._heard_speech and not unit.continuation):
            self._heard_speech = False
            calls = self._tool_calls()
            if calls:
                return calls
            self._pending = self._plan(self.params.reply, end_of_turn=True)
            return self._next_segment()
        return Listen("silence_or_noise" if not speech else "model_listen")

    def interrupt(self) -> None:
        self._pending.clear()
        self._heard_speech = False
        self._awaiting.clear()  # a barge-in retired the calls: their outputs would be stale
        self._outputs.clear()

    def _tool_calls(self) -> list[FunctionCall]:
        """The turn's function calls (those the session offers), the last ending the response."""
        offered = [call for call in self.params.tool_calls if call.name in self.tools]
        calls = []
        for k, call in enumerate(offered):
            self._calls += 1
            call_id = f"call_scripted_{self._calls}"
            self._awaiting.add(call_id)
            calls.append(FunctionCall(call_id, call.name, call.arguments, end_of_turn=k == len(offered) - 1))
        return calls

    def _scripted(self, index: int) -> Listen | PlannedSegment:
        script = self.params.script or ()
        entry = script[index] if index < len(script) else ScriptEntry()
        if entry.speak is None:
            return Listen()
        self._pending = self._plan(entry.speak, end_of_turn=entry.end_of_turn)
        return self._next_segment()

    def _next_segment(self) -> PlannedSegment:
        return self._pending.pop(0)

    def _plan(self, text: str, *, end_of_turn: bool) -> list[PlannedSegment]:
        """Cut `text` into one segment per unit of output audio; only the last may end the turn."""
        p, caps = self.params, self.capabilities
        tokens = _tokens(text)
        total_ms = len(text) * p.ms_per_char
        period = caps.chunk_period_ms
        count = max(1, math.ceil(total_ms / period))
        by_segment: list[list[str]] = [[] for _ in range(count)]
        offset = 0
        for token in tokens:
            by_segment[min(count - 1, int(offset * p.ms_per_char // period))].append(token)
            offset += len(token)
        tone = _tone(total_ms, caps.output_sample_rate_hz, p.tone_hz)
        per_unit = ms_to_samples(period, caps.output_sample_rate_hz)
        segments = []
        for k, seg_tokens in enumerate(by_segment):
            first = p.first_output_ms if k == 0 else p.token_ms
            segments.append(
                PlannedSegment(
                    tokens=tuple(seg_tokens),
                    audio=tone[k * per_unit : (k + 1) * per_unit],
                    end_of_turn=end_of_turn and k == count - 1,
                    token_offsets_ms=tuple(first + i * p.token_ms for i in range(max(1, len(seg_tokens)))),
                )
            )
        return segments


class ScriptedSession(ModelSession):
    def __init__(self, plugin: ScriptedModel) -> None:
        self._plugin = plugin
        self.sampling = plugin.default_sampling
        self._policy = ScriptedPolicy(plugin.params, plugin.capabilities)

    def configure(self, sampling: SamplingParams, extra_body: Mapping[str, Any]) -> None:
        params = ScriptedParams.parse(self._plugin.params, extra_body)
        self.sampling = sampling
        self._policy.params = params
        offered = () if sampling.tool_choice == "none" else sampling.tools
        self._policy.tools = frozenset(tool.name for tool in offered)

    async def step(self, unit: Unit, request_started_at: float) -> AsyncIterator[Decision]:
        decision = self._policy.decide(unit)
        if isinstance(decision, list):
            await _sleep_until(request_started_at + self._policy.params.first_output_ms / 1000.0)
            for call in decision:
                yield call
            return
        if isinstance(decision, Listen | Interrupt):
            yield decision
            return
        offsets = decision.token_offsets_ms
        await _sleep_until(request_started_at + offsets[0] / 1000.0)
        # The segment leaves when its first token is due (so TTFT is `first_output_ms`); its tokens are
        # spaced `token_ms` apart, and the step lasts until the last one is due.
        yield _speak(decision)
        await _sleep_until(request_started_at + offsets[-1] / 1000.0)

    def decide(self, unit: Unit) -> Listen | PlannedSegment | Interrupt | list[FunctionCall]:
        """The policy's decision for `unit` (the batched path's share of `step`)."""
        return self._policy.decide(unit)

    def interrupt(self) -> None:
        self._policy.interrupt()


class ScriptedModel(ModelPlugin):
    name = "scripted"

    def __init__(
        self,
        params: ScriptedParams | None = None,
        capabilities: ModelCapabilities | None = None,
        batching: BatchPolicy | None = None,
    ) -> None:
        self.params = params or ScriptedParams()
        # It calls the functions of its `tool_calls` parameter that the session offers.
        self.capabilities = replace(capabilities or ModelCapabilities(), function_calling=True)
        self.default_sampling = SamplingParams()
        self.batching = batching

    def identity(self) -> dict[str, str]:
        """`scripted` and a digest of its parameters: two scripts are two models."""
        digest = hashlib.sha256(repr(self.params).encode()).hexdigest()[:16]
        return {"id": f"scripted@sha256:{digest}", "params": f"sha256:{digest}"}

    parameters = (
        ModelParameter("reply", "the text of every reply (spoken as a tone)"),
        ModelParameter("speech_rms", "RMS (int16 full scale = 1) from which a unit is speech"),
        ModelParameter("first_output_ms", "ms from the request's start to the reply's first token"),
        ModelParameter("token_ms", "ms between the reply's later tokens"),
        ModelParameter("ms_per_char", "ms of tone per reply character"),
        ModelParameter("tone_hz", "pitch of the reply's tone"),
        ModelParameter("script", "per-unit decisions instead: a JSON list, or a path to one"),
        ModelParameter(
            "tool_calls",
            'answer a turn with these function calls (JSON list of {"name", "arguments"}, or a path to '
            "one) when the session offers them; after their outputs and response.create, speak reply "
            "with {output} replaced by the outputs",
        ),
        ModelParameter("chunk_period_ms", "unit length advertised to clients"),
        ModelParameter("batch_size", "step sessions in batches of up to this many"),
        ModelParameter("batch_wait_ms", "with batch_size: how long a batch waits to fill"),
    )

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> ScriptedModel:
        check_model_args(cls.name, cls.parameters, args)
        caps = ModelCapabilities()
        if "chunk_period_ms" in args:
            raw = args["chunk_period_ms"]
            if not raw.isdigit() or int(raw) == 0:
                raise ValueError(f"chunk_period_ms: must be a positive whole number of ms, got {raw!r}")
            caps = replace(caps, chunk_period_ms=int(raw))
        return cls(ScriptedParams.parse(ScriptedParams(), args), caps, _batch_policy(args))

    def new_session(self) -> ScriptedSession:
        return ScriptedSession(self)

    async def step_batch(self, items: Sequence[BatchItem]) -> Sequence[Decision | Exception]:
        """Every session's policy decides its unit; the batch returns when its longest step is over."""
        results: list[Decision | Exception] = []
        until = 0.0
        for item in items:
            if not isinstance(item.session, ScriptedSession):
                results.append(TypeError(f"not a scripted session: {type(item.session).__name__}"))
                continue
            decision = item.session.decide(item.unit)
            if isinstance(decision, list):  # several decisions do not fit a batch's one per item
                results.append(TypeError("the scripted model's function calls are not batched"))
                continue
            if isinstance(decision, Listen | Interrupt):
                results.append(decision)
                continue
            until = max(until, item.request_started_at + decision.token_offsets_ms[-1] / 1000.0)
            results.append(_speak(decision))
        await _sleep_until(until)
        return results


def _batch_policy(args: Mapping[str, str]) -> BatchPolicy | None:
    if "batch_size" not in args:
        if "batch_wait_ms" in args:
            raise ValueError("batch_wait_ms needs batch_size")
        return None
    try:
        size = int(args["batch_size"])
        if "batch_wait_ms" not in args:
            return BatchPolicy(max_size=size)
        return BatchPolicy(max_size=size, max_wait_ms=float(args["batch_wait_ms"]))
    except ValueError as exc:
        raise ValueError(f"batch_size/batch_wait_ms: {exc}") from None


def _speak(segment: PlannedSegment) -> Speak:
    return Speak(
        tokens=segment.tokens,
        audio=segment.audio,
        end_of_turn=segment.end_of_turn,
        itl_ms=tuple(b - a for a, b in itertools.pairwise(segment.token_offsets_ms)),
    )


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def _rms(samples: npt.NDArray[np.float32]) -> float:
    """`sqrt(mean(square))` in float64, the same sum `np.mean` makes without its Python wrapper (half the
    cost of an 80 ms unit's RMS; a BLAS dot product would start threads)."""
    if not len(samples):
        return 0.0
    return float(np.sqrt(np.add.reduce(np.square(samples, dtype=np.float64)) / len(samples)))


def _tokens(text: str) -> list[str]:
    """Words with their trailing spaces: joined they give back `text` exactly."""
    tokens: list[str] = []
    for word in text.split(" "):
        if tokens:
            tokens[-1] += " "
        tokens.append(word)
    return [t for t in tokens if t]


def _tone(duration_ms: float, rate: int, hz: float) -> npt.NDArray[np.float32]:
    n = ms_to_samples(duration_ms, rate)
    t = np.arange(n, dtype=np.float64) / rate
    envelope = np.minimum(1.0, np.minimum(t, (n / rate) - t) / 0.01)
    return (0.1 * envelope * np.sin(2 * np.pi * hz * t)).astype(np.float32)
