"""OmniInteract's report section: IA-QTF1 by scenario and by subset (All Global overall), and under each
case's timeline its slots: the early phase [question, answer time) and the core [answer time, end) of each,
coloured red when the slot was missed (FN), with its TP / FP / FN in the tooltip, and the model's heard
speech on the same axis. Everything is read leniently from the case's meta and score files."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from duplexkit.bench.report.data import ReportSpec, SampleReport, ScoreSection
from duplexkit.bench.report.svg import Interval, lanes

_MEANS = ("ia_qtf1", "tp", "fp", "fn")


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def slot_figure(sample: SampleReport, span: float) -> str:
    """The case's slots, phases and speech (empty when its meta records no slots)."""
    raw_slots = sample.meta.get("slots")
    if not isinstance(raw_slots, list) or not raw_slots:
        return ""
    results: dict[int, Mapping[str, Any]] = {}
    details = sample.score.details if sample.score is not None else {}
    for item in details.get("slots") or []:
        slot = item.get("slot") if isinstance(item, dict) else None
        if isinstance(slot, dict) and isinstance(slot.get("index"), int):
            results[slot["index"]] = item
    bars: list[Interval] = []
    marks: list[tuple[float, str]] = []
    latest = span
    for row, raw in enumerate(s for s in raw_slots if isinstance(s, dict)):
        start, answer, end = _num(raw.get("start")), _num(raw.get("answer")), _num(raw.get("end"))
        if start is None or answer is None or end is None:
            continue
        index = raw.get("index")
        result = results.get(index) if isinstance(index, int) else None
        tag = f"{raw.get('scenario')}{' · interrupted' if raw.get('interrupted') else ''}"
        outcome = (
            f" · TP {result.get('tp')} FP {result.get('fp')} FN {result.get('fn')}"
            if result is not None
            else ""
        )
        name = f"slot {index} ({tag}){outcome}: {raw.get('question')}"
        missed = result is not None and result.get("fn") == 1
        if answer > start:
            bars.append(Interval(start, answer, "phase-early", f"{name} · early phase", row))
        bars.append(
            Interval(
                answer, min(end, latest), "phase-miss" if missed else "phase-core", f"{name} · core", row
            )
        )
        marks.append((answer, f"A{index}"))
    speech = [
        Interval(s.start, s.end, "chunk", f"{s.start:.2f}-{s.end:.2f} s: {s.text}", i)
        for i, s in enumerate(sample.sentences or ())
    ]
    return lanes(
        f"{sample.split}/{sample.id}: slots and heard speech",
        (("slots", bars), ("heard", speech)),
        marks,
        span,
    )


REPORT = ReportSpec(
    sections=(
        ScoreSection(
            key="ia_qtf1",
            means=_MEANS,
            title="IA-QTF1 by scenario",
            overall="All Global",
            groups="by_scenario",
        ),
        ScoreSection(
            key="subsets", means=_MEANS, title="IA-QTF1 by subset", overall="All Global", groups="by_subset"
        ),
    ),
    mean_labels={"ia_qtf1": ("IA-QTF1", 3), "tp": ("ΣTP", 2), "fp": ("ΣFP", 0), "fn": ("ΣFN", 0)},
    score_names={"all_global/tp": "TP", "all_global/fp": "FP", "all_global/fn": "FN"},
    group_label="scenario",
    only_named_scores=True,
    sample_figure=slot_figure,
)
