"""OmniInteract's report section: IA-QTF1 by scenario (with 1Q1A Global) and by subset, All Global overall."""

from __future__ import annotations

from duplexkit.bench.report.data import ReportSpec, ScoreSection

_MEANS = ("ia_qtf1", "tp", "fp", "fn")

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
)
