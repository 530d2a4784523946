"""Run-level aggregates (`metrics.json`) over published samples, kept apart by measurement source."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

RESPONSE_METRICS = ("ttft_ms", "ttfp_ms", "tpot_ms", "rtf")
SESSION_METRICS = ("stream_ttft_ms", "stream_ttfp_ms")


def summarize(values: list[float]) -> dict[str, float | int | None]:
    """count, mean, p50, p99 (nearest rank); `None` statistics for no values."""
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p99": None}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {
        "count": len(ordered),
        "mean": round(sum(ordered) / len(ordered), 3),
        "p50": round(rank(0.50), 3),
        "p99": round(rank(0.99), 3),
    }


def run_metrics(metas: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """`{metric: {source: {count, mean, p50, p99}}}` over published samples; sources are never pooled."""
    collected: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for meta in metas:
        if meta.get("status") != "published":
            continue
        for response in meta.get("responses", []):
            for name in RESPONSE_METRICS:
                if response.get(name) is not None:
                    collected[name][str(response.get("source"))].append(float(response[name]))
        session = meta.get("session") or {}
        for name in SESSION_METRICS:
            if session.get(name) is not None:
                collected[name][str(session.get("source"))].append(float(session[name]))
    return {
        name: {source: summarize(values) for source, values in sorted(collected[name].items())}
        for name in (*RESPONSE_METRICS, *SESSION_METRICS)
    }


def run_counts(metas: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """attempted / published / failed / retried over every sample the run folder holds."""
    counts = {"attempted": 0, "published": 0, "failed": 0, "retried": 0}
    for meta in metas:
        counts["attempted"] += 1
        counts["published" if meta.get("status") == "published" else "failed"] += 1
        counts["retried"] += int(bool(meta.get("retry_count")))
    return counts


def run_eligibility(metas: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Whether the run is eligible for official scoring, from the published samples' `eligibility` records
    (a benchmark that keeps none: `None`); the cases that are not, and why."""
    recorded = [m for m in metas if m.get("status") == "published" and isinstance(m.get("eligibility"), dict)]
    if not recorded:
        return None
    ineligible = [
        {"case": f"{m.get('split')}/{m.get('id')}", "reasons": m["eligibility"].get("reasons")}
        for m in recorded
        if m["eligibility"].get("eligible") is False
    ]
    return {"eligible": not ineligible, "ineligible_cases": ineligible}
