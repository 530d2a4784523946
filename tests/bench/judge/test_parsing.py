"""Lenient reading of judge replies and the reasons a reply fails."""

from __future__ import annotations

import pytest

from duplexkit.bench.judge.parsing import ParseError, parse_reply
from duplexkit.bench.omni_duplex_eval.judge import FIELDS

TEMPORAL = FIELDS["rtd_temporal"]
CONTENT = FIELDS["rtd_content"]
SUCCESS = FIELDS["pr_correction"]


def test_valid_json() -> None:
    verdict = parse_reply('{"temporal_score": 3, "is_relevant": 1, "reasoning": "good"}', TEMPORAL)
    assert verdict.values == {"temporal_score": 3, "is_relevant": 1}
    assert verdict.reasoning == "good"


def test_first_object_in_prose_with_trailing_commas_and_a_fence() -> None:
    reply = (
        'Sure.\n```json\n{"content_score": "2.456", "content_reasoning": "ok",}\n```\n{"content_score": 0}'
    )
    verdict = parse_reply(reply, CONTENT)
    assert verdict.values == {"content_score": 2.46}
    assert verdict.reasoning == "ok"


def test_types_are_coerced() -> None:
    assert parse_reply('{"temporal_score": "2", "is_relevant": true}', TEMPORAL).values == {
        "temporal_score": 2,
        "is_relevant": 1,
    }
    assert parse_reply('{"success_score": "yes"}', SUCCESS).values == {"success_score": 1}
    assert parse_reply('{"temporal_score": 1.0, "is_relevant": "no"}', TEMPORAL).values["is_relevant"] == 0


def test_per_key_fallback_reads_a_broken_object() -> None:
    reply = '{"temporal_score": 2, "is_relevant": 1, "reasoning": "the "dog" runs"'  # unbalanced, bad quotes
    assert parse_reply(reply, TEMPORAL).values == {"temporal_score": 2, "is_relevant": 1}
    assert parse_reply("temporal_score: 3\nis_relevant = 0", TEMPORAL).values == {
        "temporal_score": 3,
        "is_relevant": 0,
    }


def test_a_nested_object_is_read_whole() -> None:
    verdict = parse_reply('{"success_score": 0, "extra": {"a": 1}, "reasoning": "missed it"}', SUCCESS)
    assert verdict.values == {"success_score": 0} and verdict.reasoning == "missed it"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("The sentence matches the frames quite well.", "the reply contains no JSON object"),
        ("", "the reply is empty"),
        ('{"temporal_score": "high", "is_relevant": 1}', 'the field temporal_score is "high", not a number'),
        ('{"temporal_score": 5, "is_relevant": 1}', "the field temporal_score is 5, outside 0, 1, 2, 3"),
        (
            '{"temporal_score": 2.5, "is_relevant": 1}',
            "the field temporal_score is 2.5, not one of 0, 1, 2, 3",
        ),
        ('{"temporal_score": 2}', "the field is_relevant is missing"),
        ('{"temporal_score": null, "is_relevant": 1}', "the field temporal_score is null, not a number"),
    ],
)
def test_unparseable_replies_say_why(reply: str, reason: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_reply(reply, TEMPORAL)
    assert str(caught.value) == reason


def test_content_score_range_is_continuous() -> None:
    assert parse_reply('{"content_score": 3}', CONTENT).values == {"content_score": 3.0}
    with pytest.raises(ParseError, match=r"outside 0\.00 to 3\.00"):
        parse_reply('{"content_score": 3.5}', CONTENT)
