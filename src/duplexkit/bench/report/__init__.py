"""The run report: one self-contained HTML file per run folder (`RUN_DIR/report.html`).

`write_report(run_dir, compare)` reads the run folder (and any runs to compare with it) with `load_run`,
renders the page with `render_report`, and writes it atomically. Scores are shown when `duplexkit score` has
written them; everything else comes from the files `duplexkit bench` writes (docs/run-format.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from duplexkit.bench.artifacts import write_bytes_atomic
from duplexkit.bench.report.data import ReportData
from duplexkit.bench.report.load import ReportError, load_run
from duplexkit.bench.report.render import render_report

REPORT_NAME = "report.html"

__all__ = ["REPORT_NAME", "ReportData", "ReportError", "load_run", "render_report", "write_report"]


def write_report(run_dir: Path, compare: Sequence[Path] = ()) -> Path:
    """Write `run_dir/report.html` (replacing any earlier one) and return its path.

    `compare` are other run folders shown side by side, with their differences to `run_dir`. Raises
    `ReportError` (nothing written) when `run_dir` or a folder in `compare` is not a run folder.
    """
    primary = load_run(run_dir)
    others = [load_run(path) for path in compare]
    page = render_report(primary, others, generated_at=dt.datetime.now(dt.UTC))
    path = run_dir / REPORT_NAME
    write_bytes_atomic(path, page.encode("utf-8"))
    return path
