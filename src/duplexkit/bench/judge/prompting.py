"""Filling prompt texts, shared by every benchmark's prompt set: one-pass placeholder filling and the capped
excerpt of a bad reply that a follow-up quotes back to the judge."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence


def fill(text: str, placeholders: Sequence[str], values: Mapping[str, str]) -> str:
    """Fill `{placeholder}`s in one pass, so a value that itself contains braces is never filled again.

    Only the named placeholders are filled (other braces, e.g. JSON examples, stay); a missing value is empty.
    """
    pattern = re.compile("|".join(re.escape("{" + p + "}") for p in placeholders))
    return pattern.sub(lambda m: values.get(m.group(0)[1:-1], ""), text)


def excerpt(reply: str, limit: int) -> str:
    """The reply stripped and capped at `limit` characters (marked ` [...]` when cut)."""
    text = reply.strip()
    return text[:limit] + " [...]" if len(text) > limit else text
