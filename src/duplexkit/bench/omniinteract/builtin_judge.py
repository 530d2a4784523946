"""The offline judge for the built-in OmniInteract set: verdicts from its ground-truth keywords.

It calls nothing: a core answer scores the share of the reference's keywords it names (whole words, any
case), its trigger phrase is the first keyword it names; early text naming a keyword of its own answer
before the answer is due is a hallucination, any other early text a neutral acknowledgement (score 1); an
interrupted slot's partial quality is the share of keywords named; a spoiler names a later step's keyword.
Its numbers only say whether the pipeline runs end to end and are labelled not comparable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from duplexkit.bench.judge.base import JudgeInfo, SampleScore, ScoringError
from duplexkit.bench.omniinteract import metrics as m
from duplexkit.bench.omniinteract.scoring import CaseRequest, score_case
from duplexkit.bench.omniinteract.slots import Slot

BUILTIN_JUDGE_VERSION = "omniinteract-builtin-judge-1"


class BuiltinJudge:
    """Deterministic verdicts from the built-in dataset's `ground_truth["keywords"]` (answer → words)."""

    def __init__(self) -> None:
        self.info = JudgeInfo(
            kind="builtin",
            model="builtin",
            url=None,
            prompt_version=BUILTIN_JUDGE_VERSION,
            prompt_source="ground truth",
        )

    async def aclose(self) -> None:
        return None

    async def score(self, request: CaseRequest) -> SampleScore:
        keywords = (request.ground_truth or {}).get("keywords")
        if not isinstance(keywords, Mapping):
            raise ScoringError("the builtin judge needs the built-in dataset's keywords; this case has none")
        return await score_case(request, _KeywordVerdicts(keywords))


class _KeywordVerdicts:
    def __init__(self, keywords: Mapping[str, Sequence[str]]) -> None:
        self._keywords = keywords

    def _of(self, reference: str) -> list[str]:
        words = self._keywords.get(reference)
        if not words:
            raise ScoringError(f"the ground truth names no keywords for the answer {reference!r}")
        return [str(w) for w in words]

    async def early(self, slot: Slot, text: str, order: int) -> m.EarlyVerdict:
        if _named(self._of(slot.reference), text):
            return m.EarlyVerdict("hallucination", 0.0)
        return m.EarlyVerdict("neutral", 1.0)

    async def core(self, slot: Slot, text: str, order: int) -> m.CoreVerdict:
        words = self._of(slot.reference)
        named = _named(words, text)
        later = [w for ref in slot.later_references for w in self._keywords.get(ref, ())]
        return m.CoreVerdict(
            round(len(named) / len(words), 2), named[0] if named else None, bool(_named(later, text))
        )

    async def partial(self, slot: Slot, text: str, order: int) -> m.PartialVerdict:
        words = self._of(slot.reference)
        return m.PartialVerdict(round(len(_named(words, text)) / len(words), 2), False)


def _named(words: Sequence[str], text: str) -> list[str]:
    """The keywords `text` names, in the order they first appear in it."""
    found = []
    for word in words:
        hit = re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE)
        if hit:
            found.append((hit.start(), word))
    return [word for _, word in sorted(found)]
