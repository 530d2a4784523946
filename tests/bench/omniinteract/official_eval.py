"""A stand-in for OmniInteract's official scorer (`eval/run_eval.py --manifest`, Lucky-Lance/OmniInteract at
de304cef), written from its code (`build_slots.py`, `match_slots.py`, `compute_unified_eval.py`,
`summarize_unified_eval.py`, read with fetch), not from duplexkit's scorer.

It reads what the official one reads: manifest rows `{sample_id, gt_json, model_json, scene_type}`; each
case's annotation (`gt_json`) and model output (`model_json`, an object `{"chunks": [{"text", "timestamp",
"aligned_words": [{"text", "start", "end"}]}]}`; anything else is no output). It builds the slots, matches
chunks, splits early / core at t_a, applies the timeliness decay and the TP / FP / FN rules, and sums
IA-QTF1 (All Global, 1Q1A Global) and NCCS (each slot's stored core score, TP_core), with upstream's weights
(0.2 / 0.8; 0 / 1.0 on a 1QnA step after the first), its nested walk and its core start for a chunk split at
t_a (t_a). The judge is passed in (`Judge`): the same verdicts for the same phase, as a deterministic LLM
gives, with no trigger phrase (so the core starts at its first chunk).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TAIL_S = 60.0


@dataclass(frozen=True)
class Verdicts:
    """What the judge says for every request: early label / ack score, core score, partial quality."""

    hallucination: bool
    ack: float
    core: float
    quality: float


Judge = Callable[[], Verdicts]


@dataclass
class _Slot:
    start: float
    t_a: float
    end: float
    hard: bool
    scenario: str
    interrupted: bool
    step: int = 1
    pair: int | None = None
    role: str | None = None
    chunks: list[dict[str, Any]] = field(default_factory=list)


def _seconds(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    total = 0.0
    for part in str(value).split(":"):
        total = total * 60 + float(part)
    return total


def _slots(gt: Any, scene_type: str) -> list[_Slot]:
    if scene_type == "1QnA":
        if "conversations" in gt:
            steps = [
                (_seconds(t["timestamp"]), bool(t.get("interrupted") or t.get("is_interrupted")))
                for t in gt["conversations"]
                if t.get("from") == "assistant"
            ]
        else:
            steps = [
                (_seconds(a["answer_time"]), bool(a.get("interrupted") or a.get("is_interrupted")))
                for a in gt["answers"]
            ]
        steps.sort()
        q = _seconds(gt["question_time"])
        out = []
        for k, (t_a, interrupted) in enumerate(steps):
            start = q if k == 0 else t_a
            end = steps[k + 1][0] if k + 1 < len(steps) else t_a + TAIL_S
            out.append(_Slot(start, t_a, end, interrupted, "1qna", interrupted, k + 1))
        return out
    qs = sorted(
        (
            _seconds(e["question_time"]),
            _seconds(e["answer_time"]),
            e["question_type"],
            bool(e["is_interrupted"]),
        )
        for e in gt
    )
    if scene_type != "nested":
        return [
            _Slot(q, a, max(qs[i + 1][0] if i + 1 < len(qs) else a + TAIL_S, q), True, kind, interrupted)
            for i, (q, a, kind, interrupted) in enumerate(qs)
        ]
    groups = []
    i = 0
    while i < len(qs):
        q, a = qs[i][0], qs[i][1]
        j = next(j for j in range(i + 1, len(qs)) if q < qs[j][0] < a and qs[j][1] <= a)
        groups.append((i, j))
        i = j + 1
    out = []
    for g, (i, j) in enumerate(groups):
        (q, a, _, interrupted), (q2, a2, _, interrupted2) = qs[i], qs[j]
        end = max(qs[groups[g + 1][0]][0] if g + 1 < len(groups) else a + TAIL_S, a)
        out.append(_Slot(q, a, end, True, "nested", interrupted, 1, g, "outer"))
        out.append(_Slot(q2, a2, a, True, "nested", interrupted2, 1, g, "inner"))
    return out


def _chunks(model: Any) -> list[dict[str, Any]]:
    if not isinstance(model, dict) or not isinstance(model.get("chunks"), list):
        return []
    out = []
    for c in model["chunks"]:
        start, end = (float(t) for t in c["timestamp"])
        words = [
            (str(w.get("text", "")), float(w["start"]), float(w["end"])) for w in c.get("aligned_words") or []
        ]
        out.append(
            {
                "text": str(c.get("text", "")),
                "start": start,
                "end": end,
                "words": sorted(words, key=lambda w: w[1]),
            }
        )
    return sorted(out, key=lambda c: (c["start"], c["end"]))


def _decay(t: float, peak: float, end: float) -> float:
    if end <= peak:
        return 1.0 if t <= peak else 0.0
    return min(1.0, max(0.0, 1.0 - max(0.0, t - peak) / (end - peak)))


def _phases(slot: _Slot) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(early, core) spans of the slot's chunks; a core part split off at t_a starts at t_a."""
    early, core = [], []
    for c in slot.chunks:
        if c["words"] and c["start"] < slot.t_a < c["end"]:
            before = [w for w in c["words"] if w[1] < slot.t_a]
            after = [w for w in c["words"] if w[1] >= slot.t_a]
            if before:
                early.append((before[0][1], before[-1][2]))
            if after:
                core.append((min(after[0][1], slot.t_a), after[-1][2]))
        elif c["start"] < slot.t_a:
            early.append((c["start"], c["end"]))
        else:
            core.append((c["start"], c["end"]))
    return early, core


def evaluate(manifest_path: str, judge: Judge) -> dict[str, float | None]:
    """All Global and 1Q1A Global IA-QTF1 and NCCS over the manifest's cases."""
    sums = {"all": [0.0, 0.0, 0.0], "1q1a": [0.0, 0.0, 0.0]}
    pairs: list[float] = []
    with open(manifest_path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for row in rows:
        with open(row["gt_json"], encoding="utf-8") as f:
            slots = _slots(json.load(f), row["scene_type"])
        with open(row["model_json"], encoding="utf-8") as f:
            chunks = _chunks(json.load(f))
        unmatched = 0
        for c in chunks:
            holders = [s for s in slots if s.start <= c["start"] < s.end]
            if holders:
                max(holders, key=lambda s: s.start).chunks.append(c)
            else:
                unmatched += 1
        sums["all"][1] += unmatched
        cores: dict[int, dict[str, tuple[float, float]]] = {}
        for slot in slots:
            v = judge()
            early, core = _phases(slot)
            w_ack = 0.0 if slot.scenario == "1qna" and slot.step > 1 else 0.2
            tp_ack = tp_core = 0.0
            fp = 0
            if early:
                if v.hallucination:
                    fp += 1
                else:
                    tp_ack = _decay(early[0][0], slot.start, slot.t_a) * v.ack * w_ack
            core_start = None
            if not slot.interrupted and core:
                core_start = max(core[0][0], slot.t_a)
                if v.core < 0.5:
                    fp += 1
                else:
                    tp_core = _decay(core_start, slot.t_a, slot.end) * v.core * (1.0 - w_ack)
            if slot.hard and slot.chunks and max(c["end"] for c in slot.chunks) > slot.end:
                fp += 1
            tp = min(1.0, max(0.0, tp_ack + tp_core))
            fn = int(not slot.interrupted and tp_core <= 0)
            groups = ["all", "1q1a"] if slot.scenario in ("realtime", "proactive", "nested") else ["all"]
            for g in groups:
                sums[g][0] += tp
                sums[g][1] += fp
                sums[g][2] += fn
            if slot.pair is not None and slot.role is not None:
                cores.setdefault(slot.pair, {})[slot.role] = (
                    tp_core,
                    core_start if core_start is not None else math.inf,
                )
        for pair in cores.values():
            (so, to), (si, ti) = pair["outer"], pair["inner"]
            pairs.append(math.sqrt(so * si) if so > 0 and si > 0 and ti <= to else 0.0)

    def f1(tp: float, fp: float, fn: float) -> float | None:
        return None if 2 * tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)

    return {
        "all_global": f1(*sums["all"]),
        "1q1a_global": f1(*sums["1q1a"]),
        "nccs": sum(pairs) / len(pairs) if pairs else None,
    }
