"""The `scripted` model as a specification: a deterministic duplex double for tests and benchmarks.

`ScriptedPolicy` is pure and is tested unit by unit; `ScriptedParams` parses `--model-arg` strings and
`extra_body` JSON; `ScriptedSession` really waits for its token schedule (measured with generous bounds on
`time.monotonic`), so the server measures it like any model.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplexkit.engine import (
    EngineConfig,
    EngineSession,
    Fence,
    FunctionOutput,
    Interrupt,
    Listen,
    Speak,
    Unit,
)
from duplexkit.models import load_model
from duplexkit.models.base import ModelCapabilities, SamplingParams
from duplexkit.models.scripted import (
    PlannedSegment,
    ScriptedModel,
    ScriptedParams,
    ScriptedPolicy,
    ScriptedSession,
)
from duplexkit.protocol.audio import encode_base64_audio
from duplexkit.protocol.wire import parse_client_event

CAPS = ModelCapabilities()
REPLY = "This is a scripted reply."  # 25 chars: 1500 ms of audio, two 1000 ms units


def _unit(
    amplitude: float = 0.0,
    *,
    index: int = 0,
    ms: int = 1000,
    final: bool = False,
    continuation: bool = False,
    is_speech: bool | None = None,
    force_listen: bool = False,
) -> Unit:
    samples = np.full(16 * ms, amplitude, dtype=np.float32)
    return Unit(
        index=index,
        fence=Fence("sess_test"),
        samples=samples,
        sample_rate_hz=16_000,
        start_ms=index * 1000.0,
        end_ms=index * 1000.0 + ms,
        final=final,
        continuation=continuation,
        is_speech=is_speech,
        force_listen=force_listen,
    )


SPEECH = 0.05
SILENCE = 0.0


def _policy(**params: Any) -> ScriptedPolicy:
    return ScriptedPolicy(ScriptedParams(**params), CAPS)


def _text(segments: list[PlannedSegment]) -> str:
    return "".join("".join(s.tokens) for s in segments)


def _reply_segments(policy: ScriptedPolicy, first: PlannedSegment | Listen) -> list[PlannedSegment]:
    """The segment just decided plus the ones the following units deliver, up to the end of the turn."""
    assert isinstance(first, PlannedSegment)
    segments = [first]
    while not segments[-1].end_of_turn:
        decision = policy.decide(_unit(SILENCE, index=len(segments)))
        assert isinstance(decision, PlannedSegment)
        segments.append(decision)
    return segments


# --- the policy -------------------------------------------------------------------------------------


def test_speech_followed_by_a_silent_unit_triggers_the_reply() -> None:
    policy = _policy()
    assert policy.decide(_unit(SPEECH)) == Listen("model_listen")
    assert policy.decide(_unit(SPEECH)) == Listen("model_listen")
    segments = _reply_segments(policy, policy.decide(_unit(SILENCE)))
    assert _text(segments) == REPLY
    assert policy.decide(_unit(SILENCE)) == Listen("silence_or_noise")  # the reply is spent


def test_silence_without_prior_speech_listens_as_silence_or_noise() -> None:
    policy = _policy()
    assert [policy.decide(_unit(SILENCE)) for _ in range(3)] == [Listen("silence_or_noise")] * 3


@pytest.mark.parametrize(("amplitude", "speech"), [(0.003, True), (0.0031, True), (0.0029, False)])
def test_a_unit_is_speech_when_its_rms_reaches_speech_rms(amplitude: float, speech: bool) -> None:
    policy = _policy()
    policy.decide(_unit(amplitude))
    replied = isinstance(policy.decide(_unit(SILENCE)), PlannedSegment)
    assert replied is speech


def test_the_speech_threshold_is_configurable() -> None:
    policy = _policy(speech_rms=0.1)
    policy.decide(_unit(SPEECH))
    assert policy.decide(_unit(SILENCE)) == Listen("silence_or_noise")


def test_a_declared_is_speech_overrides_the_rms() -> None:
    policy = _policy()
    assert policy.decide(_unit(SILENCE, is_speech=True)) == Listen("model_listen")
    assert isinstance(policy.decide(_unit(SPEECH, is_speech=False)), PlannedSegment)


def test_a_commit_triggers_the_reply_even_without_speech() -> None:
    policy = _policy()
    segments = _reply_segments(policy, policy.decide(_unit(SILENCE, ms=300, final=True)))
    assert _text(segments) == REPLY


def test_a_commit_that_ends_in_speech_triggers_the_reply() -> None:
    policy = _policy()
    assert isinstance(policy.decide(_unit(SPEECH, final=True)), PlannedSegment)


def test_silence_the_server_synthesised_does_not_end_the_users_turn() -> None:
    policy = _policy()
    policy.decide(_unit(SPEECH))
    assert policy.decide(_unit(SILENCE, continuation=True)) == Listen("silence_or_noise")
    assert isinstance(policy.decide(_unit(SILENCE)), PlannedSegment)


def test_force_listen_keeps_listening_when_the_reply_would_start() -> None:
    policy = _policy()
    policy.decide(_unit(SPEECH))
    assert policy.decide(_unit(SILENCE, force_listen=True)) == Listen("model_listen")


def test_the_reply_is_split_over_units_at_60_ms_per_char_of_output_audio() -> None:
    policy = _policy()
    segments = _reply_segments(policy, policy.decide(_unit(SILENCE, final=True)))
    assert [len(s.audio) for s in segments] == [24_000, 12_000]  # 1500 ms at 24 kHz, cut per 1000 ms unit
    assert [s.end_of_turn for s in segments] == [False, True]
    assert [s.tokens for s in segments] == [("This ", "is ", "a ", "scripted "), ("reply.",)]
    assert all(s.audio.dtype == np.float32 and 0 < np.max(np.abs(s.audio)) <= 0.1 for s in segments)


def test_remaining_segments_are_delivered_whatever_the_input() -> None:
    policy = _policy()
    policy.decide(_unit(SILENCE, final=True))
    assert isinstance(policy.decide(_unit(SPEECH, force_listen=True)), PlannedSegment)


def test_interrupt_drops_the_rest_of_the_reply() -> None:
    policy = _policy()
    policy.decide(_unit(SPEECH))
    first = policy.decide(_unit(SILENCE))
    assert isinstance(first, PlannedSegment) and not first.end_of_turn
    policy.interrupt()
    assert policy.decide(_unit(SILENCE)) == Listen("silence_or_noise")


def test_the_token_schedule_starts_at_first_output_ms_and_spaces_tokens_by_token_ms() -> None:
    policy = _policy(first_output_ms=200.0, token_ms=20.0)
    first, second = _reply_segments(policy, policy.decide(_unit(SILENCE, final=True)))
    assert first.token_offsets_ms == (200.0, 220.0, 240.0, 260.0)
    assert second.token_offsets_ms == (20.0,)  # a continuation segment starts one token in


@settings(max_examples=80, deadline=None)
@given(
    reply=st.text(alphabet=st.sampled_from("ab .é"), max_size=80),
    period=st.sampled_from([200, 1000]),
    ms_per_char=st.sampled_from([10.0, 60.0]),
)
def test_reply_tokens_join_back_to_the_reply_and_the_audio_lasts_ms_per_char(
    reply: str, period: int, ms_per_char: float
) -> None:
    policy = ScriptedPolicy(
        ScriptedParams(reply=reply, ms_per_char=ms_per_char), replace(CAPS, chunk_period_ms=period)
    )
    segments = _reply_segments(policy, policy.decide(_unit(SILENCE, final=True)))
    total_ms = len(reply) * ms_per_char
    assert _text(segments) == reply
    assert len(segments) == max(1, math.ceil(total_ms / period))
    assert sum(len(s.audio) for s in segments) == round(total_ms * 24_000 / 1000)
    assert all(len(s.audio) <= period * 24 for s in segments)
    assert [s.end_of_turn for s in segments] == [False] * (len(segments) - 1) + [True]


SCRIPT = [{"listen": True}, {"speak": "Hi there", "end_of_turn": False}, {"speak": "Bye."}]


def _scripted_decisions(params: ScriptedParams, units: int) -> list[Any]:
    policy = ScriptedPolicy(params, CAPS)
    decisions = []
    for k in range(units):
        d = policy.decide(_unit(SPEECH, index=k))
        decisions.append(d if isinstance(d, Listen) else ("".join(d.tokens), d.end_of_turn))
    return decisions


@pytest.mark.parametrize("source", ["list", "json"])
def test_a_script_decides_unit_by_unit_then_listens(source: str) -> None:
    raw: Any = SCRIPT if source == "list" else json.dumps(SCRIPT)
    params = ScriptedParams.parse(ScriptedParams(), {"script": raw})
    assert _scripted_decisions(params, 5) == [
        Listen("model_listen"),
        ("Hi there", False),
        ("Bye.", True),
        Listen("model_listen"),
        Listen("model_listen"),
    ]


def test_a_script_can_be_read_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    params = ScriptedParams.parse(ScriptedParams(), {"script": str(path)})
    assert _scripted_decisions(params, 3)[1:] == [("Hi there", False), ("Bye.", True)]


def test_a_scripted_speak_longer_than_a_unit_is_spoken_whole_and_ends_the_turn() -> None:
    text = "This sentence is long enough to need more than one unit of audio."
    policy = ScriptedPolicy(ScriptedParams.parse(ScriptedParams(), {"script": [{"speak": text}]}), CAPS)
    segments = _reply_segments(policy, policy.decide(_unit(SPEECH)))
    assert _text(segments) == text


# --- parameters -------------------------------------------------------------------------------------


def test_params_parse_model_arg_strings() -> None:
    params = ScriptedParams.parse(
        ScriptedParams(),
        {"reply": "Hello", "first_output_ms": "30", "token_ms": "5", "speech_rms": "0.01", "tone_hz": "440"},
    )
    assert params == ScriptedParams(
        reply="Hello", first_output_ms=30.0, token_ms=5.0, speech_rms=0.01, tone_hz=440.0
    )


def test_params_parse_applies_only_known_keys_over_the_base() -> None:
    base = ScriptedParams(reply="Base", token_ms=7.0)
    params = ScriptedParams.parse(base, {"ms_per_char": 40, "temperature": 0.3, "other_consumer": {"x": 1}})
    assert params == replace(base, ms_per_char=40.0)
    assert base == ScriptedParams(reply="Base", token_ms=7.0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("token_ms", "fast"),
        ("first_output_ms", "-1"),
        ("speech_rms", "nan"),
        ("first_output_ms", "inf"),
        ("ms_per_char", "0"),
        ("tone_hz", 0),
        ("token_ms", None),
        ("reply", 5),
        ("script", "[{}]"),
        ("script", '[{"listen": true, "speak": "both"}]'),
        ("script", '[{"speak": 3}]'),
        ("script", '{"listen": true}'),
        ("script", "[not json"),
        ("script", "/nonexistent/duplexkit/script.json"),
    ],
)
def test_a_bad_param_is_a_value_error_naming_the_key(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"^{key}: "):
        ScriptedParams.parse(ScriptedParams(), {key: value})


def test_model_args_configure_the_plugin_and_its_unit_period() -> None:
    model = load_model("scripted", {"reply": "Hi", "chunk_period_ms": "200", "first_output_ms": "0"})
    assert isinstance(model, ScriptedModel)
    assert model.capabilities.chunk_period_ms == 200
    assert (model.params.reply, model.params.first_output_ms) == ("Hi", 0.0)
    assert model.capabilities.engine_config("scripted", max_sessions=2).chunk_period_ms == 200


def test_an_unknown_model_names_the_built_in_choices() -> None:
    with pytest.raises(ValueError, match="scripted"):
        load_model("nope", {})


@pytest.mark.parametrize("value", ["abc", "0", "-200"])
def test_a_bad_chunk_period_model_arg_is_a_value_error_naming_it(value: str) -> None:
    with pytest.raises(ValueError, match="chunk_period_ms"):
        ScriptedModel.from_args({"chunk_period_ms": value})


# --- per-session configuration ----------------------------------------------------------------------


async def _reply_text(session: ScriptedSession) -> str:
    """What the session answers to a commit; its schedule is already due so nothing waits."""
    decisions = [d async for d in session.step(_unit(final=True), time.monotonic() - 60.0)]
    assert all(isinstance(d, Speak) for d in decisions)
    return "".join(d.text for d in decisions if isinstance(d, Speak))


async def test_plugin_owns_sampling_overrides_without_mutating_defaults() -> None:
    plugin = ScriptedModel(ScriptedParams(reply="Default."))
    defaults = plugin.default_sampling
    a, b = plugin.new_session(), plugin.new_session()
    assert a.sampling == b.sampling == defaults == SamplingParams()

    a.configure(
        defaults.with_overrides(temperature=0.2, max_tokens=64, instructions="Be brief."), {"reply": "A."}
    )
    b.configure(defaults.with_overrides(max_tokens=8), {})

    assert a.sampling == SamplingParams(temperature=0.2, max_tokens=64, instructions="Be brief.")
    assert b.sampling == SamplingParams(temperature=0.7, max_tokens=8, instructions=None)
    assert plugin.default_sampling is defaults
    assert plugin.default_sampling == SamplingParams()
    assert plugin.params == ScriptedParams(reply="Default.")
    assert plugin.new_session().sampling == SamplingParams()
    assert (await _reply_text(a), await _reply_text(b)) == ("A.", "Default.")


def test_sampling_overrides_replace_only_what_they_name() -> None:
    base = SamplingParams(temperature=0.5, max_tokens=100, instructions="x")
    assert base.with_overrides() == base
    assert base.with_overrides(temperature=0.0) == SamplingParams(0.0, 100, "x")  # 0 is a value, not "unset"


async def test_a_bad_extra_body_value_leaves_the_previous_settings_in_place() -> None:
    session = ScriptedModel().new_session()
    tuned = SamplingParams(temperature=0.1)
    session.configure(tuned, {"reply": "Kept."})
    with pytest.raises(ValueError, match="token_ms"):
        session.configure(SamplingParams(temperature=1.5), {"reply": "Lost.", "token_ms": "soon"})
    assert session.sampling == tuned
    assert await _reply_text(session) == "Kept."


# --- stepping in real time --------------------------------------------------------------------------


async def test_step_waits_until_the_request_start_plus_first_output_ms() -> None:
    session = ScriptedModel(ScriptedParams(reply="a b c", first_output_ms=30.0, token_ms=5.0)).new_session()
    started = time.monotonic()
    [speak] = [d async for d in session.step(_unit(final=True), started)]
    elapsed_ms = 1000.0 * (time.monotonic() - started)
    assert isinstance(speak, Speak)
    assert speak.tokens == ("a ", "b ", "c")
    assert speak.end_of_turn
    assert elapsed_ms >= 30.0 + 2 * 5.0 - 1.0  # the last of three tokens is due at 40 ms
    assert elapsed_ms < 2000.0


async def test_step_sends_the_segment_when_its_first_token_is_due_and_lasts_until_the_last() -> None:
    params = ScriptedParams(
        reply="a b c d e f g h i j", first_output_ms=30.0, token_ms=10.0, ms_per_char=10.0
    )
    session = ScriptedModel(params).new_session()
    started = time.monotonic()
    steps = session.step(_unit(final=True), started)
    speak = await anext(steps)
    first_ms = 1000.0 * (time.monotonic() - started)
    assert isinstance(speak, Speak)
    assert 29.0 <= first_ms < 250.0  # TTFT is first_output_ms, not the last token's time
    assert speak.itl_ms == (10.0,) * 9 and speak.tpot_ms is None
    assert [d async for d in steps] == []
    assert 1000.0 * (time.monotonic() - started) >= 30.0 + 9 * 10.0 - 1.0  # the step spans the schedule


async def test_step_counts_its_schedule_from_the_request_start_not_from_the_call() -> None:
    session = ScriptedModel(ScriptedParams(reply="late", first_output_ms=500.0, token_ms=5.0)).new_session()
    called = time.monotonic()
    [speak] = [d async for d in session.step(_unit(final=True), called - 1.0)]
    assert isinstance(speak, Speak)
    assert time.monotonic() - called < 0.25  # due 0.5 s before the call: no waiting
    assert speak.itl_ms == ()


async def test_a_listening_step_yields_listen_without_waiting() -> None:
    session = ScriptedModel(ScriptedParams(first_output_ms=500.0)).new_session()
    called = time.monotonic()
    decisions = [d async for d in session.step(_unit(SILENCE), called)]
    assert decisions == [Listen("silence_or_noise")]
    assert time.monotonic() - called < 0.25


async def test_session_interrupt_drops_the_rest_of_the_reply() -> None:
    session = ScriptedModel(ScriptedParams(first_output_ms=0.0, token_ms=0.0)).new_session()
    first = [d async for d in session.step(_unit(final=True), time.monotonic())]
    assert isinstance(first[0], Speak) and not first[0].end_of_turn
    session.interrupt()
    assert [d async for d in session.step(_unit(SILENCE), time.monotonic())] == [Listen("silence_or_noise")]


async def test_the_engine_measures_the_scripted_models_first_output_from_the_request_start() -> None:
    model = ScriptedModel(ScriptedParams(reply="Hi", first_output_ms=30.0, token_ms=5.0))
    session = model.new_session()
    engine = EngineSession("sess_test", EngineConfig(model="scripted"))
    engine.start(time.monotonic())
    append = {"type": "input_audio_buffer.append", "audio": encode_base64_audio(np.zeros(3200), "pcm16")}
    engine.handle(parse_client_event(json.dumps(append)), time.monotonic())
    [unit] = engine.handle(
        parse_client_event('{"type": "input_audio_buffer.commit"}'), time.monotonic()
    ).units

    started = time.monotonic()
    engine.request_started(unit, started)
    events: list[Any] = []
    async for decision in session.step(unit, started):
        events += engine.on_decision(unit, decision, time.monotonic()).events
    engine.step_finished(unit, time.monotonic())

    metrics = next(e for e in events if e.type == "response.created").response_request_metrics
    assert 29.0 <= metrics.ttft_ms < 2000.0
    assert 29.0 <= metrics.ttfp_ms < 2000.0
    assert [e.type for e in events][-1] == "response.done"


def test_a_misspelt_server_argument_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="frist_output_ms") as refused:
        ScriptedModel.from_args({"frist_output_ms": "5"})
    assert "first_output_ms" in str(refused.value)


def test_the_parameter_table_lists_every_setting_once_and_nothing_else() -> None:
    names = [p.name for p in ScriptedModel.parameters]
    assert len(names) == len(set(names)) and all(p.help for p in ScriptedModel.parameters)
    declared = {f.name for f in fields(ScriptedParams)}
    assert set(names) == declared | {"chunk_period_ms", "batch_size", "batch_wait_ms"}


def test_tool_calls_answer_a_turn_then_the_outputs_are_spoken_on_response_create() -> None:
    calls = [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "not_offered"}]
    params = ScriptedParams.parse(
        ScriptedParams(), {"tool_calls": json.dumps(calls), "reply": "It is {output}."}
    )
    policy = ScriptedPolicy(params, CAPS)
    policy.tools = frozenset({"get_weather"})
    assert isinstance(policy.decide(_unit(0.2, index=0)), Listen)
    made = policy.decide(_unit(0.0, index=1))
    assert isinstance(made, list) and [(c.name, c.arguments, c.end_of_turn) for c in made] == [
        ("get_weather", '{"city": "Paris"}', True)  # only what the session offers; the last ends the turn
    ]
    output = FunctionOutput(made[0].call_id, "get_weather", made[0].arguments, "21 degrees")
    waiting = replace(_unit(0.0, index=2), tool_outputs=(output,))
    assert isinstance(policy.decide(waiting), Listen)  # the output alone asks for nothing
    answer = policy.decide(_unit(0.0, index=3, ms=0, final=True))  # response.create
    assert isinstance(answer, PlannedSegment) and "".join(answer.tokens) == "It is 21 degrees."


def test_speech_while_a_call_waits_is_a_barge_in_and_no_tools_means_the_plain_reply() -> None:
    params = ScriptedParams.parse(ScriptedParams(), {"tool_calls": '[{"name": "f"}]'})
    policy = ScriptedPolicy(params, CAPS)
    policy.tools = frozenset({"f"})
    policy.decide(_unit(0.2, index=0))
    assert isinstance(policy.decide(_unit(0.0, index=1)), list)
    assert isinstance(policy.decide(_unit(0.2, index=2)), Interrupt)
    plain = ScriptedPolicy(params, CAPS)  # the session offers nothing: tool_calls do not apply
    plain.decide(_unit(0.2, index=0))
    assert isinstance(plain.decide(_unit(0.0, index=1)), PlannedSegment)
