"""Lenient reading of a judge's reply: the first JSON object in it, trailing commas dropped, values coerced.

For each expected field, the value comes from the first JSON object in the reply that parses (after dropping
trailing commas); a field that object lacks (or every field, when no object parses) is looked up on its own
as `"name": value` anywhere in the text. Values are coerced: numbers and numeric strings, booleans and
yes/no/true/false for 0/1 fields. A reply parses only when every field is present and valid; otherwise
`ParseError` says which field failed and why, in words fit to quote back to the judge. Text fields (a
quoted phrase) are optional: read the same way, kept as strings, empty when absent.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_REASONING = re.compile(r'"(\w*reasoning)"\s*:\s*"((?:[^"\\]|\\.)*)"', re.IGNORECASE)
_WORDS = {"true": 1.0, "yes": 1.0, "false": 0.0, "no": 0.0}


class ParseError(ValueError):
    """The reply has no usable value for some field; the message names the field and the reason."""


@dataclass(frozen=True, slots=True)
class Field:
    """A numeric field of a reply, valid in [low, high]; `whole` fields take whole numbers only."""

    name: str
    low: float
    high: float
    whole: bool


@dataclass(frozen=True, slots=True)
class Verdict:
    """A parsed reply: each field's value (int for whole fields, 2 decimals otherwise), the text fields asked
    for (empty when absent) and the reasoning."""

    values: Mapping[str, float]
    reasoning: str
    texts: Mapping[str, str] = dataclasses.field(default_factory=dict)


def parse_reply(text: str, fields: Sequence[Field], texts: Sequence[str] = ()) -> Verdict:
    """Read `fields` (and the optional text fields `texts`) from a judge reply; raise ParseError when any of
    the numeric fields is missing or malformed."""
    if not text.strip():
        raise ParseError("the reply is empty")
    obj = first_json_object(text)
    values: dict[str, float] = {}
    problems: list[str] = []
    missing: list[str] = []
    for field in fields:
        found, raw = _lookup(obj, text, field.name)
        if not found:
            missing.append(field.name)
            continue
        try:
            values[field.name] = _coerce(raw, field)
        except ParseError as exc:
            problems.append(str(exc))
    if obj is None and len(missing) == len(fields):
        raise ParseError("the reply contains no JSON object")
    problems.extend(f"the field {name} is missing" for name in missing)
    if problems:
        raise ParseError("; ".join(problems))
    found_texts = {}
    for name in texts:
        present, raw = _lookup(obj, text, name)
        found_texts[name] = raw.strip() if present and isinstance(raw, str) else ""
    return Verdict(values=values, reasoning=_reasoning(obj, text), texts=found_texts)


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first balanced `{...}` in `text` that parses as a JSON object once trailing commas are dropped."""
    start = text.find("{")
    while start != -1:
        end = matching_brace(text, start)
        if end is not None:
            try:
                value = json.loads(_TRAILING_COMMA.sub(r"\1", text[start : end + 1]))
            except json.JSONDecodeError:
                value = None
            if isinstance(value, dict):
                return value
        start = text.find("{", start + 1)
    return None


def matching_brace(text: str, start: int) -> int | None:
    """The index of the `}` closing the `{` at `start` (JSON strings skipped), or `None`."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        char = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _lookup(obj: Mapping[str, Any] | None, text: str, name: str) -> tuple[bool, Any]:
    if obj is not None and name in obj:
        return True, obj[name]
    match = re.search(
        rf"""["']?\b{re.escape(name)}\b["']?\s*[:=]\s*("[^"\n]*"|'[^'\n]*'|[^,}}\n]+)""", text, re.IGNORECASE
    )
    if match is None:
        return False, None
    return True, match.group(1).strip().strip("\"'").strip()


def _coerce(raw: Any, field: Field) -> float:
    if isinstance(raw, bool | int | float):
        number = float(raw)
    elif isinstance(raw, str):
        word = raw.strip().lower()
        if word in _WORDS and field.low == 0 and field.high == 1:
            number = _WORDS[word]
        else:
            try:
                number = float(word)
            except ValueError:
                raise ParseError(f"the field {field.name} is {_shown(raw)}, not a number") from None
    else:
        raise ParseError(f"the field {field.name} is {_shown(raw)}, not a number")
    if not math.isfinite(number) or not field.low <= number <= field.high:
        raise ParseError(f"the field {field.name} is {_shown(raw)}, outside {_span(field)}")
    if field.whole:
        if number != int(number):
            raise ParseError(f"the field {field.name} is {_shown(raw)}, not one of {_span(field)}")
        return int(number)
    return round(number, 2)


def _span(field: Field) -> str:
    if field.whole:
        return ", ".join(str(v) for v in range(int(field.low), int(field.high) + 1))
    return f"{field.low:.2f} to {field.high:.2f}"


def _shown(raw: Any) -> str:
    text = json.dumps(raw, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _reasoning(obj: Mapping[str, Any] | None, text: str) -> str:
    if obj is not None:
        for key, value in obj.items():
            if key.lower().endswith("reasoning") and isinstance(value, str):
                return value.strip()
    match = _REASONING.search(text)
    return match.group(2).strip() if match else ""
