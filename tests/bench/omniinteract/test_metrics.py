"""Every OmniInteract scoring formula on small cases whose expected numbers were worked out by hand
from the rules in ../shared/reference/benchmarks.md (written as literals, not computed by the code)."""

from __future__ import annotations

import math

import pytest

from duplexkit.bench.omniinteract.case import QA, Case
from duplexkit.bench.omniinteract.metrics import (
    Chunk,
    CoreVerdict,
    EarlyVerdict,
    PartialVerdict,
    Word,
    case_totals,
    decay,
    group_metrics,
    ia_qtf1,
    interruption_metrics,
    match,
    nccs_pair,
    silent_totals,
    slot_result,
)
from duplexkit.bench.omniinteract.slots import Slot, build_slots, case_scenarios


def slot(start: float, answer: float, end: float, **kw: object) -> Slot:
    base: dict[str, object] = dict(
        index=0,
        start=start,
        answer=answer,
        end=end,
        hard=True,
        scenario="realtime",
        interrupted=False,
        question="q",
        reference="r",
    )
    base.update(kw)
    return Slot(**base)  # type: ignore[arg-type]


def words(*items: tuple[str, float, float]) -> tuple[Word, ...]:
    return tuple(Word(t, s, e) for t, s, e in items)


@pytest.mark.parametrize(
    ("t", "peak", "end", "expected"),
    [
        (5.0, 4.0, 8.0, 0.75),  # 1 - (1/4)
        (6.0, 4.0, 8.0, 0.5),  # 1 - (2/4)
        (3.0, 4.0, 8.0, 1.0),  # before the peak: clamped to 1
        (4.0, 4.0, 8.0, 1.0),
        (8.0, 4.0, 8.0, 0.0),
        (10.0, 4.0, 8.0, 0.0),  # past the end: clamped to 0
        (4.0, 4.0, 4.0, 1.0),  # empty span, at the peak
        (4.5, 4.0, 4.0, 0.0),  # empty span, after it
    ],
)
def test_decay(t: float, peak: float, end: float, expected: float) -> None:
    assert decay(t, peak, end) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("tp", "fp", "fn", "expected"),
    [
        (1.0, 0.0, 0.0, 1.0),
        (0.5, 1.0, 1.0, 1.0 / 3.0),  # 1 / (1 + 2)
        (0.555, 1.0, 1.0, 1.11 / 3.11),
        (0.0, 2.0, 3.0, 0.0),
        (0.0, 0.0, 0.0, None),
    ],
)
def test_ia_qtf1(tp: float, fp: float, fn: float, expected: float | None) -> None:
    result = ia_qtf1(tp, fp, fn)
    assert result == (None if expected is None else pytest.approx(expected))


# Slot [10, 14, 20): one early chunk at 11 s and one core chunk with word times.
EARLY = Chunk("hmm let me look", 11.0, 12.0)
CORE = Chunk(
    "it is a red cup",
    15.0,
    17.0,
    words(
        ("it", 15.0, 15.3), ("is", 15.3, 15.6), ("a", 15.6, 16.0), ("red", 16.0, 16.4), ("cup", 16.4, 17.0)
    ),
)


@pytest.mark.parametrize(
    ("early", "core", "tp_ack", "tp_core", "tp", "fp", "fn"),
    [
        # neutral ack: decay(11, 10, 14) = 0.75, x S_ack 0.5 x 0.2 = 0.075
        # core: trigger "red cup" at 16.0 -> decay(16, 14, 20) = 1 - 2/6 = 2/3, x 0.9 x 0.8 = 0.48
        (EarlyVerdict("neutral", 0.5), CoreVerdict(0.9, "red cup", False), 0.075, 0.48, 0.555, 0, 0),
        # hallucinated early text: +1 FP, no ack credit
        (EarlyVerdict("hallucination", 1.0), CoreVerdict(0.9, "red cup", False), 0.0, 0.48, 0.48, 1, 0),
        # core below 0.5: +1 FP, TP_core 0, and then FN 1 (the ack alone does not avoid it)
        (EarlyVerdict("neutral", 1.0), CoreVerdict(0.4, "red cup", False), 0.15, 0.0, 0.15, 1, 1),
        # phrase not found: fall back to the first core chunk start 15.0 -> decay = 1 - 1/6 = 5/6; x 1.0 x 0.8
        (None, CoreVerdict(1.0, "blue bowl", False), 0.0, 2.0 / 3.0, 2.0 / 3.0, 0, 0),
    ],
)
def test_early_and_core_phase(
    early: EarlyVerdict | None, core: CoreVerdict, tp_ack: float, tp_core: float, tp: float, fp: int, fn: int
) -> None:
    chunks = [CORE] if early is None else [EARLY, CORE]
    output = match([slot(10.0, 14.0, 20.0)], chunks).outputs[0]
    result = slot_result(output, early, core)
    assert result.tp_ack == pytest.approx(tp_ack)
    assert result.tp_core == pytest.approx(tp_core)
    assert result.tp == pytest.approx(tp)
    assert (result.fp, result.fn) == (fp, fn)


def test_tp_is_clamped_to_one() -> None:
    # ack: decay(10, 10, 14) = 1 x 1 x 0.2 = 0.2; core at 14 exactly: 1 x 1 x 0.8 = 0.8; sum 1.0 exactly,
    # and a t_start before t_a counts as t_a (never earlier)
    out = match([slot(10.0, 14.0, 20.0)], [Chunk("ok", 10.0, 10.5), Chunk("answer", 14.0, 15.0)]).outputs[0]
    result = slot_result(out, EarlyVerdict("neutral", 1.0), CoreVerdict(1.0, None, False))
    assert result.tp == pytest.approx(1.0) and result.core_start == 14.0


def test_a_chunk_straddling_the_answer_time_splits_at_word_times() -> None:
    chunk = Chunk(
        "well it is red",
        13.0,
        15.5,
        words(("well", 13.0, 13.4), ("it", 14.2, 14.5), ("is", 14.5, 14.8), ("red", 14.8, 15.5)),
    )
    out = match([slot(10.0, 14.0, 20.0)], [chunk]).outputs[0]
    assert out.early_text == "well" and out.first_early_start == 13.0
    assert out.core_text == "it is red" and out.core[0].start == 14.2


def test_without_word_times_a_chunk_belongs_to_the_phase_it_starts_in() -> None:
    out = match([slot(10.0, 14.0, 20.0)], [Chunk("well it is red", 13.5, 15.0)]).outputs[0]
    assert out.early_text == "well it is red" and out.core == []
    result = slot_result(out, EarlyVerdict("neutral", 1.0), None)
    # ack decay(13.5, 10, 14) = 1 - 3.5/4 = 0.125 x 1 x 0.2 = 0.025; no core -> FN
    assert result.tp == pytest.approx(0.025) and (result.fp, result.fn) == (0, 1)


@pytest.mark.parametrize(
    ("hard", "fp", "spill"),
    [(True, 1, 1.5), (False, 0, 1.5)],
)
def test_spill_past_the_slot_end(hard: bool, fp: int, spill: float) -> None:
    # core at 14.0 with S 1.0: TP_core 0.8; the chunk runs to 21.5, 1.5 s past the end at 20
    out = match([slot(10.0, 14.0, 20.0, hard=hard)], [Chunk("answer", 14.0, 21.5)]).outputs[0]
    result = slot_result(out, None, CoreVerdict(1.0, None, False))
    assert result.spill_s == spill and result.fp == fp and result.tp == pytest.approx(0.8)


def test_an_interrupted_slot_skips_the_core_and_has_no_fn() -> None:
    out = match([slot(10.0, 14.0, 20.0, interrupted=True)], [Chunk("answer", 14.0, 21.0)]).outputs[0]
    result = slot_result(out, None, CoreVerdict(1.0, None, False), PartialVerdict(0.6, False))
    assert (result.tp, result.fn, result.fp) == (0.0, 0, 1)  # the 1.0 s spill is its only FP
    assert result.partial_quality == 0.6


def test_matching_latest_start_wins_and_unmatched_chunks_are_false_positives() -> None:
    outer = slot(10.0, 30.0, 40.0, index=0, scenario="nested", pair=0, role="outer")
    inner = slot(15.0, 20.0, 30.0, index=1, scenario="nested", pair=0, role="inner")
    result = match(
        [outer, inner],
        [
            Chunk("a", 12.0, 13.0),
            Chunk("b", 21.0, 22.0),
            Chunk("c", 31.0, 32.0),
            Chunk("d", 5.0, 6.0),
            Chunk("e", 40.0, 41.0),
        ],
    )
    assert [c.text for c in result.outputs[0].chunks] == ["a", "c"]
    assert [c.text for c in result.outputs[1].chunks] == ["b"]
    assert [c.text for c in result.unmatched] == ["d", "e"]  # before any slot, and at a (half-open) end


def _result(s: Slot, core_score: float, core_at: float) -> object:
    out = match([s], [Chunk("x", core_at, core_at + 0.5)]).outputs[0]
    return slot_result(out, None, CoreVerdict(core_score, None, False))


@pytest.mark.parametrize(
    ("inner_at", "outer_at", "expected", "raw"),
    [
        # NCCS multiplies each slot's TP_core: outer decay(31; 30, 40) = 0.9, inner decay(21; 20, 40) = 0.95
        (21.0, 31.0, math.sqrt((0.9 * 0.81 * 0.8) * (0.95 * 0.64 * 0.8)), 0.72),  # raw: sqrt(0.81 x 0.64)
        (
            31.0,
            31.0,
            math.sqrt((0.9 * 0.81 * 0.8) * (0.45 * 0.64 * 0.8)),
            0.72,
        ),  # "no later than": equal counts
        (32.0, 31.0, 0.0, 0.0),  # inner core after the outer core
    ],
)
def test_nccs_pair(inner_at: float, outer_at: float, expected: float, raw: float) -> None:
    outer = _result(slot(10.0, 30.0, 40.0, scenario="nested", pair=0, role="outer"), 0.81, outer_at)
    inner = _result(slot(15.0, 20.0, 40.0, scenario="nested", pair=0, role="inner"), 0.64, inner_at)
    assert nccs_pair(outer, inner) == pytest.approx(expected)  # type: ignore[arg-type]
    assert nccs_pair(outer, inner, raw=True) == pytest.approx(raw)  # type: ignore[arg-type]


def test_nccs_is_upstreams_on_the_reference_pair() -> None:
    # The reference's worked pair: upstream 0.5234 = sqrt(0.4756 x 0.576), raw 0.6928 = sqrt(0.6 x 0.8).
    outer = _result(slot(0.0, 10.0, 130.0, scenario="nested", pair=0, role="outer"), 0.6, 11.1)
    inner = _result(slot(5.0, 8.0, 18.0, scenario="nested", pair=0, role="inner"), 0.8, 9.0)
    assert nccs_pair(outer, inner) == pytest.approx(0.5234, abs=1e-4)  # type: ignore[arg-type]
    assert nccs_pair(outer, inner, raw=True) == pytest.approx(0.6928, abs=1e-4)  # type: ignore[arg-type]
    totals = case_totals([outer, inner], 0, "1q1a")  # type: ignore[list-item]
    metrics = interruption_metrics(totals)
    assert (metrics["nccs"], metrics["nccs_raw"]) == (0.5234, 0.6928)


def test_nccs_needs_both_scores_above_zero() -> None:
    outer = _result(slot(10.0, 30.0, 40.0, scenario="nested", pair=0, role="outer"), 0.0, 31.0)
    inner = _result(slot(15.0, 20.0, 40.0, scenario="nested", pair=0, role="inner"), 0.64, 21.0)
    assert nccs_pair(outer, inner) == 0.0  # type: ignore[arg-type]


def test_case_totals_and_group_metrics() -> None:
    # slot A realtime: TP 0.555, FP 0, FN 0 (the first parametrised case above)
    a = slot(10.0, 14.0, 20.0, index=0)
    # slot B proactive at [20, 30, 40): says nothing -> FN 1
    b = slot(20.0, 30.0, 40.0, index=1, scenario="proactive")
    matching = match([a, b], [EARLY, CORE, Chunk("stray", 2.0, 3.0)])
    results = [
        slot_result(matching.outputs[0], EarlyVerdict("neutral", 0.5), CoreVerdict(0.9, "red cup", False)),
        slot_result(matching.outputs[1], None, None),
    ]
    totals = case_totals(results, len(matching.unmatched), "1q1a")
    groups = group_metrics(totals)
    # realtime: 2 x 0.555 / (1.11 + 0 + 0) = 1
    assert groups["scenario:realtime"]["ia_qtf1"] == 1.0
    # proactive: 0 / (0 + 0 + 1) = 0
    assert groups["scenario:proactive"]["ia_qtf1"] == 0.0
    # 1Q1A Global: TP 0.555, FP 0, FN 1 -> 1.11 / 2.11 = 0.526066...
    assert groups["1q1a_global"]["ia_qtf1"] == pytest.approx(0.5261, abs=1e-4)
    # All Global adds the stray chunk: 1.11 / 3.11 = 0.356913...
    assert groups["all_global"]["ia_qtf1"] == pytest.approx(0.3569, abs=1e-4)
    assert groups["subset:1q1a"]["fp"] == 1.0


def test_interruption_metrics() -> None:
    # three interrupted slots: one silent, one with a 2 s spill and q 0.5, one without spill and q 1.0
    silent = slot(0.0, 5.0, 10.0, index=0, interrupted=True)
    spills = slot(10.0, 15.0, 20.0, index=1, interrupted=True)
    clean = slot(20.0, 25.0, 30.0, index=2, interrupted=True)
    matching = match([silent, spills, clean], [Chunk("x", 15.0, 22.0), Chunk("y", 25.0, 26.0)])
    results = [
        slot_result(matching.outputs[0], None, None),
        slot_result(matching.outputs[1], None, None, PartialVerdict(0.5, False)),
        slot_result(matching.outputs[2], None, None, PartialVerdict(1.0, False)),
    ]
    metrics = interruption_metrics(case_totals(results, 0, "1q1a"))
    assert metrics["nor"] == pytest.approx(1 / 3, abs=1e-4)  # 1 of 3 said nothing
    assert metrics["paq"] == 0.75  # (0.5 + 1.0) / 2
    assert metrics["csm_sr"] == 0.5  # 1 of the 2 with output spilled
    assert metrics["csm_as"] == 1.0  # (2.0 + 0.0) / 2
    assert metrics["nccs"] is None  # no nested pairs


def test_a_silent_case_is_every_expected_slot_missed() -> None:
    slots = [slot(0.0, 5.0, 10.0, index=0), slot(10.0, 15.0, 20.0, index=1, interrupted=True)]
    totals = silent_totals(slots, "1q1a")
    assert totals["all_global/fn"] == 1.0 and totals["all_global/tp"] == 0.0  # the interrupted one is no FN


def qa(q: float, a: float, kind: str = "realtime", interrupted: bool = False) -> QA:
    return QA(q, f"question at {q}", a, f"answer at {a}", kind, interrupted)


def test_multi_turn_slots_end_at_the_next_question_or_sixty_seconds_after_the_last_answer() -> None:
    case = Case("1q1a", "0001", "multi_turn", (qa(30.0, 35.0), qa(5.0, 12.0, "proactive")), "a.json")
    slots = build_slots(case)
    assert [(s.start, s.answer, s.end, s.hard, s.scenario) for s in slots] == [
        (5.0, 12.0, 30.0, True, "proactive"),
        (30.0, 35.0, 95.0, True, "realtime"),
    ]


def test_nested_pairs_and_their_ends() -> None:
    # outer asked at 10 answered at 40; an inner asked at 20 answered at 25 (<= 40) pairs with it; the next
    # outer question is at 50, answered at 55
    case = Case("1q1a", "0002", "nested", (qa(10.0, 40.0), qa(20.0, 25.0), qa(50.0, 55.0)), "a.json")
    slots = build_slots(case)
    assert [(s.start, s.answer, s.end, s.scenario, s.role, s.pair) for s in slots] == [
        (10.0, 40.0, 50.0, "nested", "outer", 0),
        (20.0, 25.0, 40.0, "nested", "inner", 0),
        (50.0, 55.0, 115.0, "realtime", None, None),
    ]
    assert case_scenarios(case) == {"nested", "realtime"}  # what --scenario selects the case by


def test_an_inner_question_answered_after_the_outer_answer_does_not_pair() -> None:
    case = Case("1q1a", "0003", "nested", (qa(10.0, 40.0), qa(20.0, 45.0)), "a.json")
    assert [s.role for s in build_slots(case)] == [None, None]


def test_qna_steps_have_soft_boundaries_and_only_the_first_has_an_early_phase() -> None:
    steps = (qa(5.0, 30.0, "1qna"), qa(5.0, 10.0, "1qna"), qa(5.0, 20.0, "1qna", interrupted=True))
    slots = build_slots(Case("1qna", "x", "1qna", steps, "a.json"))
    assert [(s.start, s.answer, s.end, s.hard, s.has_early_phase) for s in slots] == [
        (5.0, 10.0, 20.0, False, True),
        (20.0, 20.0, 30.0, True, False),  # interrupted: always HARD
        (30.0, 30.0, 90.0, False, False),
    ]
    assert slots[0].later_references == ("answer at 20.0", "answer at 30.0")


def test_the_summary_counts_failed_and_unjudged_cases_as_silence_in_every_sum() -> None:
    from duplexkit.bench.judge.base import JudgeInfo
    from duplexkit.bench.omniinteract.scoring import summarise

    realtime = slot(0.0, 5.0, 10.0, index=0).to_json()
    proactive = slot(10.0, 15.0, 20.0, index=1, scenario="proactive").to_json()
    metas = [
        {"split": "1q1a", "id": "a", "status": "published", "slots": [realtime]},
        {"split": "1q1a", "id": "b", "status": "failed", "slots": [realtime, proactive]},
        {"split": "1q1a", "id": "c", "status": "published", "slots": [proactive]},
    ]
    # case a: TP 0.8 (core at t_a with S 1.0), case b failed (2 FN), case c: the judge failed
    scored = {"scenario:realtime/tp": 0.8, "scenario:realtime/fp": 0.0, "scenario:realtime/fn": 0.0}
    scored |= {"all_global/tp": 0.8, "all_global/fp": 0.0, "all_global/fn": 0.0}
    outcomes = {
        ("1q1a", "a"): ("scored", scored),
        ("1q1a", "b"): ("skipped", {}),
        ("1q1a", "c"): ("error", {}),
    }
    info = JudgeInfo("builtin", "builtin", None, "v", "ground truth")
    summary = summarise(info, metas, outcomes).to_json()
    assert summary["complete"] is False and summary["coverage"]["errors"] == 1
    # Every attempted case stays in the denominator; c, whose judge failed, counts as silent (1 FN), as
    # Omni-DuplexEval pins its errors: All Global: 2 x 0.8 / (1.6 + 0 + 3) = 0.3478
    assert summary["ia_qtf1"]["ia_qtf1"] == pytest.approx(0.3478, abs=1e-4)
    assert summary["ia_qtf1"]["samples"] == 3 and summary["ia_qtf1"]["errors"] == 1
    # realtime: a (TP 0.8) and b (FN 1): 1.6 / 2.6 = 0.6154; proactive: b's and c's FNs: 0
    assert summary["ia_qtf1"]["by_scenario"]["realtime"]["ia_qtf1"] == pytest.approx(0.6154, abs=1e-4)
    assert summary["ia_qtf1"]["by_scenario"]["proactive"]["ia_qtf1"] == 0.0
    assert summary["ia_qtf1"]["by_scenario"]["proactive"]["fn"] == 2.0


def test_a_later_qna_step_weighs_its_core_fully_and_its_ack_not_at_all() -> None:
    """compute_unified_eval.py (de304ce) L260-266: a 1QnA slot of step index > 1 has W_ack = 0, W_core = 1.0.
    Steps at t_a 10 and 20 (question at 5), last slot ends at 80; one chunk per step; S_ack = 1, S_core = 0.8.
    Step 1: early chunk at 6 → decay(6, 5, 10) = 0.8 → TP_ack = 0.8·1·0.2 = 0.16; core at 12 → decay(12, 10,
    20) = 0.8 → TP_core = 0.8·0.8·0.8 = 0.512; TP = 0.672. Step 2 (starts at its t_a 20): core at 26 →
    decay(26, 20, 80) = 0.9 → TP_core = 0.9·0.8·1.0 = 0.72 (0.576 under the 0.8 weight)."""
    steps = (qa(5.0, 10.0, "1qna"), qa(5.0, 20.0, "1qna"))
    slots = build_slots(Case("1qna", "x", "1qna", steps, "a.json"))
    chunks = [Chunk("hmm", 6.0, 7.0), Chunk("the pan", 12.0, 13.0), Chunk("now stir", 26.0, 27.0)]
    outputs = match(slots, chunks).outputs
    first = slot_result(outputs[0], EarlyVerdict("neutral", 1.0), CoreVerdict(0.8, None, False))
    later = slot_result(outputs[1], None, CoreVerdict(0.8, None, False))
    assert (first.tp_ack, first.tp_core, first.tp) == pytest.approx((0.16, 0.512, 0.672))
    assert (later.tp_ack, later.tp_core, later.tp) == pytest.approx((0.0, 0.72, 0.72))
    totals = case_totals([first, later], 0, "1qna")
    # IA-QTF1 = 2·1.392 / (2·1.392 + 0 + 0) = 1.0: no FP, no FN; the TP sum carries the rule
    assert totals["all_global/tp"] == pytest.approx(1.392)


def test_the_core_part_split_off_at_the_answer_time_starts_there_without_a_trigger() -> None:
    """match_slots.py gives the core part of a chunk that straddles t_a the hint t_a, and
    compute_unified_eval.py's fallback start is max(min(first word, t_a), t_a) = t_a:
    decay(10, 10, 20) = 1."""
    s = slot(5.0, 10.0, 20.0)
    words = (Word("so", 8.0, 8.5), Word("the", 12.0, 12.5), Word("cup", 13.0, 13.5))
    out = match([s], [Chunk("so the cup", 8.0, 13.5, words)]).outputs[0]
    r = slot_result(out, EarlyVerdict("neutral", 1.0), CoreVerdict(1.0, None, False))
    assert r.core_start == 10.0 and r.tp_core == pytest.approx(0.8)
    # with a trigger phrase found in the words its first word's start counts: decay(13, 10, 20) = 0.7
    r = slot_result(out, EarlyVerdict("neutral", 1.0), CoreVerdict(1.0, "Cup", False))
    assert r.core_start == 13.0 and r.tp_core == pytest.approx(0.56)


def test_a_trigger_phrase_in_a_chunk_without_words_has_no_time() -> None:
    """Without word times no character has a time (compute_unified_eval.py `_chunk_char_start_times`): the
    first core chunk's start counts, not the start of the chunk that holds the phrase."""
    s = slot(5.0, 10.0, 20.0)
    out = match([s], [Chunk("well", 12.0, 13.0), Chunk("a red cup", 15.0, 16.0)]).outputs[0]
    r = slot_result(out, None, CoreVerdict(1.0, "red cup", False))
    assert r.core_start == 12.0


def test_nested_walk_skips_the_questions_between_an_outer_and_its_inner() -> None:
    """build_slots.py's nested walk goes on after the inner: the question at 15 (answered after the outer)
    makes no slot; the next outer is the one at 50."""
    case = Case(
        "1q1a", "n", "nested", (qa(10.0, 40.0), qa(15.0, 45.0), qa(20.0, 25.0), qa(50.0, 55.0)), "a.json"
    )
    got = [(s.start, s.end, s.scenario, s.role) for s in build_slots(case)]
    assert got == [
        (10.0, 50.0, "nested", "outer"),
        (20.0, 40.0, "nested", "inner"),
        (50.0, 115.0, "realtime", None),
    ]
