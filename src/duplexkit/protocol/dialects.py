"""Event dialects: one event model, the names and shapes each existing client reads.

The engine emits canonical events (the OpenAI Realtime GA names). A connection's dialect decides how they
are rendered on the wire and which input aliases it accepts, and this module is the one table for both:

* `ga`: the OpenAI Realtime GA API (the `openai` SDK's `client.realtime`); GA session shape.
* `beta`: the OpenAI Realtime beta API (`client.beta.realtime`, header `OpenAI-Beta: realtime=v1`);
  beta names (`response.audio.delta`, ...) and the beta session shape.
* `vllm_omni`: vLLM-Omni's `/v1/realtime?duplex=1` contract; beta names, request-start metrics also at
  vLLM-Omni's placements, `rate_limits.updated` after each `response.done`, flat errors before the session
  opens (`{type: "error", error: "<message>", code}`, capacity as `resource_exhausted`), its input
  aliases, and its duplex tool contract: a call's item is announced complete, an accepted function output
  is answered without `response.create` (its session's `maybe_continue_response`), and an output for no
  known call or a second one is `invalid_function_call_output` (its realtime projector's check, ahead of
  its ledger).

Selection (`select_dialect`): an explicit `dialect=` query parameter, else the beta header, else
`duplex=1`, else GA.
"""

from __future__ import annotations

import base64
import binascii
import io
import wave
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from duplexkit.protocol import server_events as se
from duplexkit.protocol.client_events import OPENAI_FIXED_TERMS
from duplexkit.protocol.errors import ErrorCode, ProtocolError


class Dialect(StrEnum):
    GA = "ga"
    BETA = "beta"
    VLLM_OMNI = "vllm_omni"


_BETA_NAMES: dict[str, str] = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}

_VLLM_OMNI_ALIASES: dict[str, str] = {
    "input.audio.append": "input_audio_buffer.append",
    "push_chunk": "input_audio_buffer.append",
    "audio.playback_ack": "playback.ack",
    "close_session": "session.close",
    "close": "session.close",
}
"""vLLM-Omni's input aliases whose canonical event this server implements."""

_VLLM_OMNI_REFUSED: dict[str, str] = {
    "input_text.append": "input.text.append",
    "push_text": "input.text.append",
    "signal_turn": "turn.signal",
}
"""vLLM-Omni's aliases whose canonical event (text appended to the user's input, a turn signal) this server
does not have: refused with `unsupported_event`, naming the event, so a client can tell them from a typo."""

_WAV_BY_DEFAULT = frozenset({"input.audio.append", "push_chunk"})
"""Aliases whose audio is a base64 WAV file unless the event names another `input_audio_format`."""

_VLLM_OMNI_CODES = {"session_capacity_exhausted": "resource_exhausted"}

_VLLM_OMNI_TOOL_CODES = {
    "unknown_function_call": "invalid_function_call_output",
    "duplicate_function_call_output": "invalid_function_call_output",
}
"""Our tool ledger's codes as vLLM-Omni's clients get them: its realtime projector answers an output whose
`call_id` names no function call, or a second output, with `invalid_function_call_output` before its
ledger (whose `unknown_function_call` / `duplicate_function_call_output` these are) sees the item."""

_GA_FORMATS = {"pcm16": "audio/pcm", "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}


@dataclass(frozen=True, slots=True)
class DialectSpec:
    """What one dialect changes: outgoing names, session shape, extras, accepted aliases, input rate."""

    names: Mapping[str, str]
    ga_session: bool
    vllm_omni_metrics: bool
    rate_limits_after_done: bool
    aliases: Mapping[str, str]
    flat_handshake_errors: bool
    """Errors before `session.created` are `{type, error: "<message>", code}` (vLLM-Omni's handshake)."""
    input_sample_rate_hz: int | None
    """The rate `pcm16` input means before the client says otherwise; `None` keeps the protocol's 16 kHz.
    OpenAI's `pcm16` (beta) and `audio/pcm` (GA) are 24 kHz, so a session in either API starts there: its
    clients send 24 kHz without naming it (the beta session shape cannot; Pipecat's GA client refuses a
    `session.created` whose `audio/pcm` is not 24 kHz). A GA client may name another rate in
    `audio.input.format.rate`; vLLM-Omni's clients send 16 kHz."""
    resume_contract: bool
    """Its clients reconnect with `session.resume` after a lost socket (vLLM-Omni's contract), so a lost
    socket may detach the session (with resume on). GA and beta clients have no resume: their sessions end
    with their socket."""
    call_name_in_arguments_done: bool = True
    """`response.function_call_arguments.done` names the function (GA); the beta event has no `name`."""
    error_codes: Mapping[str, str] = field(default_factory=dict)
    """Codes renamed in the errors of an open session (the dialect's own name for the same refusal)."""
    continues_after_tool_output: bool = False
    """An accepted function output is answered without the client's `response.create`."""
    announces_whole_calls: bool = False
    """A call's item is complete when first announced (vLLM-Omni's projection), not `in_progress`."""
    refuses_stale_outputs: bool = False
    """An output for a call a barge-in retired is refused, `stale_function_call_output` (vLLM-Omni's
    ledger); OpenAI takes any call's output as a conversation item."""
    openai_events: bool = False
    """Only events of OpenAI's API, in its shapes: no `conversation.item.done` in beta (not in the SDK's
    beta event union), `status_details` reasons from OpenAI's enum (`openai_status_reason`)."""


DIALECTS: dict[Dialect, DialectSpec] = {
    Dialect.GA: DialectSpec({}, True, False, False, {}, False, 24_000, False, openai_events=True),
    Dialect.BETA: DialectSpec(
        _BETA_NAMES, False, False, False, {}, False, 24_000, False, False, openai_events=True
    ),
    Dialect.VLLM_OMNI: DialectSpec(
        _BETA_NAMES,
        False,
        True,
        True,
        _VLLM_OMNI_ALIASES,
        True,
        None,
        True,
        False,
        error_codes=_VLLM_OMNI_TOOL_CODES,
        continues_after_tool_output=True,
        announces_whole_calls=True,
        refuses_stale_outputs=True,
    ),
}

CANONICAL_NAMES: dict[str, str] = {dialect_name: ga for ga, dialect_name in _BETA_NAMES.items()}
"""Any dialect's outgoing name → the canonical (GA) name, for readers that accept every dialect."""


def select_dialect(query: Mapping[str, str], headers: Mapping[str, str]) -> Dialect:
    """The dialect a connection asked for. Raises `ValueError` for an unknown explicit `dialect=`."""
    explicit = query.get("dialect")
    if explicit is not None:
        try:
            return Dialect(explicit.strip().lower().replace("-", "_"))
        except ValueError:
            known = ", ".join(d.value for d in Dialect)
            raise ValueError(f"unknown dialect {explicit!r}; expected one of {known}") from None
    if "realtime=v1" in headers.get("openai-beta", "").replace(" ", "").lower():
        return Dialect.BETA
    if query.get("duplex", "").strip().lower() in ("1", "true", "yes"):
        return Dialect.VLLM_OMNI
    return Dialect.GA


_OPENAI_REASONS: dict[str, str | None] = {
    "barge_in": "turn_detected",
    "turn_detected": "turn_detected",
    "client_cancelled": "client_cancelled",
    "continuation_limit": "max_output_tokens",
    "model_error": None,
    "stop": None,
}
"""Our `status_details.reason` as OpenAI's enum says it (`turn_detected`, `client_cancelled`,
`max_output_tokens`, `content_filter`): a barge-in the model heard is a turn detected; the reply's bound
past the input is its output bound; a failure has no reason (its `error` says what failed)."""

_NOT_IN_BETA = frozenset({"conversation.item.done"})
"""Canonical events the beta API does not have (the SDK's beta event union refuses them)."""

_BETA_CONTENT = {"output_audio": "audio", "output_text": "text"}
"""GA content types of an assistant item → the beta API's."""

_ITEM_EVENTS = (
    se.ConversationItemAdded,
    se.ConversationItemRetrieved,
    se.ResponseOutputItemAdded,
    se.ResponseOutputItemDone,
    se.ResponseDone,
)
"""Events that carry conversation items (`item`, or a response's `output`)."""


def _beta_items(payload: dict[str, Any]) -> None:
    """The items an event carries, with the beta API's content types (in place)."""
    items = [payload["item"]] if "item" in payload else payload.get("response", {}).get("output", [])
    for item in items:
        for part in item.get("content") or ():
            part["type"] = _BETA_CONTENT.get(part.get("type"), part.get("type"))


def sends(event_type: str, dialect: Dialect) -> bool:
    """Whether a session in `dialect` gets events of canonical type `event_type` at all."""
    return not (dialect is Dialect.BETA and event_type in _NOT_IN_BETA)


def follow_ups(event: se.ServerEventBase, dialect: Dialect) -> list[se.ServerEventBase]:
    """Events the dialect sends right after `event` (vLLM-Omni: `rate_limits.updated` after `response.done`).

    This server applies no rate limits, so the list it reports is empty.
    """
    if DIALECTS[dialect].rate_limits_after_done and isinstance(event, se.ResponseDone):
        return [se.RateLimitsUpdated(rate_limits=[])]
    return []


def reshapes(event: se.ServerEventBase, dialect: Dialect, *, opened: bool = True) -> bool:
    """Whether `render` changes more than the event's name (the serialiser's fast path when not)."""
    spec = DIALECTS[dialect]
    if isinstance(event, se.SessionCreated | se.SessionUpdated | se.SessionResumed):
        return spec.ga_session
    if isinstance(event, se.Error):
        return (spec.flat_handshake_errors and not opened) or event.error.code in spec.error_codes
    if isinstance(event, se.ResponseCreated | se.ResponseOutputAudioDelta):
        return spec.vllm_omni_metrics and event.response_request_metrics is not None
    if isinstance(event, se.ResponseFunctionCallArgumentsDone):
        return not spec.call_name_in_arguments_done
    if dialect is Dialect.BETA and isinstance(event, _ITEM_EVENTS):
        return True
    if isinstance(event, se.ResponseDone):
        return spec.openai_events and event.response.status_details is not None
    return False


def wire_name(event_type: str, dialect: Dialect) -> str:
    """The name an event of canonical type `event_type` has on the wire in `dialect`."""
    return DIALECTS[dialect].names.get(event_type, event_type)


def render(payload: dict[str, Any], dialect: Dialect, *, opened: bool = True) -> dict[str, Any]:
    """Rewrite one dumped canonical event (JSON-ready dict, modified in place) into the dialect.

    `opened`: whether the connection's `session.created` has been sent (errors before it are handshake
    errors)."""
    spec = DIALECTS[dialect]
    kind = payload.get("type")
    if kind == "error" and spec.flat_handshake_errors and not opened:
        error = payload.pop("error")
        code = _VLLM_OMNI_CODES.get(error["code"], error["code"])
        return {**payload, "error": error["message"], "code": code}
    if kind == "error" and payload["error"].get("code") in spec.error_codes:
        payload["error"] = {**payload["error"], "code": spec.error_codes[payload["error"]["code"]]}
    if isinstance(kind, str):
        payload["type"] = spec.names.get(kind, kind)
    if kind == "response.function_call_arguments.done" and not spec.call_name_in_arguments_done:
        payload.pop("name", None)
    if dialect is Dialect.BETA:
        _beta_items(payload)
    if spec.openai_events and kind == "response.done" and payload["response"].get("status_details"):
        details = payload["response"]["status_details"]
        reason = _OPENAI_REASONS.get(details.get("reason", ""))
        if reason is None:
            details.pop("reason", None)
        else:
            details["reason"] = reason
    if spec.ga_session and kind in ("session.created", "session.updated", "session.resumed"):
        payload["session"] = _ga_session(payload["session"])
    if spec.vllm_omni_metrics and "response_request_metrics" in payload:
        metrics = payload["response_request_metrics"]
        if kind == "response.created":
            payload["response"].setdefault("metadata", {})["duplex_event"] = {
                "response_request_metrics": metrics
            }
        elif kind == "response.output_audio.delta":
            payload["metadata"]["vllm_omni"] = {"response_request_metrics": metrics}
    return payload


def _ga_session(session: dict[str, Any]) -> dict[str, Any]:
    """Our session object in the GA shape: every term where OpenAI's GA session puts it
    (`output_modalities`, `audio.input.{format, transcription, turn_detection}`, `audio.output.{format,
    voice}`, `max_output_tokens`, `"inf"` when unset), the terms served one way only at their paths
    (`OPENAI_FIXED_TERMS`); our own fields stay beside them."""
    out = dict(session)
    caps = session.get("capabilities", {})
    in_fmt, out_fmt = out.pop("input_audio_format"), out.pop("output_audio_format")
    audio_input: dict[str, Any] = {
        "format": _ga_format(in_fmt, caps.get("input_sample_rate_hz")),
        "transcription": out.pop("input_audio_transcription", None),
        "turn_detection": out.pop("turn_detection", None),
    }
    audio_output: dict[str, Any] = {"format": _ga_format(out_fmt, caps.get("output_sample_rate_hz"))}
    if "voice" in out:
        audio_output["voice"] = out.pop("voice")
    out["output_modalities"] = out.pop("modalities")
    out["audio"] = {"input": audio_input, "output": audio_output}
    budget = out.pop("max_tokens", None)
    out["max_output_tokens"] = "inf" if budget is None else budget
    for path, value in OPENAI_FIXED_TERMS.items():
        *sections, name = path.split(".")
        place = out
        for section in sections:
            place = place[section]
        place[name] = value
    return out


def _ga_format(fmt: str, rate: object) -> dict[str, Any]:
    ga = _GA_FORMATS.get(fmt)
    if ga == "audio/pcm" or ga is None:
        return {"type": ga or fmt, "rate": rate}
    return {"type": ga}


def resolve_alias(obj: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """A parsed client frame with the dialect's alias resolved to the canonical event (else unchanged).

    WAV-by-default aliases carry a base64 WAV file: it is unpacked to PCM16 at its own rate. Raises
    `ProtocolError(invalid_audio)` for a WAV this server cannot read, `ProtocolError(unsupported_event)`
    for an alias of an event this server does not have (`_VLLM_OMNI_REFUSED`). vLLM-Omni's
    `session.update` may carry its tools in `extra_body.realtime_tools` (`_realtime_tools`).
    """
    alias = obj.get("type")
    if not isinstance(alias, str):  # no alias: the event table refuses the type (`[]` is not hashable)
        return obj
    if dialect is Dialect.VLLM_OMNI and alias in _VLLM_OMNI_REFUSED:
        raise ProtocolError(
            ErrorCode.UNSUPPORTED_EVENT,
            f"{alias!r} (vLLM-Omni's {_VLLM_OMNI_REFUSED[alias]}) is not supported by this server: it takes "
            "input as audio (input_audio_buffer.append) and decides turns itself",
            param="type",
        )
    if dialect is Dialect.VLLM_OMNI and alias == "session.update":
        return _realtime_tools(obj)
    canonical = DIALECTS[dialect].aliases.get(alias)
    if canonical is None:
        return obj
    obj = {**obj, "type": canonical}
    if alias in _WAV_BY_DEFAULT and "input_audio_format" not in obj and isinstance(obj.get("audio"), str):
        obj.update(_unpack_wav(obj["audio"]))
    return obj


def _realtime_tools(update: dict[str, Any]) -> dict[str, Any]:
    """A vLLM-Omni `session.update` whose `extra_body.realtime_tools` (how its Nemotron VoiceChat deployment
    takes tools: flat function tools or chat-completions ones, `{type, function: {...}}`) become
    `session.tools`, never ignored. Raises `ProtocolError(invalid_value)` for a value that is not a list, or
    for `session.tools` that say otherwise."""
    session = update.get("session")
    extra = session.get("extra_body") if isinstance(session, dict) else None
    tools = extra.get("realtime_tools") if isinstance(extra, dict) else None
    if tools is None:
        return update
    assert isinstance(session, dict)
    param = "session.extra_body.realtime_tools"
    if not isinstance(tools, list):
        raise ProtocolError(
            ErrorCode.INVALID_VALUE, "realtime_tools must be a list of function tools", param=param
        )
    flat = [
        {**{k: v for k, v in tool["function"].items() if k != "type"}, "type": "function"}
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
        else tool
        for tool in tools
    ]
    if session.get("tools") not in (None, flat):
        raise ProtocolError(
            ErrorCode.INVALID_VALUE,
            "session.tools and extra_body.realtime_tools differ: give them once",
            param=param,
        )
    return {**update, "session": {**session, "tools": flat}}


def _unpack_wav(b64: str) -> dict[str, Any]:
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return {}  # not base64: the append's own validation reports it
    if not raw.startswith(b"RIFF"):
        return {}  # raw PCM in the session's format
    try:
        with wave.open(io.BytesIO(raw)) as wav:
            if wav.getsampwidth() != 2 or wav.getnchannels() != 1:
                raise ProtocolError(
                    ErrorCode.INVALID_AUDIO, "WAV audio must be 16-bit mono PCM", param="audio"
                )
            rate, pcm = wav.getframerate(), wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as exc:
        raise ProtocolError(ErrorCode.INVALID_AUDIO, f"unreadable WAV audio: {exc}", param="audio") from None
    return {"audio": base64.b64encode(pcm).decode(), "input_audio_format": "pcm16", "sample_rate_hz": rate}
