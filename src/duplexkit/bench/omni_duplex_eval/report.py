"""Omni-DuplexEval's report section: the RTD and PR score tables, by task, and how its scores are named."""

from __future__ import annotations

from duplexkit.bench.report.data import ReportSpec, ScoreSection

REPORT = ReportSpec(
    sections=(
        ScoreSection(
            key="rtd",
            means=("mean_content_score", "mean_avg_temporal_score"),
            title="RTD: real-time description",
            overall="RTD (all)",
        ),
        ScoreSection(
            key="pr", means=("mean_all_success",), title="PR: proactive reminder", overall="PR (all)"
        ),
    ),
    mean_labels={
        "mean_content_score": ("content (0-3)", 2),
        "mean_avg_temporal_score": ("temporal (0-3)", 2),
        "mean_all_success": ("all-success (0-1)", 3),
    },
    score_names={"content_score": "content", "avg_temporal_score": "temporal", "all_success": "success"},
)
