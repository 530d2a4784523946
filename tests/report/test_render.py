"""The page: self-contained, escaped, scores optional, comparisons with deltas; and `duplexkit report`."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import hashlib
import re
from html import unescape
from pathlib import Path

import numpy as np
import pytest

from duplexkit.bench.report import REPORT_NAME, ReportError, load_run, render_report, write_report
from duplexkit.bench.report.assets import CSS, JS
from duplexkit.bench.report.fmt import delta, nice_axis, tick_label
from duplexkit.client.wavfile import write_wav
from duplexkit.commands import report as report_command
from tests.report.runs import (
    CLIENT,
    CREATED,
    SENTENCES,
    meta,
    response,
    standard_run,
    write_run_json,
    write_sample,
    write_scores,
)

WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def page(*runs: Path) -> str:
    first, *others = (load_run(path) for path in runs)
    return render_report(first, others, generated_at=WHEN)


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    html = page(standard_run(tmp_path))

    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(link|iframe|object|embed|img)\b", html)
    assert not re.search(r"<script[^>]*\bsrc=", html)
    assert not re.search(r"""\b(src|href)=["']?(https?:|//|ws:)""", html)
    assert "@import" not in html and "url(" not in CSS


def test_the_policy_allows_exactly_the_embedded_style_and_script(tmp_path: Path) -> None:
    html = page(standard_run(tmp_path))

    found = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert found is not None
    policy = unescape(found.group(1))
    for text in (CSS, JS):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy
    assert f"<style>{CSS}</style>" in html and f"<script>{JS}</script>" in html
    assert ' style="' not in html  # inline style attributes would need 'unsafe-inline'


def test_text_from_run_files_is_escaped(tmp_path: Path) -> None:
    evil = '<script>alert("x")</script>'
    write_run_json(tmp_path, server={"url": evil, "model": "<b>model</b>", "embedded": False})
    hostile = meta(error=f'server_error: {evil}" onmouseover="x', task=evil)
    hostile["sample"] = {**hostile["sample"], "question_text": evil}
    write_sample(tmp_path, hostile, [{"sentence": evil, "start": 1.0, "end": 2.0}])

    html = page(tmp_path)

    assert evil not in html and "<b>model</b>" not in html
    assert '" onmouseover="x' not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert html.count("<script>") == 1


def test_the_run_section_names_the_model_each_server_said_it_served(tmp_path: Path) -> None:
    pool = [{"url": "ws://a/v1/realtime", "model": "moshi", "model_identity": "moshi@sha256:1234abcd"}]
    write_run_json(tmp_path, server={"url": "ws://a/v1/realtime", "model": "moshi", "pool": pool})
    write_sample(tmp_path, meta(), SENTENCES)
    assert load_run(tmp_path).run.model_identities == ("moshi@sha256:1234abcd",)
    assert "moshi@sha256:1234abcd" in page(tmp_path)


def test_header_coverage_latency_and_samples_are_shown(tmp_path: Path) -> None:
    html = page(standard_run(tmp_path))

    for text in (
        "scripted",
        "ws://127.0.0.1:9/v1/realtime",
        "builtin",
        "splits: all",
        "realtime · clock media · output placed by arrival",
    ):
        assert text in html
    assert "duplexkit 0.1.0" in html and "2026-01-01T00:00:00+00:00" in html and "(1 min 0 s)" in html
    assert "Failures by reason" in html and ">drain_timeout<" in html
    assert html.count('class="card latency"') == 6
    assert html.count('<svg id="timeline-') == 3
    assert 'src="PR_event_reminder/lights/output.wav"' in html and 'data-timeline="timeline-1-0"' in html
    assert "Published without a sentence" in html and "No responses recorded." in html
    assert "No sentences: not published." in html
    assert "attempt 1: drain_timeout; 1 sentence(s) kept for diagnosis, not published" in html
    assert "server-anchored" in html and "client, from stream start" in html
    assert "Not scored yet" in html


def test_the_two_client_clock_anchors_are_shown_apart(tmp_path: Path) -> None:
    run_dir = standard_run(tmp_path)
    responses = [
        response("c1", 900.0, source=CLIENT, rtf=None),
        response("c2", 40.0, source=CREATED, rtf=None),
    ]
    write_sample(run_dir, meta(id="client", responses=responses), [])
    ttft_card = page(run_dir).split('class="card latency"')[1]
    assert "client, from commit send" in ttft_card and "client, from response.created" in ttft_card


def test_scores_are_shown_with_the_judge_when_present(tmp_path: Path) -> None:
    run_dir = standard_run(tmp_path)
    write_scores(run_dir, content=1.5, success=0.5)

    html = page(run_dir)

    assert "Not scored yet" not in html
    assert "LLM judge judge-7b at http://judge:8000/v1 · prompts odeval-1 (duplexkit)" in html
    assert "RTD: real-time description" in html and "PR: proactive reminder" in html
    assert ">1.50<" in html and ">0.500<" in html
    assert "score: success 0.50" in html


def test_a_comparison_shows_runs_side_by_side_with_deltas(tmp_path: Path) -> None:
    base, other = standard_run(tmp_path / "base"), standard_run(tmp_path / "other")
    write_scores(base, content=1.5, success=0.5)
    write_scores(other, content=2.0, success=0.25)
    write_sample(other, meta(id="extra"), SENTENCES)

    html = page(base, other)

    assert "A: base" in html and "B: other" in html
    assert '<span class="delta up">+0.50</span>' in html  # content went up
    assert '<span class="delta down">-0.250</span>' in html  # all-success went down
    assert '<span class="delta down">+1</span>' not in html
    assert '<span class="delta up">+1</span>' in html  # one more published sample
    assert "not in this run" in html  # the extra sample is only in B
    assert 'src="../other/PR_event_reminder/lights/output.wav"' in html


def test_a_comparison_warns_when_judges_differ(tmp_path: Path) -> None:
    base, other = standard_run(tmp_path / "a"), standard_run(tmp_path / "b")
    write_scores(base)
    write_scores(other, model="another-judge")

    assert "their scores are not comparable" in page(base, other)


def test_audio_paths_are_percent_encoded(tmp_path: Path) -> None:
    write_run_json(tmp_path)
    write_sample(tmp_path, meta(id="a b#c?d"), [], audio=True)

    assert 'src="PR_event_reminder/a%20b%23c%3Fd/output.wav"' in page(tmp_path)


def test_each_player_says_how_long_its_clip_is_and_that_it_plays_from_the_run_folder(tmp_path: Path) -> None:
    write_run_json(tmp_path)
    write_sample(tmp_path, meta(id="talks"), [], audio=True)
    write_sample(tmp_path, meta(id="broken"), [], audio=True)
    write_wav(tmp_path / "PR_event_reminder" / "talks" / "output.wav", np.zeros(24_000 * 3 // 2), 24_000)

    html = page(tmp_path)

    assert (
        "Reply audio, 1.5 s: plays <code>PR_event_reminder/talks/output.wav</code> from the run folder"
        in html
    )
    assert "Reply audio, length unknown: plays <code>PR_event_reminder/broken/output.wav</code>" in html
    assert "keep report.html in its run folder" in html


def test_clock_invalid_runs_are_flagged(tmp_path: Path) -> None:
    write_run_json(tmp_path)
    write_sample(tmp_path, meta(clock="invalid", pace="as-fast-as-possible"), [])

    html = page(tmp_path)

    assert "as-fast-as-possible</b> pace (clock=invalid)" in html
    assert "clock=invalid: times are positions in the input stream" in html


def test_write_report_writes_report_html(tmp_path: Path) -> None:
    run_dir = standard_run(tmp_path / "run")

    path = write_report(run_dir)

    assert path == run_dir / REPORT_NAME
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    with pytest.raises(ReportError):
        write_report(run_dir, [tmp_path / "nowhere"])


def test_a_run_given_as_a_relative_path_is_named_by_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = standard_run(tmp_path / "my-run")
    monkeypatch.chdir(run_dir)

    html = write_report(Path(".")).read_text(encoding="utf-8")

    assert "<title>duplexkit report: my-run</title>" in html


def test_the_report_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    report_command.register(parser.add_subparsers())
    run_dir, other = standard_run(tmp_path / "a"), standard_run(tmp_path / "b")

    args = parser.parse_args(["report", str(run_dir), "--compare", str(other), str(other)])
    assert args.compare == [other, other]
    assert report_command.run(args) == 0
    assert (run_dir / REPORT_NAME).is_file()
    assert capsys.readouterr().out.strip() == f"wrote {run_dir / REPORT_NAME}"

    assert report_command.run(parser.parse_args(["report", str(tmp_path / "nowhere")])) == 2
    assert "not a directory" in capsys.readouterr().err


def test_delta_colours_by_direction() -> None:
    assert delta(1.0, 1.5, "higher", 2) == ("+0.50", "up")
    assert delta(1.0, 1.5, "lower", 2) == ("+0.50", "down")
    assert delta(10.0, 10.0004, "lower", 2) == ("±0", "same")
    assert delta(3.0, 5.0, None, 0) == ("+2", "same")
    assert delta(None, 5.0, "lower") == ("\u2013", "na")


@pytest.mark.parametrize(
    ("maximum", "ticks", "expected"),
    [(261.2, 5, (300.0, 100.0)), (10.2, 10, (12.0, 2.0)), (0.7, 5, (0.8, 0.2)), (0.0, 5, (1.0, 0.2))],
)
def test_nice_axis(maximum: float, ticks: int, expected: tuple[float, float]) -> None:
    top, step = nice_axis(maximum, ticks)
    assert (top, step) == pytest.approx(expected)


def test_tick_labels_have_the_decimals_the_step_needs() -> None:
    assert [tick_label(v, 0.2) for v in (0.0, 0.4)] == ["0.0", "0.4"]
    assert tick_label(0.05, 0.05) == "0.05"
    assert tick_label(2000.0, 1000.0) == "2000"
