"""OmniInteract's side of `duplexkit score`: the request built from a published case, scoring a case with a
verdict source (an LLM judge or the offline one), and the run summary.

- The request holds the case's slots (as its metadata recorded them at run time) and its output chunks
  (`<subset>/<id>.json`: `[{text, timestamp: [start, end], aligned_words?: [{text, start, end}]}]`, seconds
  on the simulated listener's playback timeline).
- `score_case` matches chunks to slots, asks the verdicts each slot needs (early phase when there is early
  output, core when the slot is not interrupted and there is core output, partial for an interrupted slot
  with output), applies the rules of `metrics` and returns the case's flat sums (`metrics.case_totals`).
- The summary sums the cases' records: a failed case counts as silence (every expected slot an FN); a case
  the judge could not score is left out (`complete: false`). It also says whether the run is eligible for
  official scoring (no response clipped, cancelled or cleared) and which cases are not, and why.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from duplexkit.bench.judge.base import JudgeInfo, SampleScore, ScoringError
from duplexkit.bench.judge.run import coverage
from duplexkit.bench.omniinteract import metrics as m
from duplexkit.bench.omniinteract.case import Case
from duplexkit.bench.omniinteract.slots import Slot, slot_from_json

NOT_COMPARABLE = (
    "offline keyword judge (judge: builtin) for smoke tests and demos; "
    "not comparable to published OmniInteract numbers"
)


@dataclass(frozen=True)
class CaseRequest:
    """One published case, as a judge sees it."""

    split: str
    id: str
    slots: tuple[Slot, ...]
    chunks: tuple[m.Chunk, ...]
    ground_truth: Mapping[str, Any] | None


class Verdicts(Protocol):
    """Where a case's verdicts come from; `order` numbers the calls so a trace is deterministic."""

    async def early(self, slot: Slot, text: str, order: int) -> m.EarlyVerdict: ...
    async def core(self, slot: Slot, text: str, order: int) -> m.CoreVerdict: ...
    async def partial(self, slot: Slot, text: str, order: int) -> m.PartialVerdict: ...


def score_request(meta: Mapping[str, Any], response: bytes, sample: Case | None) -> CaseRequest:
    """The request for one published case; ScoringError when its files are unreadable."""
    try:
        slots = tuple(slot_from_json(raw) for raw in meta["slots"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ScoringError(f"the case's meta.json has no readable slots: {exc!r}") from exc
    return CaseRequest(
        split=str(meta["split"]),
        id=str(meta["id"]),
        slots=slots,
        chunks=tuple(read_chunks(response)),
        ground_truth=sample.ground_truth if sample is not None else None,
    )


def read_chunks(response: bytes) -> list[m.Chunk]:
    """The output chunks of a published case's `<id>.json`."""
    try:
        chunks = []
        for item in json.loads(response):
            start, end = (float(t) for t in item["timestamp"])
            raw_words = item.get("aligned_words")
            words = (
                tuple(m.Word(str(w["text"]), float(w["start"]), float(w["end"])) for w in raw_words)
                if isinstance(raw_words, list)
                else None
            )
            chunks.append(m.Chunk(str(item["text"]), start, end, words))
    except (ValueError, TypeError, KeyError) as exc:
        raise ScoringError(f"unreadable output chunks: {exc!r}") from exc
    return chunks


async def score_case(request: CaseRequest, verdicts: Verdicts) -> SampleScore:
    """Match, ask the verdicts each slot needs (concurrently), apply the rules; the case's score record."""
    matching = m.match(request.slots, request.chunks)

    async def one(n: int, output: m.SlotOutput) -> m.SlotResult:
        slot = output.slot
        early = core = partial = None
        if output.early:
            early = await verdicts.early(slot, output.early_text, 3 * n)
        if slot.interrupted:
            if output.has_output:
                text = " ".join(c.text for c in output.chunks)
                partial = await verdicts.partial(slot, text, 3 * n + 2)
        elif output.core:
            core = await verdicts.core(slot, output.core_text, 3 * n + 1)
        return m.slot_result(output, early, core, partial)

    gathered = await asyncio.gather(
        *(one(n, o) for n, o in enumerate(matching.outputs)), return_exceptions=True
    )
    results: list[m.SlotResult] = []
    for item in gathered:
        if isinstance(item, BaseException):
            raise item
        results.append(item)
    totals = m.case_totals(results, len(matching.unmatched), request.split)
    details = {
        "slots": [
            {**r.to_json(), "early_text": o.early_text, "core_text": o.core_text}
            for r, o in zip(results, matching.outputs, strict=True)
        ],
        "unmatched": [{"text": c.text, "start": c.start, "end": c.end} for c in matching.unmatched],
    }
    return SampleScore(scores=totals, details=details)


@dataclass(frozen=True)
class Summary:
    """`scores/summary.json` of an OmniInteract run."""

    judge: JudgeInfo
    coverage: Mapping[str, int]
    groups: Mapping[str, Mapping[str, float | None]]
    interruption: Mapping[str, float | None]
    eligibility: Mapping[str, Any]
    word_timing: Mapping[str, int]
    counts: Mapping[str, Mapping[str, int]]

    @property
    def complete(self) -> bool:
        return self.coverage["errors"] == 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"benchmark": "omniinteract", "judge": self.judge.to_json()}
        if self.judge.kind == "builtin":
            out["note"] = NOT_COMPARABLE
        all_global = dict(self.groups.get("all_global", {}))

        def section(prefix: str) -> dict[str, Any]:
            return {
                name.split(":", 1)[1]: {**values, **self.counts.get(name, {})}
                for name, values in sorted(self.groups.items())
                if name.startswith(prefix)
            }

        return out | {
            "complete": self.complete,
            "coverage": dict(self.coverage),
            "eligibility": dict(self.eligibility),
            "word_timing": dict(self.word_timing),
            "ia_qtf1": {
                **all_global,
                **self.counts.get("all_global", {}),
                "by_scenario": {
                    **section("scenario:"),
                    "1Q1A Global": {
                        **self.groups.get("1q1a_global", {}),
                        **self.counts.get("1q1a_global", {}),
                    },
                },
                "1q1a_global": {**self.groups.get("1q1a_global", {}), **self.counts.get("1q1a_global", {})},
            },
            "subsets": {
                **all_global,
                **self.counts.get("all_global", {}),
                "by_subset": section("subset:"),
            },
            "interruption": dict(self.interruption),
        }


def summarise(
    info: JudgeInfo,
    metas: Sequence[Mapping[str, Any]],
    outcomes: Mapping[tuple[str, str], tuple[str, dict[str, float]]],
) -> Summary:
    totals: dict[str, float] = {}
    counts: dict[str, dict[str, int]] = {}
    ineligible: list[dict[str, Any]] = []
    timing: dict[str, int] = {}
    for meta in metas:
        outcome, scores = outcomes[(meta["split"], meta["id"])]
        outcome = "scored" if outcome == "cached" else outcome
        try:  # the groups the case counts in, and what it counts as when it said nothing (failed)
            silent = m.silent_totals([slot_from_json(s) for s in meta.get("slots") or []], meta["split"])
        except (KeyError, TypeError, ValueError):
            silent = {}
        # A failed case, and a case the judge could not score, count as silent: every attempted case stays in
        # the sums' denominator with its expected slots as misses, as Omni-DuplexEval counts its errors.
        record = scores if outcome == "scored" else silent
        for group in {key.rsplit("/", 1)[0] for key in {**silent, **record} if key.endswith("/tp")}:
            tally = counts.setdefault(group, {"samples": 0, "skipped": 0, "errors": 0})
            tally["samples"] += 1
            tally["skipped"] += outcome == "skipped"
            tally["errors"] += outcome == "error"
        for key, value in record.items():
            totals[key] = totals.get(key, 0.0) + value
        eligibility = meta.get("eligibility") or {}
        if meta.get("status") == "published" and eligibility.get("eligible") is False:
            ineligible.append(
                {"case": f"{meta['split']}/{meta['id']}", "reasons": eligibility.get("reasons")}
            )
        source = meta.get("word_timing")
        if isinstance(source, str):
            timing[source] = timing.get(source, 0) + 1
    return Summary(
        judge=info,
        coverage=coverage(metas, outcomes),
        groups=m.group_metrics(totals),
        interruption=m.interruption_metrics(totals),
        eligibility={"eligible": not ineligible, "ineligible_cases": ineligible},
        word_timing=timing,
        counts=counts,
    )


PUBLISHED_ALL_GLOBAL = "best published 0.368 (MiniCPM-o 4.5, arXiv 2605.26485)"
PUBLISHED_1QNA = "best published 0.052 (arXiv 2605.26485)"
"""The paper's headline numbers that docs/omniinteract.md cites, shown beside ours in the terminal."""

INTERRUPTION_DIRECTION = {"nor": "↓", "paq": "↑", "csm_sr": "↓", "csm_as": "↓", "nccs": "↑"}
"""Which way each interruption metric is better: no output, spills and spill seconds are failures; partial
quality and nested consistency are wanted."""


def summary_lines(recorded: Mapping[str, Any]) -> list[str]:
    """The terminal lines of a summary's JSON: IA-QTF1 overall (↑, beside the best published number), per
    scenario and subset, the interruption rates with the direction that is better, and the cases that make
    the run ineligible for official scoring."""

    def f1(group: Mapping[str, Any]) -> str:
        value = group.get("ia_qtf1")
        return "-" if value is None else f"{value:.3f}"

    scores = recorded["ia_qtf1"]
    lines = [
        "↑ higher is better · ↓ lower is better",
        f"IA-QTF1 ↑ All Global={f1(scores)} ({PUBLISHED_ALL_GLOBAL})  "
        f"1Q1A Global={f1(scores.get('1q1a_global') or {})}",
    ]
    lines += [
        f"  {name}: {f1(group)}  (n={group.get('samples')})"
        for name, group in scores["by_scenario"].items()
        if name != "1Q1A Global"
    ]
    lines += [
        f"  subset {name}: {f1(group)}  (n={group.get('samples')})"
        + (f"  ({PUBLISHED_1QNA})" if name.lower() == "1qna" else "")
        for name, group in recorded["subsets"]["by_subset"].items()
    ]
    shown = {k: "-" if v is None else f"{v:.3f}" for k, v in recorded["interruption"].items()}
    lines.append(
        "  " + "  ".join(f"{k.upper()} {INTERRUPTION_DIRECTION.get(k, '')}={v}" for k, v in shown.items())
    )
    eligibility = recorded["eligibility"]
    if not eligibility["eligible"]:
        cases = ", ".join(c["case"] for c in eligibility["ineligible_cases"])
        lines.append(f"not eligible for official scoring (clipped, cancelled or cleared responses): {cases}")
    return lines
