"""FDB-v3's report section: per-domain tool selection, argument accuracy, Pass@1, turn taking, latency and
interruptions; the published rows beside ours; under each example's timeline, its API calls on the input
timeline (start to return) with the user's speech end marked.
"""

from __future__ import annotations

import json
from typing import Any

from duplexkit.bench.fdb3.metrics import user_speech_end
from duplexkit.bench.fdb3.references import METRICS, PUBLISHED
from duplexkit.bench.fdb3.scoring import MEANS, SCORES_FILE, headline
from duplexkit.bench.report.data import ReportData, ReportSpec, SampleReport, ScoreSection
from duplexkit.bench.report.fmt import esc, number
from duplexkit.bench.report.svg import Interval, lanes


def _extra(data: ReportData) -> str:
    """The published table with this run's row on top."""
    try:
        scores = json.loads((data.run_dir / SCORES_FILE).read_text(encoding="utf-8"))
        ours = headline(scores)
    except (OSError, ValueError, KeyError, TypeError):
        return '<p class="muted">No fdb3_scores.json: run <code>duplexkit score --benchmark fdb3</code>.</p>'
    keys = list(METRICS)
    head = "".join(f'<th class="num">{esc(METRICS[k][0])} {METRICS[k][1]}</th>' for k in keys)
    rows = [
        "<tr><td><b>this run</b></td>"
        + "".join(f'<td class="num">{number(ours[k], 3)}</td>' for k in keys)
        + f"<td>{esc(str(scores.get('judge', {}).get('model')))}</td></tr>"
    ]
    for row in PUBLISHED:
        rows.append(
            f"<tr><td>{esc(row.system)}</td>"
            + "".join(f'<td class="num">{number(getattr(row, k), 3)}</td>' for k in keys)
            + f"<td>{esc(row.source)}</td></tr>"
        )
    note = (
        '<div class="note">This run used synthetic data (the built-in set): its numbers show the harness '
        "works and are not comparable with the published ones.</div>"
        if scores.get("synthetic")
        else "<div class=\"note\">Published numbers come from the systems' own runs through FDB-v3's "
        "LiveKit runner and gpt-4o judge; docs/fdb3.md lists where duplexkit measures differently.</div>"
    )
    return (
        "<h3>Full-Duplex-Bench v3: published numbers beside this run</h3>"
        + note
        + f"<table><tr><th>system</th>{head}<th>source</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def calls_figure(sample: SampleReport, span: float) -> str:
    """The example's API calls (start to return) on the input timeline, the user's speech end marked."""
    timeline = sample.meta.get("timeline")
    raw = timeline.get("tool_calls") if isinstance(timeline, dict) else None
    if not isinstance(raw, list) or not raw:
        return ""
    bars = []
    for row, call in enumerate(c for c in raw if isinstance(c, dict)):
        start, end = _num(call.get("t")), _num(call.get("end"))
        if start is None:
            continue
        bars.append(
            Interval(start, end if end is not None else start, "phase-core", str(call.get("name")), row)
        )
    end = user_speech_end([list(pair) for pair in sample.input_speech])
    marks = [(end, "user speech ends")] if end else []
    return lanes("API calls on the input timeline", [("API calls", bars)], marks, span)


REPORT = ReportSpec(
    sections=(ScoreSection(key="fdb3", means=MEANS, title="FDB-v3: per domain", overall="all examples"),),
    mean_labels={
        "tool_selection": ("tool selection F1", 3),
        "argument": ("argument accuracy", 3),
        "pass_at_1": ("Pass@1", 3),
        "turn_take": ("turn-take rate", 3),
        "latency_s": ("latency s", 3),
        "interruption": ("interruption rate", 3),
    },
    score_names={
        "tool_selection": "tool sel",
        "argument": "args",
        "pass_at_1": "pass",
        "latency_s": "latency s",
    },
    group_label="domain",
    extra=_extra,
    sample_figure=calls_figure,
)
