"""FDB v2's report section: per split turn taking, instruction following and task score; the published rows
beside this run; under each task's timeline, both speakers' turns on the one timeline (the combined
recording, examiner left and examinee right, plays against it)."""

from __future__ import annotations

import json
from typing import Any

from duplexkit.bench.fdb2.references import PUBLISHED
from duplexkit.bench.fdb2.scoring import MEANS, SCORES_FILE
from duplexkit.bench.report.data import ReportData, ReportSpec, SampleReport, ScoreSection
from duplexkit.bench.report.fmt import esc, number
from duplexkit.bench.report.svg import Interval, lanes

SPLITS = ("Daily", "Correction", "EntityTracking", "Safety")


def _extra(data: ReportData) -> str:
    try:
        scores = json.loads((data.run_dir / SCORES_FILE).read_text(encoding="utf-8"))
        ours = scores["by_split"]
    except (OSError, ValueError, KeyError, TypeError):
        return '<p class="muted">No fdb2_scores.json: run <code>duplexkit score --benchmark fdb2</code>.</p>'
    head = "".join(f'<th class="num">{esc(s)} TT/IF</th>' for s in SPLITS)

    def cells(get: Any) -> str:
        out = []
        for split in SPLITS:
            pair = get(split)
            out.append(
                '<td class="num">—</td>'
                if pair is None
                else f'<td class="num">{number(pair[0], 2)}/{number(pair[1], 2)}</td>'
            )
        return "".join(out)

    rows = [
        "<tr><td><b>this run</b> (per-split mean of score.py rows)</td>"
        + cells(lambda s: (ours[s]["turn_taking"], ours[s]["instruction_following"]) if s in ours else None)
        + "<td>duplexkit</td></tr>"
    ]
    for p in PUBLISHED:
        rows.append(
            f"<tr><td>{esc(p.system)} ({esc(p.pacing)}, 0-75 s)</td>"
            + cells(lambda s, p=p: p.scores.get(s))
            + f"<td>{esc(p.source)}</td></tr>"
        )
    note = (
        '<div class="note">Not comparable with the published numbers: '
        + esc(
            "synthetic built-in tasks"
            if scores.get("synthetic")
            else f"judge rubrics from {scores['judge']['prompt_source']}, judge {scores['judge']['kind']}"
        )
        + ".</div>"
        if not scores.get("comparable")
        else '<div class="note">Published rows are 0-75 s per-split means, which no FDB v2 script computes; '
        "docs/fdb2.md lists every difference from FDB v2's runner.</div>"
    )
    return (
        "<h3>Full-Duplex-Bench v2: published numbers beside this run</h3>"
        + note
        + f"<table><tr><th>system</th>{head}<th>source</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def turns_figure(sample: SampleReport, span: float) -> str:
    """Both speakers' turns on the conversation's timeline (where each played to the other side)."""
    timeline = sample.meta.get("timeline")
    if not isinstance(timeline, dict):
        return ""
    rows = []
    for speaker, css in (("examiner", "phase-early"), ("examinee", "phase-core")):
        bars = []
        for row, turn in enumerate(t for t in timeline.get(speaker) or [] if isinstance(t, dict)):
            start, end = turn.get("start_s"), turn.get("end_s")
            if isinstance(start, int | float) and isinstance(end, int | float):
                bars.append(Interval(float(start), float(end), css, str(turn.get("text") or ""), row % 2))
        rows.append((f"{'A' if speaker == 'examiner' else 'B'}: {speaker}", bars))
    return lanes("Both speakers on one timeline", rows, [], span)


REPORT = ReportSpec(
    sections=(ScoreSection(key="fdb2", means=MEANS, title="FDB v2: per split", overall="all tasks"),),
    mean_labels={
        "turn_taking": ("turn taking (1-5)", 2),
        "instruction_following": ("instruction following (1-5)", 2),
        "task_specific": ("task score", 2),
    },
    score_names={"turn_taking": "TT", "instruction_following": "IF", "task_specific": "task"},
    group_label="split",
    extra=_extra,
    sample_figure=turns_figure,
    audio_file="combined.wav",
)
