"""The cascade's settings: `--model-arg` strings and per-session `extra_body` values."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from duplexkit.models.cascade.params import PARAMETERS, CascadeConfig, SessionParams

GRAMMAR = "#JSGF V1.0; grammar g; public <g> = hello world;"


def test_defaults_are_the_issue_defaults() -> None:
    config, session = CascadeConfig.from_args({})
    assert (config.chunk_period_ms, config.responder, config.tts) == (50, "auto", "auto")
    assert (config.asr, config.turn, session.turn_eagerness) == ("auto", "auto", "auto")
    vad = session.vad
    assert (vad.threshold, vad.min_speech_ms, vad.silence_duration_ms, vad.prefix_padding_ms) == (
        0.5,
        96.0,
        500.0,
        300.0,
    )
    assert session.min_barge_in_ms == 600.0 and session.search is None


def test_model_args_set_process_settings_and_session_defaults(tmp_path: Path) -> None:
    grammar = tmp_path / "cmd.gram"
    grammar.write_text(GRAMMAR)
    config, session = CascadeConfig.from_args(
        {"chunk_period_ms": "200", "lead_ms": "250", "vad_threshold": "0.6", "asr_grammar": str(grammar)}
    )
    assert config.chunk_period_ms == 200 and config.lead_ms == 250
    assert session.vad_threshold == 0.6 and session.asr_grammar == GRAMMAR


@pytest.mark.parametrize(
    "args, key",
    [
        ({"chunk_period_ms": "5"}, "chunk_period_ms"),
        ({"lead_ms": "0"}, "lead_ms"),
        ({"responder": "gpt"}, "responder"),
        ({"tts": "festival"}, "tts"),
        ({"vad_threshold": "1.5"}, "vad_threshold"),
        ({"min_barge_in_ms": "-1"}, "min_barge_in_ms"),
        ({"asr_grammar": "/no/such/file.gram"}, "asr_grammar"),
        ({"bogus": "1"}, "bogus"),
        ({"responder": "openai"}, "llm_url"),
    ],
)
def test_bad_model_args_raise_naming_the_key(args: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        CascadeConfig.from_args(args)


def test_model_arg_keywords_are_comma_separated() -> None:
    _, session = CascadeConfig.from_args({"asr_keywords": "kitchen lights, weather"})
    assert session.asr_keywords == ("kitchen lights", "weather")
    assert session.search is not None and session.search.source == "kitchen lights /1e-20/\nweather /1e-20/\n"


def test_extra_body_overrides_ignore_unknown_keys_and_never_read_files(tmp_path: Path) -> None:
    base = SessionParams()
    updated = base.updated({"vad_silence_duration_ms": 300, "temperature_hint": "x"})
    assert updated.vad_silence_duration_ms == 300 and base.vad_silence_duration_ms == 500
    grammar = tmp_path / "cmd.gram"
    grammar.write_text(GRAMMAR)
    assert base.updated({"asr_grammar": str(grammar)}).asr_grammar == str(grammar)  # inline text, not a path


def test_a_grammar_replaces_keywords_and_back_but_not_both_at_once() -> None:
    keywords = SessionParams().updated({"asr_keywords": ["hello"]})
    grammar = keywords.updated({"asr_grammar": GRAMMAR})
    assert grammar.asr_keywords is None and grammar.search is not None and grammar.search.kind == "jsgf"
    assert grammar.updated({"asr_grammar": None}).search is None
    with pytest.raises(ValueError, match="asr_grammar, asr_keywords"):
        SessionParams().updated({"asr_grammar": GRAMMAR, "asr_keywords": ["hello"]})


@pytest.mark.parametrize(
    "values, key",
    [
        ({"vad_threshold": True}, "vad_threshold"),
        ({"vad_prefix_padding_ms": "lots"}, "vad_prefix_padding_ms"),
        ({"asr_grammar": 42}, "asr_grammar"),
        ({"asr_grammar": "  "}, "asr_grammar"),
        ({"asr_keywords": []}, "asr_keywords"),
        ({"asr_keywords": ["ok", 3]}, "asr_keywords"),
    ],
)
def test_bad_extra_body_values_raise_naming_the_key(values: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        SessionParams().updated(values)


def test_no_setting_is_both_a_process_and_a_session_setting() -> None:
    from dataclasses import fields

    from duplexkit.models.cascade.params import SessionParams

    assert not {f.name for f in fields(CascadeConfig)} & {f.name for f in fields(SessionParams)}


def test_the_parameter_table_lists_every_setting_once_and_nothing_else() -> None:
    """The table is what `--model-arg` accepts and what `--help` shows: a new setting needs a row."""
    names = [p.name for p in PARAMETERS]
    assert len(names) == len(set(names)) and all(p.help for p in PARAMETERS)
    assert set(names) == {f.name for f in (*fields(CascadeConfig), *fields(SessionParams))}
