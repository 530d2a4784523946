"""The report page: `render_report` turns one run (and any runs to compare with it) into one HTML document.

The document is self-contained: stylesheet, script and figures are inline, and a content security policy
allows only those (by hash) plus local audio, so the page makes no network request. Every text from a run
file is escaped. Audio players reference `<split>/<id>/output.wav` by a relative path, not a data: URI:
reply audio is about 2.9 MB per minute (24 kHz, 16-bit), so embedding it would make a full run's report
gigabytes; the players load nothing until played (`preload="none"`). The page is complete without the
audio, so the report file alone can be shared; the players work where it sits in its run folder, and the
page says so, with each clip's duration (from its WAV header), before anything is played.

With runs to compare, run A is the base: every table shows each run side by side and B, C, … with their
difference to A, coloured by whether it is better (green) or worse (red).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import shlex
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from duplexkit import __version__
from duplexkit.bench.report.assets import CSS, JS, SERIES_COLOURS
from duplexkit.bench.report.data import (
    JudgeInfo,
    ReportData,
    ReportSpec,
    ResponseLatency,
    SampleReport,
    SampleScore,
    ScoreGroup,
    ScoreSection,
)
from duplexkit.bench.report.fmt import MISSING, Better, delta, esc, number, seconds
from duplexkit.bench.report.svg import Series, cdf, timeline, timeline_span
from duplexkit.client.collector import (
    COMMIT_SOURCE,
    CREATED_SOURCE,
    SERVER_SOURCE,
    STREAM_SOURCE,
    UNANCHORED_SOURCE,
)

LEGACY_CLIENT_SOURCE = "client_monotonic_receive"
"""What runs written before the client anchors got labels of their own called both of them."""

SOURCE_LABELS = {
    SERVER_SOURCE: "server-anchored",
    COMMIT_SOURCE: "client, from commit send",
    CREATED_SOURCE: "client, from response.created",
    STREAM_SOURCE: "client, from stream start",
    UNANCHORED_SOURCE: "client, unanchored (no request or commit to time from)",
    LEGACY_CLIENT_SOURCE: "client receive (anchors pooled: older run)",
}


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    meaning: str
    unit: str


METRICS = (
    Metric("ttft_ms", "TTFT", "time to first text, per response", "ms"),
    Metric("ttfp_ms", "TTFP", "time to first audio, per response", "ms"),
    Metric("tpot_ms", "TPOT", "time per output token, per response (server-reported only)", "ms"),
    Metric("rtf", "RTF", "audio generation time / audio duration, per response (below 1 keeps up)", "ratio"),
    Metric("stream_ttft_ms", "stream TTFT", "from the stream's start to the first text, per sample", "ms"),
    Metric("stream_ttfp_ms", "stream TTFP", "from the stream's start to the first audio, per sample", "ms"),
)
_Row = tuple[str, Better | None, Callable[[ReportData], float | None], int | None]
"""A comparison-table row: label, which direction is better (None: neither), the value of a run, decimals."""
OPEN_SAMPLES_UP_TO = 12
"""Sample sections start expanded when a run has at most this many samples (failed ones always do)."""


@dataclass(frozen=True)
class _Run:
    """A run on the page: its letter (A is the base), its colour slot and its data."""

    letter: str
    index: int
    data: ReportData
    folder: str
    """The run's folder relative to run A's (POSIX; `.` for A)."""

    @property
    def name(self) -> str:
        return f"{self.letter}: {self.folder_name}"

    @property
    def folder_name(self) -> str:
        """The run folder's own name, also for a relative path such as `.`."""
        return self.data.run_dir.resolve().name


def render_report(
    primary: ReportData, others: Sequence[ReportData] = (), *, generated_at: dt.datetime
) -> str:
    """The whole HTML document for `primary`, compared with `others` when given; `generated_at` is shown in
    the footer. Audio paths are relative to `primary.run_dir`, where the report is meant to be written."""
    base = primary.run_dir.resolve()
    runs = [
        _Run(
            letter=chr(ord("A") + i) if i < 26 else f"R{i + 1}",
            index=i,
            data=d,
            folder=Path(os.path.relpath(d.run_dir.resolve(), base)).as_posix(),
        )
        for i, d in enumerate((primary, *others))
    ]
    keys = _sample_keys(runs)
    body = "".join(
        (
            _header(runs),
            "<main>",
            _run_section(runs),
            _coverage_section(runs, keys),
            _scores_section(runs),
            _latency_section(runs),
            _samples_section(runs, keys),
            f"<footer>written by duplexkit {esc(__version__)} on "
            f"{esc(generated_at.isoformat(timespec='seconds'))}</footer>",
            "</main>",
        )
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(_policy())}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>duplexkit report: {esc(runs[0].folder_name)}</title>"
        f"<style>{CSS}</style></head><body>{body}<script>{JS}</script></body></html>\n"
    )


def _policy() -> str:
    """Only the page's own stylesheet and script (by hash) and local audio; no fetch, no frame, no form."""

    def digest(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    return (
        f"default-src 'none'; style-src {digest(CSS)}; script-src {digest(JS)}; media-src file:; "
        "base-uri 'none'; form-action 'none'"
    )


def _sample_keys(runs: Sequence[_Run]) -> dict[tuple[str, str], int]:
    """Every sample of any run, numbered: run A's in order, then those only other runs have."""
    keys: dict[tuple[str, str], int] = {}
    for run in runs:
        for sample in run.data.samples:
            keys.setdefault(sample.key, len(keys) + 1)
    return keys


# --- header and run -----------------------------------------------------------------------------------------


def _header(runs: Sequence[_Run]) -> str:
    base = runs[0].data.run
    what = f"{base.model or 'unknown model'} · {base.dataset_source or 'unknown dataset'}"
    if len(runs) > 1:
        what = "comparing " + ", ".join(run.name for run in runs) + " (differences are against A)"
    nav = "".join(
        f'<a href="#{anchor}">{label}</a>'
        for anchor, label in (
            ("run", "Run"),
            ("coverage", "Coverage"),
            ("scores", "Scores"),
            ("latency", "Latency"),
            ("samples", "Samples"),
        )
    )
    return (
        f'<header class="top"><div class="inner"><h1>duplexkit run report · {esc(runs[0].folder_name)}'
        f"</h1><p>{esc(what)}</p><nav>{nav}</nav></div></header>"
    )


def _model(data: ReportData) -> str:
    """The model the run was told, and what exactly its servers said they served."""
    text = esc(data.run.model or MISSING)
    if data.run.model_identities:
        text += f" <small>({esc(', '.join(data.run.model_identities))})</small>"
    return text


def _run_section(runs: Sequence[_Run]) -> str:
    rows: list[tuple[str, bool, Callable[[ReportData], str]]] = [
        ("model", True, _model),
        ("server", True, _server),
        ("dataset", True, _dataset),
        ("selection", True, lambda d: esc(d.run.selection or MISSING)),
        ("pace / clock", True, _pace),
        ("streaming", True, _streaming),
        ("judge", True, lambda d: _judge_text(d.scores.judge) if d.scores else "not scored"),
        ("versions", True, _versions),
        ("date", False, _date),
        (
            "command",
            False,
            lambda d: f'<span class="mono">{esc(shlex.join(d.run.command) or MISSING)}</span>',
        ),
    ]
    head = (
        "<tr><th></th>" + "".join(f"<th>{esc(run.name)}</th>" for run in runs) + "</tr>"
        if len(runs) > 1
        else ""
    )
    body = []
    for label, compared, cell in rows:
        cells = [cell(run.data) for run in runs]
        differs = compared and len(runs) > 1 and len(set(cells)) > 1
        body.append(
            f"<tr{' class=differs' if differs else ''}><th>{label}</th>"
            + "".join(f"<td>{c}</td>" for c in cells)
            + "</tr>"
        )
    notes = "".join(_run_notes(run, len(runs) > 1) for run in runs)
    legend = '<p class="small muted">Highlighted rows differ between the runs.</p>' if len(runs) > 1 else ""
    table = f'<table class="kv">{head}{"".join(body)}</table>'
    return f'<section id="run"><h2>Run</h2>{notes}{table}{legend}</section>'


def _run_notes(run: _Run, named: bool) -> str:
    prefix = f"{esc(run.name)}: " if named else ""
    notes = []
    if "invalid" in run.data.run.clocks:
        notes.append(
            f'<div class="note">{prefix}ran at <b>as-fast-as-possible</b> pace (clock=invalid): sentence and '
            "decision times are positions in the input stream, not real-time media times, and the judge "
            "refuses these samples unless told otherwise.</div>"
        )
    if run.data.problems:
        items = "".join(f"<li>{esc(p)}</li>" for p in run.data.problems)
        notes.append(
            f'<div class="note error">{prefix}some run files could not be read:<ul>{items}</ul></div>'
        )
    return "".join(notes)


def _server(data: ReportData) -> str:
    embedded = {True: " (embedded)", False: "", None: ""}[data.run.embedded_server]
    return f'<span class="mono">{esc(data.run.server_url or MISSING)}</span>{embedded}'


def _dataset(data: ReportData) -> str:
    run = data.run
    size = "" if run.dataset_samples is None else f" · {run.dataset_samples} selected"
    fingerprint = ""
    if run.dataset_fingerprint:
        full, short = esc(run.dataset_fingerprint), esc(run.dataset_fingerprint[:12])
        fingerprint = f' · <span class="mono" title="{full}">{short}</span>'
    return f"{esc(run.dataset_source or MISSING)}{esc(size)}{fingerprint}"


def _pace(data: ReportData) -> str:
    clocks = ", ".join(data.run.clocks) or MISSING
    warn = ' <span class="badge failed">clock invalid</span>' if "invalid" in data.run.clocks else ""
    placed = ", ".join(data.run.placements) or MISSING
    return f"{esc(data.run.pace or MISSING)} · clock {esc(clocks)}{warn} · output placed by {esc(placed)}"


def _streaming(data: ReportData) -> str:
    run = data.run
    audio = {True: "reply audio kept", False: "reply audio not kept", None: ""}[run.keep_audio]
    parts = [
        f"{MISSING if run.fps is None else format(run.fps, 'g')} fps video",
        f"{number(run.chunk_ms, 0)} ms appends",
        f"concurrency {run.concurrency if run.concurrency is not None else MISSING}",
    ]
    return esc(" · ".join([*parts, audio] if audio else parts))


def _versions(data: ReportData) -> str:
    return esc(f"duplexkit {data.run.duplexkit_version or MISSING} (report: duplexkit {__version__})")


def _date(data: ReportData) -> str:
    run = data.run
    text = f"{run.started_at or MISSING} → {run.finished_at or 'unfinished'}"
    try:
        if run.started_at and run.finished_at:
            took = dt.datetime.fromisoformat(run.finished_at) - dt.datetime.fromisoformat(run.started_at)
            text += f" ({_duration(took.total_seconds())})"
    except (TypeError, ValueError):  # not ISO-8601, or naive against aware
        pass
    return esc(text)


def _duration(total_s: float) -> str:
    """`42 s`, `12 min 5 s` or `3 h 4 min`."""
    minutes, secs = divmod(round(total_s), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def _judge_text(judge: JudgeInfo) -> str:
    """`LLM judge MODEL at URL · prompts VERSION (SOURCE)`, or the built-in judge's name."""
    if judge.kind == "builtin":
        who = "built-in ground-truth judge"
    else:
        who = f"{'LLM judge ' if judge.kind == 'llm' else ''}{judge.model or MISSING}"
        who += f" at {judge.url}" if judge.url else ""
    source = f" ({judge.prompt_source})" if judge.prompt_source else ""
    return esc(f"{who} · prompts {judge.prompt_version or MISSING}{source}")


# --- coverage -----------------------------------------------------------------------------------------------


def _coverage_section(runs: Sequence[_Run], keys: dict[tuple[str, str], int]) -> str:
    rows: list[_Row] = [
        ("attempted", None, lambda d: d.coverage.attempted, 0),
        ("published", "higher", lambda d: d.coverage.published, 0),
        ("failed", "lower", lambda d: d.coverage.failed, 0),
        ("retried", "lower", lambda d: d.coverage.retried, 0),
    ]
    if any(run.data.scores for run in runs):
        rows += [
            ("scored", "higher", lambda d: d.scores.coverage.get("scored") if d.scores else None, 0),
            ("judge errors", "lower", lambda d: d.scores.coverage.get("errors") if d.scores else None, 0),
        ]
    reasons = sorted({r for run in runs for r in run.data.coverage.failure_reasons})
    by_reason = (
        _compare_table("reason", runs, [(r, "lower", _reason_count(r), 0) for r in reasons])
        if reasons
        else '<p class="muted">No sample failed.</p>'
    )
    parts = [
        f'<section id="coverage"><h2>Coverage</h2>{_recorded_notes(runs)}<div class="row">'
        f"<div>{_compare_table('samples', runs, rows)}</div>"
        f"<div><h3>Failures by reason</h3>{by_reason}</div></div>"
    ]
    for run in runs:
        failed = [s for s in run.data.samples if not s.published]
        if failed:
            items = "".join(
                f'<tr><td><a href="#sample-{keys[s.key]}">{esc(s.split)}/{esc(s.id)}</a></td>'
                f'<td class="error-line">{esc(s.error or "no error recorded")}</td></tr>'
                for s in failed
            )
            title = f"Failed samples of {esc(run.name)}" if len(runs) > 1 else "Failed samples"
            opened = " open" if len(failed) <= 20 else ""
            summary = f"<summary><b>{title} ({len(failed)})</b></summary>"
            parts.append(f'<details{opened}>{summary}<table class="compare">{items}</table></details>')
    parts.append("</section>")
    return "".join(parts)


def _reason_count(reason: str) -> Callable[[ReportData], float | None]:
    return lambda data: data.coverage.failure_reasons.get(reason, 0)


def _recorded_notes(runs: Sequence[_Run]) -> str:
    """A note for each run whose `run.json` counts disagree with the sample files it holds."""
    notes = []
    for run in runs:
        c, recorded = run.data.coverage, run.data.coverage.recorded
        if recorded is None:
            continue
        counted = {
            "attempted": c.attempted,
            "published": c.published,
            "failed": c.failed,
            "retried": c.retried,
        }
        if any(recorded.get(k) not in (None, v) for k, v in counted.items()):
            said = ", ".join(f"{k} {v}" for k, v in recorded.items())
            notes.append(
                f'<div class="note">{esc(run.name)}: run.json counts ({esc(said)}) differ from the sample '
                "files in the folder, which this report counts (the folder holds samples of another "
                "selection, or the run did not finish).</div>"
            )
    return "".join(notes)


# --- scores -------------------------------------------------------------------------------------------------


def _scores_section(runs: Sequence[_Run]) -> str:
    scored = [run for run in runs if run.data.scores is not None]
    if not scored:
        return (
            '<section id="scores"><h2>Scores</h2><p class="muted">Not scored yet: run '
            "<code>duplexkit score RUN_DIR</code> and write the report again.</p></section>"
        )
    parts = ['<section id="scores"><h2>Scores</h2>']
    for run in runs:
        summary = run.data.scores
        prefix = f"{esc(run.name)}: " if len(runs) > 1 else ""
        if summary is None:
            parts.append(f'<p class="muted">{prefix}not scored.</p>')
            continue
        cov = summary.coverage
        counts = f"scored {cov.get('scored', MISSING)} of {cov.get('total', MISSING)} samples"
        counts += f"; {cov['skipped']} failed sample(s) count as 0" if cov.get("skipped") else ""
        counts += f"; {cov['errors']} judge error(s) left out of the means" if cov.get("errors") else ""
        parts.append(f'<p class="lead">{prefix}judged by <b>{_judge_text(summary.judge)}</b> · {counts}</p>')
        if summary.judge.note:
            parts.append(f'<div class="note">{prefix}{esc(summary.judge.note)}</div>')
        if summary.complete is False:
            parts.append(
                f'<div class="note error">{prefix}incomplete: {cov.get("errors", MISSING)} sample(s) could '
                "not be scored and are left out of the means; run <code>duplexkit score</code> again.</div>"
            )
    judges = {_judge_key(run.data.scores.judge) for run in scored if run.data.scores}
    if len(judges) > 1:
        parts.append(
            '<div class="note error">The runs were scored by different judges (model, URL or prompt '
            "version): their scores are not comparable.</div>"
        )
    for section in runs[0].data.spec.sections:
        table = _family_table(runs, section)
        if table:
            parts.append(table)
    extra = runs[0].data.spec.extra
    if extra is not None:
        parts.append(extra(runs[0].data))
    parts.append("</section>")
    return "".join(parts)


def _judge_key(judge: JudgeInfo) -> tuple[str | None, str | None, str | None]:
    return (judge.model, judge.url, judge.prompt_version)


def _family_table(runs: Sequence[_Run], section: ScoreSection) -> str:
    """The section's means overall, then per group: a column per mean and run (B, C, ... with their
    difference to A), and the samples each run's means cover. Empty when no run scored a sample of it."""
    family, spec = section.key, runs[0].data.spec
    found = [f for run in runs if run.data.scores for f in run.data.scores.families if f.family == family]
    if not any(f.overall.samples for f in found):
        return ""
    means = tuple(found[0].overall.means)
    compare = len(runs) > 1
    head = f"<tr><th>{esc(spec.group_label)}</th>"
    for mean in means:
        label = esc(spec.mean_labels.get(mean, (mean, 2))[0])
        span = f' colspan="{2 * len(runs) - 1}"' if compare else ""
        head += f'<th class="num group-head"{span}>{label}</th>'
    head += "".join(
        f'<th class="num">{f"n {esc(run.letter)}" if compare else "samples"}</th>' for run in runs
    )
    head += "</tr>"
    if compare:
        sub = "".join(
            f'<th class="num">{esc(run.letter)}</th>'
            + (f'<th class="num">Δ {esc(run.letter)}</th>' if run.index else "")
            for _ in means
            for run in runs
        )
        head += f"<tr><th></th>{sub}{'<th></th>' * len(runs)}</tr>"
    tasks = sorted({t.name for f in found for t in f.tasks})
    body = []
    for task in (None, *tasks):
        groups = [_group(run.data, family, task) for run in runs]
        cells = ""
        for mean in means:
            digits = spec.mean_labels.get(mean, (mean, 2))[1]
            values = [None if g is None else g.means.get(mean) for g in groups]
            for run, value in zip(runs, values, strict=True):
                cells += f'<td class="num">{number(value, digits)}</td>'
                if run.index:
                    text, cls = delta(values[0], value, "higher", digits)
                    cells += f'<td class="num"><span class="delta {cls}">{esc(text)}</span></td>'
        cells += "".join(f'<td class="num">{_group_count(g)}</td>' for g in groups)
        name = section.overall if task is None else task
        body.append(f"<tr{' class=family' if task is None else ''}><td>{esc(name)}</td>{cells}</tr>")
    return f'<h3>{esc(section.title)}</h3><table class="compare">{head}{"".join(body)}</table>'


def _group_count(group: ScoreGroup | None) -> str:
    """`samples` with, when not all of them were scored, how many failed or hit a judge error."""
    if group is None or group.samples is None:
        return MISSING
    missing = [f"{n} {what}" for n, what in ((group.skipped, "failed"), (group.errors, "judge errors")) if n]
    return f"{group.samples}" + (
        f' <span class="muted">({esc(", ".join(missing))})</span>' if missing else ""
    )


def _group(data: ReportData, family: str, task: str | None) -> ScoreGroup | None:
    scores = data.scores
    found = next((f for f in scores.families if f.family == family), None) if scores else None
    if found is None:
        return None
    return found.overall if task is None else next((t for t in found.tasks if t.name == task), None)


# --- comparison tables --------------------------------------------------------------------------------------


def _compare_table(
    first: str,
    runs: Sequence[_Run],
    rows: Iterable[_Row],
) -> str:
    """Rows of one value per run; with several runs, every run after A also gets its difference to A."""
    head = f"<th>{esc(first)}</th>"
    for run in runs:
        head += f'<th class="num">{esc(run.letter if len(runs) > 1 else "")}</th>'
        if run.index:
            head += f'<th class="num">Δ {esc(run.letter)} - A</th>'
    body = []
    for label, better, get, digits in rows:
        base = get(runs[0].data)
        cells = ""
        for run in runs:
            value = get(run.data)
            cells += f'<td class="num">{number(value, digits)}</td>'
            if run.index:
                text, cls = delta(base, value, better, digits)
                cells += f'<td class="num"><span class="delta {cls}">{esc(text)}</span></td>'
        body.append(f"<tr><td>{esc(label)}</td>{cells}</tr>")
    return f'<table class="compare"><tr>{head}</tr>{"".join(body)}</table>'


# --- latency ------------------------------------------------------------------------------------------------


def _latency_section(runs: Sequence[_Run]) -> str:
    cards = "".join(_metric_card(metric, runs) for metric in METRICS)
    return (
        '<section id="latency"><h2>Latency</h2><p class="lead">Over published samples, one line per run and '
        "measurement source (sources are never pooled). <b>server-anchored</b>: TTFT, TTFP and TPOT are the "
        "server's own, from its request start; RTF adds the client's receive span of the audio. <b>client "
        "receive</b>: measured on the client's monotonic clock from the commit or the response's creation "
        "(per response) or from the stream's start (stream TTFT/TTFP). Dots mark p50 and p99.</p>"
        f'<div class="cards">{cards}</div></section>'
    )


def _metric_card(metric: Metric, runs: Sequence[_Run]) -> str:
    """A CDF of the metric (a line per run and source) over a table of n, mean, p50, p99 and, for B, C, ...,
    the change of p50 and p99 against A's same source."""
    compare = len(runs) > 1
    bases = {d.source: d for d in runs[0].data.distribution(metric.key)}
    series, rows = [], []
    for run in runs:
        found = run.data.distribution(metric.key)
        if not found and compare:
            rows.append(f'<tr><td colspan="7" class="muted">{esc(run.letter)} · no values</td></tr>')
        for dist in found:
            source = SOURCE_LABELS.get(dist.source, dist.source)
            label = f"{run.letter} · {source}" if compare else source
            colour, dashed = run.index % len(SERIES_COLOURS), dist.source != SERVER_SOURCE
            series.append(Series(label, dist.values, dist.p50, dist.p99, colour, dashed))
            cells = f'<td class="num">{dist.count}</td>'
            cells += "".join(f'<td class="num">{number(v)}</td>' for v in (dist.mean, dist.p50, dist.p99))
            base = bases.get(dist.source) if run.index else None
            if compare:
                for text, cls in (
                    delta(base.p50, dist.p50, "lower") if base else ("", "na"),
                    delta(base.p99, dist.p99, "lower") if base else ("", "na"),
                ):
                    cells += f'<td class="num"><span class="delta {cls}">{esc(text)}</span></td>'
            swatch = f'<span class="sw s{colour}{" dashed" if dashed else ""}"></span>'
            rows.append(f'<tr><td class="nowrap">{swatch} {esc(label)}</td>{cells}</tr>')
    columns = ["n", "mean", "p50", "p99", *(["Δ p50", "Δ p99"] if compare else [])]
    head = "<tr><th>source</th>" + "".join(f'<th class="num">{c}</th>' for c in columns) + "</tr>"
    table = f"<table>{head}{''.join(rows)}</table>" if series else '<p class="muted">No values recorded.</p>'
    figure = cdf(series, metric.unit, f"cumulative distribution of {metric.label} ({metric.unit})")
    title = f'{esc(metric.label)} <span class="muted small">{esc(metric.meaning)} · {esc(metric.unit)}</span>'
    return f'<div class="card latency" data-metric="{esc(metric.key)}"><h3>{title}</h3>{figure}{table}</div>'


# --- samples ------------------------------------------------------------------------------------------------


def _samples_section(runs: Sequence[_Run], keys: dict[tuple[str, str], int]) -> str:
    by_run = [{s.key: s for s in run.data.samples} for run in runs]
    expand = len(keys) <= OPEN_SAMPLES_UP_TO
    legend = (
        '<div class="legend"><span><i class="key speech"></i>question speech (input)</span>'
        '<span><i class="key listen"></i>model listens</span><span><i class="key speak"></i>model speaks '
        '(audio received)</span><span><i class="key sentence"></i>reply sentence (numbered)</span>'
        '<span><i class="key reminder"></i>reminder / event time</span><span>shaded: padding after the clip'
        "</span></div>"
    )
    index_rows, cards = [], []
    for key, number_ in keys.items():
        found = [(run, table.get(key)) for run, table in zip(runs, by_run, strict=True)]
        index_rows.append(_index_row(key, number_, found))
        cards.append(_sample_card(key, number_, found, expand))
    head = (
        "<tr><th class=num>#</th><th>sample</th><th>task</th>"
        + "".join(f"<th>{esc(run.name if len(runs) > 1 else 'result')}</th>" for run in runs)
        + "</tr>"
    )
    return (
        '<section id="samples"><h2>Samples</h2><p class="lead">Each sample on the media clock (seconds). '
        "Play the reply audio to move the playhead; click a timeline to seek. The audio is not inside this "
        "page: each player plays its <code>output.wav</code> from the run folder, so keep report.html in its "
        "run folder, or move the folder whole.</p>"
        f"<table class='index'>{head}{''.join(index_rows)}</table>{legend}{''.join(cards)}</section>"
    )


def _index_row(key: tuple[str, str], number_: int, found: Sequence[tuple[_Run, SampleReport | None]]) -> str:
    task = next((s.task for _, s in found if s is not None and s.task), None)
    cells = "".join(f"<td>{_result_summary(sample, run.data.spec)}</td>" for run, sample in found)
    link = f'<a href="#sample-{number_}">{esc(key[0])}/{esc(key[1])}</a>'
    return f'<tr><td class="num">{number_}</td><td>{link}</td><td>{esc(task or MISSING)}</td>{cells}</tr>'


def _result_summary(sample: SampleReport | None, spec: ReportSpec) -> str:
    if sample is None:
        return '<span class="muted">not in this run</span>'
    parts = [_status_badge(sample)]
    if sample.sentences is not None:
        parts.append(f"{len(sample.sentences)} sentence{'s' if len(sample.sentences) != 1 else ''}")
    if sample.sentences:
        parts.append(f"first at {seconds(min(s.start for s in sample.sentences))}")
    if sample.score is not None:
        parts.append(esc(_score_text(sample.score, spec)))
    return " · ".join(f'<span class="nowrap">{part}</span>' for part in parts)


def _status_badge(sample: SampleReport) -> str:
    status = sample.status or "unknown"
    cls = "published" if sample.published else "failed"
    retried = (
        f' <span class="badge retried">retried {sample.retry_count}x</span>' if sample.retry_count else ""
    )
    return f'<span class="badge {cls}">{esc(status)}</span>{retried}'


def _score_text(score: SampleScore, spec: ReportSpec) -> str:
    if score.status != "scored":
        return f"judge {score.status or 'error'}: {score.error or 'no reason given'}"
    names = spec.score_names
    shown = [(n, v) for n, v in score.scores.items() if not spec.only_named_scores or n in names]
    values = [f"{names.get(name, name)} {number(value, 2)}" for name, value in shown]
    return "score: " + (", ".join(values) or MISSING)


def _sample_card(
    key: tuple[str, str], number_: int, found: Sequence[tuple[_Run, SampleReport | None]], expand: bool
) -> str:
    present = [(run, s) for run, s in found if s is not None]
    first = present[0][1]
    failed = any(not s.published for _, s in present)
    badges = " ".join(
        (f"{esc(run.letter)} " if len(found) > 1 else "") + _status_badge(s) for run, s in present
    )
    error = next((s.error for _, s in present if s.error), None)
    summary = (
        f"<summary>{badges} <b>{esc(key[0])} / {esc(key[1])}</b>"
        f'<span class="muted">{esc(_task_text(first))}</span>'
        + (f'<span class="error-line">{esc(error)}</span>' if error else "")
        + "</summary>"
    )
    span = max(timeline_span(s) for _, s in present)
    question = next((s.question for _, s in present if s.question), None)
    body = f'<p class="question"><b>Question:</b> {esc(question)}</p>' if question else ""
    body += "".join(_run_block(run, s, number_, span, len(found) > 1) for run, s in present)
    opened = " open" if expand or failed else ""
    body = f'<div class="sample-body">{body}</div>'
    return f'<details class="sample" id="sample-{number_}"{opened}>{summary}{body}</details>'


def _task_text(sample: SampleReport) -> str:
    family = f" ({sample.family.upper()})" if sample.family else ""
    return f"{sample.task or MISSING}{family}"


def _run_block(run: _Run, sample: SampleReport, number_: int, span: float, named: bool) -> str:
    element_id = f"timeline-{number_}-{run.index}"
    parts = ['<div class="run-block">']
    if named:
        parts.append(f'<div class="run-name">{esc(run.name)}</div>')
    if sample.clock == "invalid":
        parts.append(
            '<p class="small muted">clock=invalid: times are positions in the input stream, '
            "not real time.</p>"
        )
    parts.append(timeline(sample, element_id, span))
    if run.data.spec.sample_figure is not None:
        parts.append(run.data.spec.sample_figure(sample, span))
    if sample.audio is not None:
        href = _audio_href(run, sample.audio)
        length = "length unknown" if sample.audio_s is None else f"{sample.audio_s:.1f} s"
        parts.append(
            f'<p class="small audio-note">Reply audio, {length}: plays <code>{esc(href)}</code> from the run '
            "folder (not inside this page).</p>"
            f'<audio controls preload="none" src="{esc(href)}" data-timeline="{element_id}"></audio>'
        )
    parts.append(f'<div class="row"><div>{_sentence_table(sample)}</div><div>')
    parts.append(_failure_block(sample))
    parts.append(_response_table(sample))
    if sample.score is not None:
        parts.append(f"<p>{esc(_score_text(sample.score, run.data.spec))}</p>")
    parts.append("</div></div></div>")
    return "".join(parts)


def _audio_href(run: _Run, relative: str) -> str:
    """The URL of a file of `run` from the report's folder (run A's): relative, segments percent-encoded."""
    path = relative if run.folder == "." else f"{run.folder}/{relative}"
    return "/".join(urllib.parse.quote(part) for part in path.split("/"))


def _sentence_table(sample: SampleReport) -> str:
    if sample.sentences is None:
        why = "not published" if not sample.published else "the sentences file is missing or unreadable"
        return f'<p class="muted">No sentences: {why}.</p>'
    if not sample.sentences:
        return '<p class="muted">Published without a sentence: the model said nothing in text.</p>'
    rows = "".join(
        f'<tr><td class="num">{i}</td><td class="num">{seconds(s.start)}</td>'
        f'<td class="num">{seconds(s.end)}</td><td>{esc(s.text)}</td></tr>'
        for i, s in enumerate(sample.sentences, start=1)
    )
    return (
        "<table><tr><th class=num>#</th><th class=num>start</th><th class=num>end</th><th>sentence</th></tr>"
        f"{rows}</table>"
    )


def _failure_block(sample: SampleReport) -> str:
    """Why the sample failed, and anything that went wrong on the way even when it was published."""
    lines = []
    if sample.error:
        lines.append(f"<b>error:</b> {esc(sample.error)}")
    lines += [f"{esc(name)} after {number(bound)} s" for name, bound in sample.timeouts.items()]
    if sample.server_errors:
        lines.append(f"server errors: {esc(', '.join(sample.server_errors))}")
    if len(sample.attempts) > 1 or any(a.error for a in sample.attempts):
        for i, attempt in enumerate(sample.attempts, start=1):
            detail = attempt.error or "published"
            if attempt.transport_error and attempt.transport_error not in detail:
                detail += f" ({attempt.transport_error})"
            if attempt.sentences is not None:
                detail += f"; {attempt.sentences} sentence(s) kept for diagnosis, not published"
            lines.append(f"attempt {i}: {esc(detail)}")
    if not lines:
        return ""
    cls = "note error" if not sample.published else "note"
    return f'<div class="{cls}">' + "<br>".join(lines) + "</div>"


def _response_table(sample: SampleReport) -> str:
    turns = MISSING if sample.turns is None else str(sample.turns)
    source = SOURCE_LABELS.get(sample.session_source or "", sample.session_source or MISSING)
    session = (
        f'<p class="small muted">stream TTFT {number(sample.stream_ttft_ms)} ms · stream TTFP '
        f"{number(sample.stream_ttfp_ms)} ms · {turns} turn(s) · {esc(source)}</p>"
    )
    if not sample.responses:
        return f'<p class="muted">No responses recorded.</p>{session}'
    rows = "".join(_response_row(r) for r in sample.responses)
    return (
        "<table><tr><th>response</th><th class=num>TTFT</th><th class=num>TTFP</th><th class=num>TPOT</th>"
        f"<th class=num>RTF</th><th>source</th></tr>{rows}</table>{session}"
    )


def _response_row(response: ResponseLatency) -> str:
    status = "" if response.status in (None, "completed") else f" ({response.status})"
    values = "".join(
        f'<td class="num">{number(v)}</td>'
        for v in (response.ttft_ms, response.ttfp_ms, response.tpot_ms, response.rtf)
    )
    source = SOURCE_LABELS.get(response.source or "", response.source or MISSING)
    return (
        f'<tr><td class="mono small">{esc((response.response_id or MISSING) + status)}</td>{values}'
        f'<td class="nowrap">{esc(source)}</td></tr>'
    )
