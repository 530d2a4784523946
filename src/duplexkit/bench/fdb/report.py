"""FDB's report section (filled in below)."""

from __future__ import annotations

from duplexkit.bench.report.data import ReportSpec

REPORT = ReportSpec(sections=(), mean_labels={}, score_names={})
