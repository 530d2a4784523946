"""A stateful fuzzer of `EngineSession`: random client messages (valid, invalid, out of order, oversized,
absurd), random model progress and random pauses, driven as the server's runner drives it (client frames
through the wire parser then `handle`, or `protocol_error` when they do not parse; units stepped in order
through `request_started`, `on_decision`, `on_step_failed`, `step_finished`; time through `tick`).

Invariants, after every rule: no exception escapes; the contract's event order holds
(`tests/fuzz/contract.py`); every `response.create` is refused with
`conversation_already_has_active_response` exactly when a response is active or requested, and every one
accepted is answered by one `response.done`; every frame that does not parse is answered by one coded
error; buffered input stays under one unit; a session with no client event for its idle deadline (the
server's: a client may shorten it, never lengthen it) is closed by the next tick. At the end the units
are stepped out, the session closed, and every response and request found ended.
"""

from __future__ import annotations

import base64
import json
from collections import deque
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from duplexkit.engine import EngineConfig, EngineSession, FunctionCall, Interrupt, Listen, Speak, Step, Unit
from duplexkit.engine.decisions import Decision, Transcribed
from duplexkit.protocol import client_events as ce
from duplexkit.protocol.errors import ErrorCode, ProtocolError
from duplexkit.protocol.wire import parse_client_event
from tests.fuzz.contract import ContractChecker
from tests.fuzz.strategies import absurd_json, examples, junk_frames

IDLE_S = 30.0
"""The server's idle deadline in these sessions."""
SETTINGS = settings(
    max_examples=examples(60),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

_IDS = st.sampled_from(["item_x", "resp_x", "call_1", "call_2", "", "root", "x" * 300])
_MS = st.sampled_from([0, 1, 20, 80, 250, 999, 1000, 1001, 2500, 6000])
_ODD = st.sampled_from([None, True, -1, 0, 2**64, 1e308, -1e308, "", "x" * 100, [], {}, [[[]]], {"a": {}}])
_FORMATS = st.sampled_from(["pcm16", "g711_ulaw", "g711_alaw", "pcm_f32le", "mp3", None])
_TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}
_UPDATES: dict[str, st.SearchStrategy[Any]] = {
    "instructions": st.sampled_from(["Be brief.", "", "x" * 10_000]),
    "voice": st.sampled_from(["alloy", ""]),
    "modalities": st.sampled_from([["audio"], ["text"], ["audio", "text"], [], ["video"]]),
    "input_audio_format": _FORMATS,
    "output_audio_format": _FORMATS,
    "temperature": st.sampled_from([0.0, 0.7, 2.0, 3.0, -1.0]),
    "idle_timeout_s": st.sampled_from([0.5, 5.0, IDLE_S, 2 * IDLE_S, 1e300, 0.0, -1.0]),
    "tools": st.sampled_from([[_TOOL], [], [{"type": "mcp"}]]),
    "tool_choice": st.sampled_from(["auto", "none", "required", "f", {"type": "function", "name": "g"}]),
    "overlap_policy": st.sampled_from(["listen_only", "barge_in_on_speech", "sometimes"]),
    "playback_commit_policy": st.sampled_from(["commit_all_on_done", "ack_only"]),
    "turn_detection": st.sampled_from([None, {"type": "server_vad"}]),
    "input_sample_rate_hz": st.sampled_from([8_000, 16_000, 24_000, 0]),
    "output_sample_rate_hz": st.sampled_from([8_000, 24_000, 48_000, 10**9]),
    "bogus": st.just(1),
}


def _pcm(ms: int, rate: int = 16_000) -> str:
    return base64.b64encode(b"\x10\x00" * (ms * rate // 1000)).decode()


def _message(kind: str, draw: Any, known: list[str]) -> dict[str, Any]:
    """One client event of `kind`, its fields mostly sensible, sometimes not."""
    some_id = draw(st.sampled_from(known) if known and draw(st.booleans()) else _IDS)
    event: dict[str, Any] = {"type": kind}
    if kind == "input_audio_buffer.append":
        ms = draw(_MS)
        event["audio"] = draw(
            st.sampled_from([_pcm(ms), _pcm(ms), "not base64!", base64.b64encode(b"\x01").decode()])
        )
        for name, values in (
            ("is_speech", st.sampled_from([True, False, None])),
            ("force_barge_in", st.booleans()),
            ("force_listen", st.booleans()),
            ("sample_rate_hz", st.sampled_from([8_000, 16_000, 24_000, 48_000, 0, -5, 10**9])),
            ("format", _FORMATS),
        ):
            if draw(st.integers(0, 3)) == 0:
                event[name] = draw(values)
    elif kind == "input_audio_buffer.commit":
        if draw(st.booleans()):
            event["is_speech"] = draw(st.sampled_from([True, False, None]))
    elif kind == "response.create":
        if draw(st.booleans()):
            event["response"] = draw(
                st.sampled_from(
                    [
                        {"metadata": {"k": "v"}},
                        {"tools": [_TOOL]},
                        {"tool_choice": "none"},
                        {"metadata": 5},
                        {},
                        {"instructions": "x"},
                    ]
                )
            )
    elif kind == "response.cancel":
        if draw(st.booleans()):
            event["response_id"] = some_id
    elif kind == "playback.ack":
        event |= {"response_id": some_id, "played_ms": draw(st.sampled_from([0, 10, 500, 1e9, -1, 0.5]))}
        if draw(st.booleans()):
            event["committed_ms"] = draw(st.sampled_from([0, 5, 1e12, -3]))
    elif kind == "conversation.item.create":
        item = draw(
            st.sampled_from(
                [
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                    {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "yo"}]},
                    {"type": "message"},
                    {"type": "function_call", "call_id": "call_c", "name": "f", "arguments": "{}"},
                    {"type": "function_call", "call_id": "call_d", "name": "f", "arguments": "[1]"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                    {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
                    {"type": "function_call_output", "call_id": "call_x", "output": 5},
                    {"type": "weird"},
                    {"id": "item_fixed", "type": "message", "role": "user", "content": []},
                ]
            )
        )
        event["item"] = item
        if draw(st.integers(0, 2)) == 0:
            event["previous_item_id"] = some_id
    elif kind in ("conversation.item.retrieve", "conversation.item.delete"):
        event["item_id"] = some_id
    elif kind == "conversation.item.truncate":
        event |= {
            "item_id": some_id,
            "content_index": 0,
            "audio_end_ms": draw(st.sampled_from([0, 100, 10**9])),
        }
    elif kind == "session.update":
        names = draw(st.lists(st.sampled_from(sorted(_UPDATES)), max_size=3, unique=True))
        event["session"] = {
            name: draw(_ODD if draw(st.integers(0, 5)) == 0 else _UPDATES[name]) for name in names
        }
    elif kind == "session.close" and draw(st.booleans()):
        event["reason"] = "bye"
    if draw(st.integers(0, 9)) == 0:  # a field made odd
        event[draw(st.sampled_from([*event, "junk"]))] = draw(_ODD)
    if draw(st.integers(0, 4)) == 0:
        event["event_id"] = f"evt_{draw(st.integers(0, 99))}"
    return event


_CLIENT_KINDS = [
    "input_audio_buffer.append",
    "input_audio_buffer.append",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "response.create",
    "response.create",
    "response.cancel",
    "input.cancel",
    "barge_in",
    "output_audio_buffer.clear",
    "playback.ack",
    "conversation.item.create",
    "conversation.item.create",
    "conversation.item.retrieve",
    "conversation.item.delete",
    "conversation.item.truncate",
    "session.update",
    "session.heartbeat",
    "session.close",
]

_DECISIONS: st.SearchStrategy[Decision] = st.one_of(
    st.builds(
        Listen,
        st.sampled_from(
            ["model_listen", "buffering", "silence_or_noise", "continuation_limit", "response_budget"]
        ),
    ),
    st.builds(
        lambda text, ms, end: Speak(
            tokens=tuple(w + " " for w in text.split()), audio=_audio(ms), end_of_turn=end
        ),
        st.sampled_from(["", "Hello", "Hello there friend"]),
        st.sampled_from([0, 40, 1000]),
        st.booleans(),
    ),
    st.just(Interrupt()),
    st.builds(
        Transcribed,
        st.sampled_from(["", "what", "what time is it"]),
        st.booleans(),
        st.sampled_from([0.0, 1.5]),
        st.sampled_from([None, 0.0, 500.0, 1e12]),
    ),
    st.builds(
        FunctionCall,
        st.sampled_from(["call_1", "call_2", "call_1"]),
        st.sampled_from(["f", "g"]),
        st.sampled_from(["{}", '{"a": 1}', "[1]", "not json"]),
        st.booleans(),
    ),
)


def _audio(ms: int) -> Any:
    import numpy as np

    return np.full(ms * 24, 0.1, dtype=np.float32)


class EngineFuzz(RuleBasedStateMachine):
    messages = 0
    """Client messages delivered by every run so far (the long run's figure)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.engine: EngineSession | None = None
        self.checker = ContractChecker()
        self.queue: deque[Unit] = deque()
        self.current: Unit | None = None
        self.last_event_at = 0.0
        self.create_pending = False
        self.known: list[str] = []
        self.closed = False
        self.unit_samples = 0

    # --- the session ----------------------------------------------------------------------------------

    @initialize(
        autostart=st.sampled_from([True, True, True, False]),
        period=st.sampled_from([80, 200, 1000]),
        tools=st.booleans(),
        continues=st.booleans(),
        refuses=st.booleans(),
        whole=st.booleans(),
        clocked=st.booleans(),
    )
    def open(
        self,
        autostart: bool,
        period: int,
        tools: bool,
        continues: bool,
        refuses: bool,
        whole: bool,
        clocked: bool,
    ) -> None:
        config = EngineConfig(
            model="scripted",
            chunk_period_ms=period,
            idle_timeout_s=IDLE_S,
            continuation_limit=3,
            supports_function_calling=tools,
            continues_after_tool_output=continues,
            refuses_stale_outputs=refuses,
            announces_whole_calls=whole,
            input_clocked=clocked,
        )
        self.engine = EngineSession("sess_fuzz", config)
        self.unit_samples = max(self.engine.grid.unit_end_ms(0), period) * config.input_sample_rate_hz // 1000
        if autostart:
            self.apply(self.engine.start(self.now))

    def apply(self, step: Step) -> None:
        for event in step.events:
            self.checker.feed(event)
            if event.type == "response.done":
                self.create_pending = False
            if event.type == "response.created":
                self.known.append(event.response.id)
            elif event.type == "conversation.item.added":
                self.known.append(event.item.id)
        self.queue.extend(step.units)
        if step.close_reason is not None:
            self.closed = True

    # --- the client -----------------------------------------------------------------------------------

    def deliver(self, frame: str | bytes) -> Step:
        """A client frame, as the runner applies it."""
        EngineFuzz.messages += 1
        assert self.engine is not None
        try:
            event = parse_client_event(frame, input_audio_format=self.engine.settings.input_audio_format)
        except ProtocolError as exc:
            step = self.engine.protocol_error(exc)
            assert [e.type for e in step.events] == ["error"] and not step.units
            self.apply(step)
            return step
        if isinstance(event, ce.SessionResume | ce.SessionEventAck):  # the attachment's, not the engine's
            return Step()
        asked = isinstance(event, ce.ResponseCreate) and self.engine.started
        busy = self.checker.active is not None or self.create_pending
        if asked and not busy:
            self.create_pending = True
        step = self.engine.handle(event, self.now)
        self.last_event_at = self.now
        if asked:
            codes = [e.error.code for e in step.events if e.type == "error"]
            refused = ErrorCode.CONVERSATION_ALREADY_HAS_ACTIVE_RESPONSE in codes
            assert refused == busy, (busy, codes)
        self.apply(step)
        return step

    @precondition(lambda self: not self.closed)
    @rule(data=st.data(), kind=st.sampled_from(_CLIENT_KINDS))
    def client_event(self, data: st.DataObject, kind: str) -> None:
        self.deliver(json.dumps(_message(kind, data.draw, self.known)))

    @precondition(lambda self: not self.closed)
    @rule(count=st.integers(1, 12), ms=st.sampled_from([20, 100, 1000]))
    def burst_of_appends(self, count: int, ms: int) -> None:
        for _ in range(count):
            self.deliver(json.dumps({"type": "input_audio_buffer.append", "audio": _pcm(ms)}))

    @precondition(lambda self: not self.closed)
    @rule(frame=junk_frames())
    def junk(self, frame: str | bytes) -> None:
        self.deliver(frame)

    @precondition(lambda self: not self.closed)
    @rule(value=absurd_json(), kind=st.sampled_from(["", *_CLIENT_KINDS]))
    def absurd(self, value: Any, kind: str) -> None:
        event = value if not kind or not isinstance(value, dict) else {**value, "type": kind}
        self.deliver(json.dumps(event))

    # --- the model ------------------------------------------------------------------------------------

    @precondition(lambda self: self.current is None and bool(self.queue))
    @rule()
    def begin_step(self) -> None:
        assert self.engine is not None
        self.current = self.queue.popleft()
        self.engine.request_started(self.current, self.now, queue_wait_s=0.0)

    @precondition(lambda self: self.current is not None)
    @rule(decisions=st.lists(_DECISIONS, min_size=1, max_size=3))
    def decide(self, decisions: list[Decision]) -> None:
        assert self.engine is not None and self.current is not None
        for decision in decisions:
            self.apply(self.engine.on_decision(self.current, decision, self.now))

    @precondition(lambda self: self.current is not None)
    @rule(failed=st.sampled_from([None, ErrorCode.MODEL_STEP_FAILED, ErrorCode.MODEL_STEP_TIMEOUT]))
    def finish_step(self, failed: ErrorCode | None) -> None:
        assert self.engine is not None and self.current is not None
        if failed is not None:
            self.apply(self.engine.on_step_failed(self.current, "boom", self.now, failed))
        self.apply(self.engine.step_finished(self.current, self.now))
        self.current = None

    # --- time -----------------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0.0, 0.02, 0.1, 0.3, 1.0, 5.0, IDLE_S / 2, IDLE_S + 1]))
    def pause(self, seconds: float) -> None:
        assert self.engine is not None
        self.now += seconds
        self.apply(self.engine.tick(self.now))
        if self.engine.started and self.now - self.last_event_at > IDLE_S:
            assert self.engine.closed, "a session outlived its idle deadline"

    # --- invariants -----------------------------------------------------------------------------------

    @invariant()
    def contract_holds(self) -> None:
        assert not self.checker.violations, self.checker.violations

    @invariant()
    def the_idle_deadline_is_never_past_the_servers(self) -> None:
        if self.engine is not None and self.engine.started and not self.engine.closed:
            assert self.engine.next_tick_at() <= self.last_event_at + IDLE_S

    @invariant()
    def buffered_input_is_under_a_unit(self) -> None:
        if self.engine is not None:
            assert self.engine.buffered_samples <= self.unit_samples

    def teardown(self) -> None:
        if self.engine is None:
            return
        for _ in range(1_000):  # the model steps out what is queued, listening
            if self.current is None and not self.queue:
                break
            if self.current is None:
                self.begin_step()
            assert self.current is not None
            self.apply(self.engine.on_decision(self.current, Listen(), self.now))
            self.apply(self.engine.step_finished(self.current, self.now))
            self.current = None
        if not self.closed:
            self.apply(self.engine.close("client_close", self.now))
        assert not self.checker.violations, self.checker.violations
        assert self.checker.active is None and self.checker.created == self.checker.done
        assert not self.create_pending, "a response.create never answered"


TestEngineFuzz = EngineFuzz.TestCase
TestEngineFuzz.settings = SETTINGS
