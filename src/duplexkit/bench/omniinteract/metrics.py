"""The OmniInteract scoring rules as implemented: matching, phases, decay, slot results, IA-QTF1 and the
interruption and nested metrics. Pure functions over plain values; judges supply the verdicts.

- **Matching.** An output chunk `{text, start, end, words?}` goes to the slot with start ≤ chunk.start < end;
  when several contain it (nested), the latest start wins. A chunk in no slot is one false positive.
- **Phases.** The part of a slot's output before t_a is its early phase, the rest its core. A chunk that
  straddles t_a (start < t_a < end) is split at its words' start times when it has words (each part spans
  its words; the core part starts at t_a for the fallback below); any other chunk belongs whole to the
  phase in which it starts. A slot without an early phase (later 1QnA steps) has only a core.
- **Spill.** The latest end of a slot's chunks past the slot's end, in seconds; on a HARD slot any spill
  (unrounded) is one false positive.
- **decay(t, peak, end)** = clamp(1 - alpha·(max(0, t - peak)/(end - peak))^gamma, 0, 1), with
  alpha = gamma = 1; when end ≤ peak it is 1 at or before the peak and 0 after.
- **Weights.** W_ack = 0.2 and W_core = 0.8, except on a 1QnA step after the first (built with start = t_a,
  so without an early phase): W_ack = 0, W_core = 1.0 (upstream `compute_unified_eval.py` ~L260-266).
- **Early.** Neutral: TP_ack = decay(first early start, start, t_a)·S_ack·W_ack; hallucination: +1 FP.
- **Core** (not interrupted, some core output). t_start = the time of the first character of the trigger
  phrase that has one, found as text in the core chunks' texts joined as they are (case-sensitive, then
  case-insensitive; a character's time is its word's start, so only chunks with words give one), when
  S_core > 0; else the first core chunk's start (t_a for a part split off at t_a); never before t_a.
  S_core < 0.5: +1 FP and TP_core = 0; else TP_core = decay(t_start, t_a, end)·S_core·W_core.
- **Slot.** TP = clamp(TP_ack + TP_core, 0, 1); FN = 1 when the slot is not interrupted and TP_core ≤ 0.
  Interrupted slots skip the core (TP_core = 0, FN = 0).
- **IA-QTF1** = 2ΣTP / (2ΣTP + ΣFP + ΣFN), `None` when the denominator is 0.
- **Interruption** (over interrupted slots): NOR = share with no output; over those with output: PAQ = mean
  partial quality q, CSM-SR = share that spill, CSM-AS = mean spill seconds (0 for a slot that does not).
- **NCCS** (upstream's definition, under its name) = mean over nested pairs of
  √(Score_core_outer·Score_core_inner), each slot's stored core score Score_core = TP_core
  (= decay·S_core·0.8), when both are > 0 and the inner core starts no later than the outer core, else 0 for
  the pair. **NCCS-raw** is the same over the judge's raw S_core (the paper's formula read literally); it is
  reported beside it as `nccs_raw`, never as NCCS.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from duplexkit.bench.omniinteract.slots import Slot

ALPHA = 1.0
GAMMA = 1.0
ACK_WEIGHT = 0.2
CORE_WEIGHT = 0.8
LATER_STEP_WEIGHTS = (0.0, 1.0)
"""(W_ack, W_core) of a 1QnA step after the first: it has no early phase."""
CORE_PASS = 0.5


@dataclass(frozen=True)
class Word:
    text: str
    start: float
    end: float


@dataclass(frozen=True)
class Chunk:
    """One piece of model output on the playback timeline (seconds); `words` when word times are known;
    `split_at` the answer time when this is the core part of a chunk split there."""

    text: str
    start: float
    end: float
    words: tuple[Word, ...] | None = None
    split_at: float | None = None


@dataclass
class SlotOutput:
    """What the model said in one slot, split into phases."""

    slot: Slot
    chunks: list[Chunk] = field(default_factory=list)
    early: list[Chunk] = field(default_factory=list)
    core: list[Chunk] = field(default_factory=list)

    @property
    def has_output(self) -> bool:
        return bool(self.chunks)

    @property
    def early_text(self) -> str:
        return _joined(self.early)

    @property
    def core_text(self) -> str:
        return _joined(self.core)

    @property
    def first_early_start(self) -> float | None:
        return min((c.start for c in self.early), default=None)

    @property
    def spill_s(self) -> float:
        """Seconds past the slot's end, unrounded (any > 0 is a spill)."""
        latest = max((c.end for c in self.chunks), default=self.slot.end)
        return max(0.0, latest - self.slot.end)


@dataclass(frozen=True)
class Matching:
    outputs: tuple[SlotOutput, ...]
    unmatched: tuple[Chunk, ...]


def match(slots: Sequence[Slot], chunks: Iterable[Chunk]) -> Matching:
    """Assign chunks to slots and split each slot's chunks into phases (module docstring)."""
    outputs = [SlotOutput(slot) for slot in slots]
    unmatched: list[Chunk] = []
    for chunk in sorted(chunks, key=lambda c: (c.start, c.end)):
        holders = [o for o in outputs if o.slot.start <= chunk.start < o.slot.end]
        if not holders:
            unmatched.append(chunk)
            continue
        owner = max(holders, key=lambda o: (o.slot.start, o.slot.index))
        owner.chunks.append(chunk)
        early, core = split_at(chunk, owner.slot.answer) if owner.slot.has_early_phase else (None, chunk)
        if early is not None:
            owner.early.append(early)
        if core is not None:
            owner.core.append(core)
    return Matching(tuple(outputs), tuple(unmatched))


def split_at(chunk: Chunk, t: float) -> tuple[Chunk | None, Chunk | None]:
    """The chunk's part before `t` and its part from `t` on (see Phases)."""
    if chunk.words and chunk.start < t < chunk.end:
        early = _from_words(tuple(w for w in chunk.words if w.start < t), None)
        core = _from_words(tuple(w for w in chunk.words if w.start >= t), t)
        if early is not None or core is not None:
            return early, core
    return (chunk, None) if chunk.start < t else (None, chunk)


def _from_words(words: tuple[Word, ...], split_at: float | None) -> Chunk | None:
    text = " ".join(w.text for w in words if w.text).strip()
    if not text:
        return None
    return Chunk(text, words[0].start, words[-1].end, words, split_at)


def decay(t: float, peak: float, end: float) -> float:
    """The timeliness factor (module docstring)."""
    if end <= peak:
        return 1.0 if t <= peak else 0.0
    x = max(0.0, t - peak) / (end - peak)
    value: float = 1.0 - ALPHA * x**GAMMA
    return min(1.0, max(0.0, value))


def trigger_time(output: SlotOutput, phrase: str | None) -> float | None:
    """When the core answer starts: the trigger phrase's first timed character, else the first core chunk's
    start (t_a for a part split off there); never before t_a (see Core). `phrase` None: not looked for."""
    if not output.core:
        return None
    t_a = output.slot.answer
    first = output.core[0]
    fallback = first.start if first.split_at is None else min(first.start, first.split_at)
    found = _phrase_time(output.core, phrase) if phrase else None
    return max(found if found is not None else fallback, t_a)


def _phrase_time(core: Sequence[Chunk], phrase: str) -> float | None:
    wanted = phrase.strip().strip("\"'\u201c\u201d\u2018\u2019")
    if not wanted:
        return None
    text = "".join(c.text for c in core)
    times = [t for c in core for t in _char_times(c)]
    at = text.find(wanted)
    if at < 0:
        at = text.lower().find(wanted.lower())
    if at < 0:
        return None
    return next((t for t in times[at : at + len(wanted)] if t is not None), None)


def _char_times(chunk: Chunk) -> list[float | None]:
    """Each character of the chunk's text with its word's start time, where the words spell it."""
    words = [w for w in chunk.words or () if w.text]
    if not chunk.text or not words:
        return [None] * len(chunk.text)
    gap = "" if _has_cjk("".join(w.text for w in words)) else " "
    spelled: list[float | None] = []
    for k, w in enumerate(words):
        spelled += [w.start] * len(w.text)
        if gap and k + 1 < len(words):
            spelled.append(None)
    built = gap.join(w.text for w in words).strip()
    if built == chunk.text:
        return spelled[: len(chunk.text)]
    times: list[float | None] = [None] * len(chunk.text)
    at = chunk.text.find(built)
    if at >= 0:
        for k, t in enumerate(spelled[: len(chunk.text) - at]):
            times[at + k] = t
    return times


def _has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


@dataclass(frozen=True)
class EarlyVerdict:
    label: Literal["neutral", "hallucination"]
    score: float


@dataclass(frozen=True)
class CoreVerdict:
    score: float
    trigger_phrase: str | None
    spoiler: bool


@dataclass(frozen=True)
class PartialVerdict:
    quality: float
    hallucination: bool


@dataclass(frozen=True)
class SlotResult:
    """One slot's numbers; `fp` is the sum of its early, core and spill false positives."""

    slot: Slot
    tp: float
    tp_ack: float
    tp_core: float
    fp: int
    fn: int
    core_score: float | None
    core_start: float | None
    spill_s: float
    has_output: bool
    partial_quality: float | None
    fp_reasons: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "slot": self.slot.to_json(),
            "tp": round(self.tp, 4),
            "tp_ack": round(self.tp_ack, 4),
            "tp_core": round(self.tp_core, 4),
            "fp": self.fp,
            "fn": self.fn,
            "core_score": self.core_score,
            "core_start": self.core_start,
            "spill_s": self.spill_s,
            "has_output": self.has_output,
            "partial_quality": self.partial_quality,
            "fp_reasons": list(self.fp_reasons),
        }


def weights(slot: Slot) -> tuple[float, float]:
    """(W_ack, W_core) of the slot (see Weights)."""
    return LATER_STEP_WEIGHTS if slot.scenario == "1qna" and slot.index > 0 else (ACK_WEIGHT, CORE_WEIGHT)


def slot_result(
    output: SlotOutput,
    early: EarlyVerdict | None,
    core: CoreVerdict | None,
    partial: PartialVerdict | None = None,
) -> SlotResult:
    """Apply the slot rules to one slot's output and its verdicts (None: that phase had no output)."""
    slot = output.slot
    w_ack, w_core = weights(slot)
    reasons: list[str] = []
    tp_ack = 0.0
    if early is not None and output.early:
        if early.label == "hallucination":
            reasons.append("early_hallucination")
        else:
            first = output.first_early_start
            assert first is not None
            tp_ack = decay(first, slot.start, slot.answer) * early.score * w_ack
    tp_core, core_score, core_start = 0.0, None, None
    if not slot.interrupted and core is not None and output.core:
        core_score = core.score
        core_start = trigger_time(output, core.trigger_phrase if core.score > 0 else None)
        assert core_start is not None
        if core.score < CORE_PASS:
            reasons.append("core_below_pass")
        else:
            tp_core = decay(core_start, slot.answer, slot.end) * core.score * w_core
    spill = output.spill_s
    if slot.hard and spill > 0:
        reasons.append("spill")
    return SlotResult(
        slot=slot,
        tp=min(1.0, max(0.0, tp_ack + tp_core)),
        tp_ack=tp_ack,
        tp_core=tp_core,
        fp=len(reasons),
        fn=int(not slot.interrupted and tp_core <= 0),
        core_score=core_score,
        core_start=core_start,
        spill_s=round(spill, 3),
        has_output=output.has_output,
        partial_quality=partial.quality if (slot.interrupted and partial is not None) else None,
        fp_reasons=tuple(reasons),
    )


def ia_qtf1(tp: float, fp: float, fn: float) -> float | None:
    """2·TP / (2·TP + FP + FN); None when nothing was expected and nothing said."""
    denominator = 2 * tp + fp + fn
    return None if denominator == 0 else 2 * tp / denominator


def nccs_pair(outer: SlotResult, inner: SlotResult, *, raw: bool = False) -> float:
    """One nested pair's contribution to NCCS (each slot's TP_core, upstream's Score_core) or, with `raw`,
    to NCCS-raw (the judge's S_core)."""
    if raw:
        so, si = outer.core_score or 0.0, inner.core_score or 0.0
    else:
        so, si = outer.tp_core, inner.tp_core
    if so <= 0 or si <= 0 or outer.core_start is None or inner.core_start is None:
        return 0.0
    return math.sqrt(so * si) if inner.core_start <= outer.core_start else 0.0


def case_totals(results: Sequence[SlotResult], unmatched: int, subset: str) -> dict[str, float]:
    """The case's flat score record: per group `<group>/tp|fp|fn`, the interruption and NCCS sums.

    Groups: `scenario:<tag>` for each slot tag, `subset:<subset>`, `1q1a_global` (realtime, proactive and
    nested slots) and `all_global`; unmatched chunks count as FP in the subset and All Global only.
    """
    totals: dict[str, float] = {}

    def add(group: str, tp: float, fp: float, fn: float) -> None:
        for name, value in (("tp", tp), ("fp", fp), ("fn", fn)):
            key = f"{group}/{name}"
            totals[key] = totals.get(key, 0.0) + value

    for r in results:
        groups = [f"scenario:{tag}" for tag in r.slot.tags] + [f"subset:{subset}", "all_global"]
        if r.slot.scenario in ("realtime", "proactive", "nested"):
            groups.append("1q1a_global")
        for group in groups:
            add(group, r.tp, r.fp, r.fn)
    for group in (f"subset:{subset}", "all_global"):
        add(group, 0.0, float(unmatched), 0.0)
    interrupted = [r for r in results if r.slot.interrupted]
    spoken = [r for r in interrupted if r.has_output]
    totals |= {
        "interrupted/slots": float(len(interrupted)),
        "interrupted/no_output": float(len(interrupted) - len(spoken)),
        "interrupted/with_output": float(len(spoken)),
        "interrupted/judged": float(sum(r.partial_quality is not None for r in spoken)),
        "interrupted/quality_sum": sum(r.partial_quality or 0.0 for r in spoken),
        "interrupted/spills": float(sum(r.spill_s > 0 for r in spoken)),
        "interrupted/spill_s_sum": sum(r.spill_s for r in spoken),
    }
    pairs: dict[int, dict[str, SlotResult]] = {}
    for r in results:
        if r.slot.pair is not None and r.slot.role is not None:
            pairs.setdefault(r.slot.pair, {})[r.slot.role] = r
    complete = [p for p in pairs.values() if "outer" in p and "inner" in p]
    totals["nccs/pairs"] = float(len(complete))
    totals["nccs/sum"] = sum(nccs_pair(p["outer"], p["inner"]) for p in complete)
    totals["nccs_raw/sum"] = sum(nccs_pair(p["outer"], p["inner"], raw=True) for p in complete)
    return {k: round(v, 6) for k, v in totals.items()}


def silent_totals(slots: Sequence[Slot], subset: str) -> dict[str, float]:
    """The record of a case that produced nothing (a failed case counts so): every expected slot an FN."""
    empty = [slot_result(SlotOutput(slot), None, None) for slot in slots]
    return case_totals(empty, 0, subset)


def group_metrics(totals: Mapping[str, float]) -> dict[str, dict[str, float | None]]:
    """IA-QTF1 and its sums per group, from summed case records."""
    groups = sorted({key.rsplit("/", 1)[0] for key in totals if key.endswith("/tp")})
    out: dict[str, dict[str, float | None]] = {}
    for group in groups:
        tp, fp, fn = (totals.get(f"{group}/{name}", 0.0) for name in ("tp", "fp", "fn"))
        score = ia_qtf1(tp, fp, fn)
        out[group] = {
            "ia_qtf1": None if score is None else round(score, 4),
            "tp": round(tp, 4),
            "fp": round(fp, 4),
            "fn": round(fn, 4),
        }
    return out


def interruption_metrics(totals: Mapping[str, float]) -> dict[str, float | None]:
    """NOR, PAQ, CSM-SR, CSM-AS, NCCS and NCCS-raw from summed case records (None when their population is
    empty)."""
    slots, spoken = totals.get("interrupted/slots", 0.0), totals.get("interrupted/with_output", 0.0)
    judged, pairs = totals.get("interrupted/judged", 0.0), totals.get("nccs/pairs", 0.0)

    def ratio(numerator: float, denominator: float) -> float | None:
        return None if denominator == 0 else round(numerator / denominator, 4)

    return {
        "nor": ratio(totals.get("interrupted/no_output", 0.0), slots),
        "paq": ratio(totals.get("interrupted/quality_sum", 0.0), judged),
        "csm_sr": ratio(totals.get("interrupted/spills", 0.0), spoken),
        "csm_as": ratio(totals.get("interrupted/spill_s_sum", 0.0), spoken),
        "nccs": ratio(totals.get("nccs/sum", 0.0), pairs),
        "nccs_raw": ratio(totals.get("nccs_raw/sum", 0.0), pairs),
    }


def _joined(chunks: Sequence[Chunk]) -> str:
    return " ".join(c.text.strip() for c in chunks if c.text.strip())
