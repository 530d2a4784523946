"""OmniInteract response slots: where each expected answer is due and how far it may run. Pure functions.

A slot is `[start, answer, end)`: `start` the question time, `answer` (t_a) the reference answer time.

- multi_turn (1Q1A): questions in time order; a slot ends at the next question's time (the last one at
  t_a + 60 s), never before its own start (upstream's floor: a next question asked before this answer
  time leaves the slot no core phase). The boundary is HARD.
- nested (1Q1A): walking the questions in time order, an outer question's inner question is the first later
  one asked strictly inside (outer.q, outer.a) whose answer is no later than outer.a; the walk goes on after
  the inner, so questions between the two make no slot (upstream's walk). The inner slot ends at outer.a,
  the outer one at the next outer question (or t_a + 60 s, never before outer.a); both are HARD and tagged
  `nested`. A question of a nested video that pairs with nothing is an ordinary slot tagged with its
  `question_type` (upstream fails the whole case there).
- 1QnA: one question, n steps in answer-time order. Step 1 starts at the question, later steps start at
  their own t_a (no early phase); each ends at the next step's t_a (the last at t_a + 60 s). SOFT boundaries.
  The judge sees the later steps' references, so it can tell a spoiler.
- An interrupted slot (the annotation's `is_interrupted` / `interrupted`) is always HARD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from duplexkit.bench.omniinteract.case import QA, Case

LAST_SLOT_S = 60.0
"""How long the last slot of a case stays open after its answer time."""

Role = Literal["outer", "inner"]


@dataclass(frozen=True)
class Slot:
    """One expected response; `scenario` is realtime, proactive, nested or 1qna (interruption is a flag)."""

    index: int
    start: float
    answer: float
    end: float
    hard: bool
    scenario: str
    interrupted: bool
    question: str
    reference: str
    later_references: tuple[str, ...] = ()
    pair: int | None = None
    role: Role | None = None

    @property
    def has_early_phase(self) -> bool:
        return self.answer > self.start

    @property
    def tags(self) -> tuple[str, ...]:
        """The scenario groups the slot counts in."""
        return (self.scenario, "interrupted") if self.interrupted else (self.scenario,)

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "start": self.start,
            "answer": self.answer,
            "end": self.end,
            "hard": self.hard,
            "scenario": self.scenario,
            "interrupted": self.interrupted,
            "question": self.question,
            "reference": self.reference,
            "later_references": list(self.later_references),
            "pair": self.pair,
            "role": self.role,
        }


def slot_from_json(raw: Mapping[str, Any]) -> Slot:
    """A slot as `Slot.to_json` recorded it (in a case's metadata); KeyError/TypeError/ValueError if not."""
    role = raw.get("role")
    return Slot(
        index=int(raw["index"]),
        start=float(raw["start"]),
        answer=float(raw["answer"]),
        end=float(raw["end"]),
        hard=bool(raw["hard"]),
        scenario=str(raw["scenario"]),
        interrupted=bool(raw["interrupted"]),
        question=str(raw["question"]),
        reference=str(raw["reference"]),
        later_references=tuple(str(r) for r in raw.get("later_references") or ()),
        pair=None if raw.get("pair") is None else int(raw["pair"]),
        role=role if role in ("outer", "inner") else None,
    )


def case_scenarios(case: Case) -> frozenset[str]:
    """The scenario tags of the case's slots (`interrupted` included)."""
    return frozenset(tag for slot in build_slots(case) for tag in slot.tags)


def build_slots(case: Case) -> list[Slot]:
    """The case's slots, in time order (see the module docstring)."""
    if case.scene_type == "1qna":
        return _qna_slots(case.qas)
    qas = sorted(case.qas, key=lambda qa: (qa.question_time, qa.answer_time))
    if case.scene_type == "nested":
        return _nested_slots(qas)
    return [
        _slot(
            i, qa, qas[i + 1].question_time if i + 1 < len(qas) else None, qa.question_type, qa.question_time
        )
        for i, qa in enumerate(qas)
    ]


def _slot(index: int, qa: QA, end: float | None, scenario: str, floor: float, **extra: object) -> Slot:
    stop = qa.answer_time + LAST_SLOT_S if end is None else end
    return Slot(
        index=index,
        start=qa.question_time,
        answer=qa.answer_time,
        end=max(stop, floor),
        hard=True,
        scenario=scenario,
        interrupted=qa.interrupted,
        question=qa.question_text,
        reference=qa.answer_text,
        **extra,  # type: ignore[arg-type]
    )


def _nested_slots(qas: list[QA]) -> list[Slot]:
    """Upstream's walk: from each outer, the first later question that fits is its inner; the walk goes on
    after the inner, so the questions between an outer and its inner make no slot. An outer with no inner
    is an ordinary slot and the walk goes on with the next question (upstream fails such a case)."""
    groups: list[tuple[int, int | None]] = []
    i = 0
    while i < len(qas):
        outer = qas[i]
        j = next(
            (
                j
                for j in range(i + 1, len(qas))
                if outer.question_time < qas[j].question_time < outer.answer_time
                and qas[j].answer_time <= outer.answer_time
            ),
            None,
        )
        groups.append((i, j))
        i = i + 1 if j is None else j + 1
    slots: list[Slot] = []
    pair = 0
    for n, (i, j) in enumerate(groups):
        following = qas[groups[n + 1][0]].question_time if n + 1 < len(groups) else None
        if j is None:
            slots.append(_slot(i, qas[i], following, qas[i].question_type, qas[i].question_time))
            continue
        slots.append(_slot(i, qas[i], following, "nested", qas[i].answer_time, pair=pair, role="outer"))
        slots.append(
            _slot(j, qas[j], qas[i].answer_time, "nested", qas[j].question_time, pair=pair, role="inner")
        )
        pair += 1
    return sorted(slots, key=lambda slot: (slot.start, slot.index))


def _qna_slots(qas: tuple[QA, ...]) -> list[Slot]:
    steps = sorted(qas, key=lambda qa: qa.answer_time)
    slots = []
    for k, qa in enumerate(steps):
        end = steps[k + 1].answer_time if k + 1 < len(steps) else qa.answer_time + LAST_SLOT_S
        slots.append(
            Slot(
                index=k,
                start=qa.question_time if k == 0 else qa.answer_time,
                answer=qa.answer_time,
                end=max(end, qa.answer_time),
                hard=qa.interrupted,
                scenario="1qna",
                interrupted=qa.interrupted,
                question=qa.question_text,
                reference=qa.answer_text,
                later_references=tuple(later.answer_text for later in steps[k + 1 :]),
            )
        )
    return slots
