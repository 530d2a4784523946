"""FDB's report section: per-task TOR and latency (and each task's extras), and a labelled table of the
numbers published systems reached beside ours.

The score table reads `scores/summary.json`, which `scoring.score_dir` writes into a run folder in the
shared report's shape (one section, one group per task folder). The reference table reads the run's
`fdb_scores.json`. The per-sample timelines are the shared ones: the user's speech (energy segments of
`input.wav`), where the model's audio played, and the reply's words grouped into sentences on the playback
timeline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from duplexkit.bench.fdb.references import REFERENCES, direction
from duplexkit.bench.report.data import ReportData, ReportSpec, ScoreSection
from duplexkit.bench.report.fmt import esc, number

MEANS = ("tor", "latency_s", "frequency", "jsd", "relevance", "stop_latency_s", "response_latency_s")


def _extra(data: ReportData) -> str:
    """The reference table: for each published number, ours on the same task and metric beside it."""
    try:
        scores = json.loads((data.run_dir / "fdb_scores.json").read_text(encoding="utf-8"))
        tasks: Mapping[str, Any] = scores["tasks"]
    except (OSError, ValueError, KeyError, TypeError):
        return '<p class="muted">No fdb_scores.json: run <code>duplexkit score --benchmark fdb</code>.</p>'
    ours: dict[tuple[str, str], list[float]] = {}
    for entry in tasks.values():
        for metric in ("tor", "latency_s"):
            if isinstance(entry, dict) and isinstance(entry.get(metric), int | float):
                ours.setdefault((str(entry.get("task")), metric), []).append(float(entry[metric]))
    rows = []
    for ref in REFERENCES:
        mine = ours.get((ref.task, ref.metric))
        mean = sum(mine) / len(mine) if mine else None
        rows.append(
            f"<tr><td>{esc(ref.task)}</td><td>{esc(_METRIC[ref.metric])} "
            f"{direction(ref.task, ref.metric)}</td><td>{esc(ref.system)}</td>"
            f'<td class="num">{number(ref.value, 3)}</td><td class="num">{number(mean, 3)}</td>'
            f"<td>{esc(ref.source)}</td></tr>"
        )
    synthetic = scores.get("synthetic") is True
    note = (
        '<div class="note">This run used synthetic data (the built-in dataset): its numbers show the harness '
        "works and are not comparable with the published ones.</div>"
        if synthetic
        else "<div class=\"note\">Published numbers come from the systems' own runs on FDB's data; ours are "
        "comparable only on the same data, word-timing source and scorer rules (docs/fdb.md).</div>"
    )
    return (
        "<h3>Full-Duplex-Bench: published reference numbers beside this run</h3>"
        + note
        + "<table><tr><th>task</th><th>metric</th><th>published system</th>"
        '<th class="num">published</th><th class="num">this run</th><th>source</th></tr>'
        + "".join(rows)
        + "</table>"
    )


_METRIC = {"tor": "TOR (take-over rate)", "latency_s": "latency (s)"}

REPORT = ReportSpec(
    sections=(
        ScoreSection(key="fdb", means=MEANS, title="Full-Duplex-Bench: per task", overall="all samples"),
    ),
    mean_labels={
        "tor": ("TOR", 3),
        "latency_s": ("latency s", 3),
        "frequency": ("backchannels / s", 3),
        "jsd": ("JSD", 3),
        "relevance": ("relevance 0-5", 2),
        "stop_latency_s": ("v1.5 stop s", 3),
        "response_latency_s": ("v1.5 response s", 3),
    },
    score_names={"tor": "TOR", "latency_s": "latency s", "relevance": "relevance"},
    extra=_extra,
)
