"""A judge reply → FDB v2's processed judge file, by the rules of its `eval/eval_single_item.py` (what it
saves) and `scoring/parse.py` (what it reads back), in duplexkit's own code. Pure.

The judge is asked for `[start, end]: TT, IF` items under `"Turn-taking event and score"`, which is not
JSON, so reading is lenient:

1. Saved (`eval_single_item.py`): a reply whose first balanced `{...}` (after stripping one surrounding
   markdown fence) parses as a JSON object is saved as that object (re-serialised), else as its raw text.
2. Read (`parse.py`): the ```` ``` ```` / ```` ```json ```` blocks that mention the turn key, else the whole
   text; per block, first as JSON once intervals are normalised (`{a, b}` → `[a, b]`; `{"start": x, "end":
   y}` objects, any order → `[x, y]`), each item's intervals (any nesting of `[a, b]` pairs before the last
   two entries) paired with its last two entries as integer scores; failing that, by scanning the turn
   key's array for `[interval] : score, score` items and the task score after it. Times may be `m:ss` or
   `h:mm:ss`; a score is `int(float(x))`, `null` or unreadable is `None`. The events of every block are
   merged; the task score is the last block's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from duplexkit.bench.judge.parsing import matching_brace

TURN_KEY = "Turn-taking event and score"
TASK_KEY = "Task-specific score"
_NUM = r"[+-]?(?:\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
_BRACE_PAIR = re.compile(r"\{\s*([^{}]+?)\s*\}", re.DOTALL)
_START_END = re.compile(
    rf"""\{{\s*['"](?:start_time|start|startTime)['"]\s*:\s*({_NUM}|"[^"]+")\s*,\s*"""
    rf"""['"](?:end_time|end|endTime)['"]\s*:\s*({_NUM}|"[^"]+")\s*\}}"""
)
_END_START = re.compile(
    rf"""\{{\s*['"](?:end_time|end|endTime)['"]\s*:\s*({_NUM}|"[^"]+")\s*,\s*"""
    rf"""['"](?:start_time|start|startTime)['"]\s*:\s*({_NUM}|"[^"]+")\s*\}}"""
)
_FENCED = re.compile(r"```(?:json)?\s*([\s\S]*?)\s*```", re.IGNORECASE)


# --- step 1: what eval_single_item.py saves ------------------------------------------------------------


def saved_text(reply: str) -> str:
    """The file `eval_single_item.py` writes for `reply`: its JSON object re-serialised, else the text."""
    obj = _json_object(reply)
    return reply if obj is None else json.dumps(obj, ensure_ascii=False, indent=2)


def _json_object(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    body = text.strip()
    if body.startswith("```"):
        newline = body.find("\n")
        if newline != -1:
            body = body[newline + 1 :]
        if body.endswith("```"):
            body = body[:-3]
    body = body.strip()
    candidate = _first_balanced_object(body)
    try:
        obj = json.loads(body if candidate is None else candidate)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _first_balanced_object(text: str) -> str | None:
    start = text.find("{")
    end = None if start == -1 else matching_brace(text, start)
    return None if end is None else text[start : end + 1]


def process(text: str) -> dict[str, Any]:
    """The processed judge file (`<task>_processed.json`) of a saved judge file's text."""
    blocks = [m.group(1) for m in _FENCED.finditer(text) if TURN_KEY in m.group(1)] or [text]
    events: list[list[Any]] = []
    task_scores: list[int | None] = []
    for block in blocks:
        parsed = _clean_json(block)
        if parsed is not None:
            items = parsed.get(TURN_KEY, [])
            if isinstance(items, list):
                events.extend(items)
            if parsed.get(TASK_KEY) is not None:
                task_scores.append(parsed[TASK_KEY])
            continue
        region = _turn_array(block)
        if region is not None:
            start, end = region
            events.extend(_scan_items(block[start + 1 : end]))
            score = _task_score(block[end:])
            if not score:  # parse.py: `parse(rest) or parse(block)`, so a 0 is looked up again
                score = _task_score(block)
            if score is not None:
                task_scores.append(score)
    out: dict[str, Any] = {TURN_KEY: events}
    if task_scores:
        out[TASK_KEY] = task_scores[-1]
    return out


def time_s(token: Any) -> float:
    """A time as seconds: a number, `"12.5"`, `"m:ss"` or `"h:mm:ss"`; `ValueError` otherwise."""
    if isinstance(token, int | float):
        return float(token)
    if isinstance(token, str):
        s = token.strip().strip('"').strip("'")
        if ":" in s:
            parts = s.split(":")
            if len(parts) == 2:
                return float(parts[0]) * 60.0 + float(parts[1])
            total, mul = 0.0, 1.0
            for part in reversed(parts):
                total += float(part) * mul
                mul *= 60.0
            return total
        return float(s)
    raise ValueError(f"not a time: {token!r}")


def _int_or_none(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "null"):
        return None
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return None


def _looks_like_time(s: str) -> bool:
    s = s.strip().strip('"').strip("'")
    try:
        if ":" in s:
            for part in s.split(":"):
                float(part)
        else:
            float(s)
    except ValueError:
        return False
    return True


def normalise_intervals(text: str) -> str:
    """`{"start": x, "end": y}` (either order) and `{a, b}` of two times → `[x, y]`."""
    text = _START_END.sub(lambda m: f"[{m.group(1)}, {m.group(2)}]", text)
    text = _END_START.sub(lambda m: f"[{m.group(2)}, {m.group(1)}]", text)

    def pair(m: re.Match[str]) -> str:
        parts = [p.strip() for p in m.group(1).split(",")]
        if len(parts) == 2 and all(_looks_like_time(p) for p in parts):
            return f"[{parts[0]}, {parts[1]}]"
        return m.group(0)

    return _BRACE_PAIR.sub(pair, text)


def _pairs(obj: Any) -> Iterator[list[float]]:
    """Every `[a, b]` pair of times in `obj`, depth first (a pair that does not read as times is
    searched inside, where it holds nothing)."""
    if isinstance(obj, list) and len(obj) == 2 and all(isinstance(x, int | float | str) for x in obj):
        try:
            yield [time_s(obj[0]), time_s(obj[1])]
            return
        except ValueError:
            pass
    if isinstance(obj, list):
        for item in obj:
            yield from _pairs(item)


def _clean_json(block: str) -> dict[str, Any] | None:
    try:
        data = json.loads(normalise_intervals(block))
    except ValueError:
        return None
    if not isinstance(data, dict) or (TURN_KEY not in data and TASK_KEY not in data):
        return None
    items = data.get(TURN_KEY, [])
    if not isinstance(items, list):
        data[TURN_KEY] = []
        return data
    flat: list[list[Any]] = []
    for item in items:
        if not isinstance(item, list) or len(item) < 3:
            continue
        tt, if_ = _int_or_none(item[-2]), _int_or_none(item[-1])
        flat += [[pair, tt, if_] for pair in _pairs(item[:-2])]
    data[TURN_KEY] = flat
    return data


def _matching(text: str, start: int) -> int:
    """The index of the `]` closing the `[` at `start` (quotes skipped), or -1."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i
        elif ch in "\"'":
            i += 1
            while i < len(text) and text[i] != ch:
                if text[i] == "\\":
                    i += 1
                i += 1
        i += 1
    return -1


def _turn_array(block: str) -> tuple[int, int] | None:
    for key in (f'"{TURN_KEY}"', f"'{TURN_KEY}'"):
        at = block.find(key)
        if at == -1:
            continue
        bracket = block.find("[", at + len(key))
        if bracket == -1:
            continue
        end = _matching(block, bracket)
        if end != -1:
            return bracket, end
    return None


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n,":
        i += 1
    return i


def _score_token(text: str, i: int) -> tuple[str | None, int]:
    i = _skip(text, i)
    if i >= len(text):
        return None, i
    if text[i] == '"':
        j = i + 1
        while j < len(text) and text[j] != '"':
            if text[j] == "\\":
                j += 1
            j += 1
        return (text[i + 1 : j], j + 1) if j < len(text) else (None, i)
    j = i
    while j < len(text) and text[j] not in ",[]{}:\n\r\t ":
        j += 1
    token = text[i:j].strip()
    return token or None, j


def _score(token: str | None) -> int | None:
    if token is None or not token.strip() or token.strip().lower() == "null":
        return None
    t = token.strip()
    if len(t) >= 2 and t[0] == t[-1] == '"':
        t = t[1:-1]
    return _int_or_none(t)


def _interval_pairs(expr: str) -> list[list[float]]:
    text = normalise_intervals(expr)
    try:
        obj = json.loads(text)
    except ValueError:
        obj = json.loads(re.sub(r",\s*]", "]", text))
    return list(_pairs(obj))


def _scan_items(array: str) -> list[list[Any]]:
    """`[interval] : score, score` items of the turn array's text."""
    out: list[list[Any]] = []
    i = 0
    while True:
        i = _skip(array, i)
        if i >= len(array):
            break
        if array[i] != "[":
            i = array.find("[", i)
            if i == -1:
                break
        end = _matching(array, i)
        if end == -1:
            break
        expr = array[i : end + 1]
        j = _skip(array, end + 1)
        if j >= len(array) or array[j] != ":":
            i = j
            continue
        first, j = _score_token(array, j + 1)
        second, j = _score_token(array, j)
        try:
            pairs = _interval_pairs(expr)
        except ValueError:
            pairs = []
        out += [[pair, _score(first), _score(second)] for pair in pairs]
        i = j
    return out


def _task_score(text: str) -> int | None:
    m = re.search(rf'"{TASK_KEY}"\s*:\s*("[^"]+"|[^\s,}}\]]+)', text) or re.search(
        rf"'{TASK_KEY}'\s*:\s*('[^']+'|[^\s,}}\]]+)", text
    )
    if m is None:
        return None
    token = m.group(1)
    if token and token[0] == token[-1] and token[0] in "\"'":
        token = token[1:-1]
    return _int_or_none(token)
