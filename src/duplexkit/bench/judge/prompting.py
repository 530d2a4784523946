"""Judge prompt sets, shared by every benchmark: one-pass placeholder filling, the capped excerpt of a bad
reply that a follow-up quotes back to the judge, and the versioned set of texts with the rules they follow
(a benchmark supplies its texts, placeholders, reply formats and follow-up)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


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


@dataclass(frozen=True)
class PromptRules:
    """What a benchmark's prompts take: each prompt's placeholders, the reply format it asks for, and the
    one follow-up after an unparseable reply (`{error}`, `{reply}` capped at `quote_chars`, `{format}`)."""

    placeholders: Mapping[str, tuple[str, ...]]
    formats: Mapping[str, str]
    follow_up: str
    quote_chars: int = 400

    def digest(self, texts: Mapping[str, str]) -> str:
        """sha256 over the prompt `texts`, their reply formats and the follow-up: what a version pins."""
        digest = hashlib.sha256()
        for name in sorted(texts):
            digest.update(f"{name}\0{texts[name]}\0{self.formats[name]}\0".encode())
        digest.update(self.follow_up.encode())
        return digest.hexdigest()


@dataclass(frozen=True)
class PromptSet:
    """The prompt texts in use, their version (part of every score's cache key), where they came from, and
    the rules they follow."""

    version: str
    source: str
    texts: Mapping[str, str]
    rules: PromptRules

    def render(self, name: str, **values: str) -> str:
        """The prompt `name` with its placeholders filled from `values` (a missing value fills as empty)."""
        return fill(self.texts[name], self.rules.placeholders[name], values)

    def follow_up(self, name: str, error: str, reply: str) -> str:
        """The follow-up after an unparseable reply to prompt `name`: what failed, why, and the format."""
        quoted = excerpt(reply, self.rules.quote_chars)
        values = {"error": error, "reply": quoted, "format": self.rules.formats[name]}
        return fill(self.rules.follow_up, tuple(values), values)
