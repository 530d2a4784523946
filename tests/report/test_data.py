"""`load_run`: a run folder (docs/run-format.md) read into a typed `ReportData`, leniently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duplexkit.bench.aggregate import run_metrics
from duplexkit.bench.report import ReportError, load_run
from duplexkit.bench.report.data import DecisionMark, Sentence
from tests.report.runs import (
    CLIENT,
    CREATED,
    SERVER,
    STREAM,
    failed_meta,
    meta,
    response,
    standard_run,
    write_run_json,
    write_sample,
    write_scores,
)


def test_run_details_come_from_run_json(tmp_path: Path) -> None:
    data = load_run(standard_run(tmp_path))

    run = data.run
    assert (run.model, run.server_url, run.embedded_server) == (
        "scripted",
        "ws://127.0.0.1:9/v1/realtime",
        True,
    )
    assert (run.dataset_source, run.dataset_samples, run.dataset_fingerprint) == ("builtin", 3, "ab" * 32)
    assert run.selection == "splits: all · family: all · limit: none"
    assert (run.pace, run.clocks, run.fps, run.chunk_ms, run.concurrency) == (
        "realtime",
        ("media",),
        1.0,
        200,
        4,
    )
    assert run.placements == ("arrival",)
    assert run.command[:2] == ("duplexkit", "bench")
    assert data.problems == ()


def test_samples_are_ordered_by_split_then_id(tmp_path: Path) -> None:
    data = load_run(standard_run(tmp_path))

    assert [s.key for s in data.samples] == [
        ("PR_event_reminder", "lights"),
        ("RTD_OCR", "sign"),
        ("RTD_counting", "squares"),
    ]


def test_a_published_sample_has_its_timeline_sentences_and_audio(tmp_path: Path) -> None:
    sample = load_run(standard_run(tmp_path)).samples[0]

    assert sample.published and sample.error is None
    assert (sample.task, sample.family, sample.video_duration) == ("event_reminder", "pr", 10.0)
    assert sample.reminders == (("R1", 4.0), ("R2", 7.5))
    assert sample.input_speech == ((0.34, 2.96),)
    assert sample.decisions[2] == DecisionMark(4.2, "speak")
    assert [d.decision for d in sample.decisions] == ["listen", "listen", "speak", "speak", "listen"]
    assert sample.sentences == (
        Sentence("The light turned red.", 4.2, 5.0),
        Sentence("Now it is blue.", 7.8, 8.4),
    )
    assert [r.ttft_ms for r in sample.responses] == [250.0, 270.0]
    assert (sample.stream_ttft_ms, sample.session_source, sample.turns) == (4300.0, STREAM, 2)
    assert sample.audio == "PR_event_reminder/lights/output.wav"
    assert sample.timeouts == {} and sample.score is None


def test_a_failed_sample_keeps_its_reasons_and_attempts(tmp_path: Path) -> None:
    sample = load_run(standard_run(tmp_path)).samples[2]

    assert not sample.published
    assert sample.status == "failed" and sample.error == "drain_timeout"
    assert sample.sentences is None  # no <id>.json: never published
    assert sample.timeouts == {"drain_timeout": 60.0}
    assert sample.retry_count == 1
    assert [(a.error, a.sentences) for a in sample.attempts] == [
        ("drain_timeout", 1),
        ("drain_timeout", None),
    ]
    assert sample.audio is None


def test_a_sample_with_no_responses_and_missing_values(tmp_path: Path) -> None:
    sample = load_run(standard_run(tmp_path)).samples[1]

    assert sample.published
    assert sample.sentences == ()  # published, but the model said nothing
    assert sample.responses == ()
    assert (sample.stream_ttft_ms, sample.stream_ttfp_ms, sample.turns) == (None, None, 0)
    assert sample.reminders == ()  # null and the -1 sentinel are "no event"
    assert sample.video_duration is None
    assert sample.input_speech == ()


def test_coverage_counts_every_attempted_sample_and_groups_failure_reasons(tmp_path: Path) -> None:
    run_dir = standard_run(tmp_path)
    write_sample(run_dir, failed_meta(id="other", error="server_error: model_error, bad_frame"))

    coverage = load_run(run_dir).coverage

    assert (coverage.attempted, coverage.published, coverage.failed, coverage.retried) == (4, 2, 2, 2)
    assert coverage.failure_reasons == {"drain_timeout": 1, "server_error": 1}
    assert coverage.recorded == {"attempted": 3, "published": 2, "failed": 1, "retried": 1}


def test_latency_covers_published_samples_per_source_like_metrics_json(tmp_path: Path) -> None:
    run_dir = standard_run(tmp_path)
    client_meta = meta(
        id="client",
        responses=[
            response("resp_c", 900.0, source=CLIENT, rtf=None),
            response("resp_d", 40.0, source=CREATED, rtf=None),
        ],
    )
    write_sample(run_dir, client_meta, [])
    data = load_run(run_dir)

    ttft = {d.source: d for d in data.distribution("ttft_ms")}
    assert set(ttft) == {SERVER, CLIENT, CREATED}  # never pooled: the two client anchors stay apart
    assert ttft[SERVER].values == (250.0, 270.0)  # the failed sample's 999 ms is left out
    assert ttft[CLIENT].values == (900.0,)
    assert ttft[CREATED].values == (40.0,)
    assert data.distribution("tpot_ms")[0].source == SERVER  # the client source has no TPOT
    metas = [json.loads(p.read_text()) for p in sorted(run_dir.glob("records/*/*.meta.json"))]
    expected = run_metrics(metas)
    for dist in data.latency:
        stats = expected[dist.metric][dist.source]
        assert (dist.count, dist.mean, dist.p50, dist.p99) == (
            stats["count"],
            stats["mean"],
            stats["p50"],
            stats["p99"],
        )
    assert [d.metric for d in data.latency] == [
        "ttft_ms",
        "ttft_ms",
        "ttft_ms",
        "ttfp_ms",
        "ttfp_ms",
        "ttfp_ms",
        "tpot_ms",
        "rtf",
        "stream_ttft_ms",
        "stream_ttfp_ms",
    ]


def test_scores_are_optional_and_read_when_present(tmp_path: Path) -> None:
    run_dir = standard_run(tmp_path)
    assert load_run(run_dir).scores is None

    write_scores(run_dir, content=1.25, success=0.5)
    data = load_run(run_dir)

    assert data.scores is not None
    judge = data.scores.judge
    assert (judge.kind, judge.model, judge.url, judge.prompt_version) == (
        "llm",
        "judge-7b",
        "http://judge:8000/v1",
        "odeval-1",
    )
    rtd, pr = data.scores.families
    assert rtd.overall.means == {"mean_content_score": 1.25, "mean_avg_temporal_score": None}
    assert [t.name for t in rtd.tasks] == ["RTD_counting"]
    assert pr.overall.means == {"mean_all_success": 0.5}
    assert data.scores.coverage["scored"] == 2
    scored = data.samples[0].score
    assert scored is not None and scored.status == "scored" and scored.scores == {"all_success": 0.5}


def test_values_of_the_wrong_type_become_none(tmp_path: Path) -> None:
    write_run_json(tmp_path, config={"fps": "fast", "concurrency": True}, server=[])
    odd = meta(
        responses=[{**response("r", 1e400), "rtf": True, "tpot_ms": "12"}, "not a response"],
        session={"stream_ttft_ms": float("nan"), "turns": 2.5},
        timeline={
            "decisions": [
                {"t": "1", "decision": "listen"},
                {"t": 2, "decision": "shout"},
                {"t": 3, "decision": "speak"},
            ],
            "input_speech": [[1, 2], [3], [5, 4], "x"],
        },
        retry_count=None,
        attempts="none",
        timeouts={"drain_timeout": "60"},
        server_errors=[1, None, "bad"],
    )
    odd["sample"] = {"reminder1": "4", "video_duration": float("inf")}
    write_sample(
        tmp_path, odd, [{"sentence": "ok", "start": 1, "end": 2}, {"sentence": 3, "start": 1, "end": 2}]
    )

    data = load_run(tmp_path)
    sample = data.samples[0]

    assert (data.run.fps, data.run.concurrency, data.run.model) == (None, None, None)
    first = sample.responses[0]
    assert (first.ttft_ms, first.rtf, first.tpot_ms) == (None, None, None)  # 1e400 parses as inf
    assert sample.responses[1].response_id is None
    assert (sample.stream_ttft_ms, sample.turns) == (None, None)
    assert sample.decisions == (DecisionMark(3.0, "speak"),)
    assert sample.input_speech == ((1.0, 2.0),)
    assert (sample.retry_count, sample.attempts, sample.timeouts) == (0, (), {})
    assert sample.server_errors == ("1", "bad")
    assert (sample.reminders, sample.video_duration) == ((), None)
    assert sample.sentences == (Sentence("ok", 1.0, 2.0),)
    assert data.problems == ("records/PR_event_reminder/lights.json: 1 malformed sentence(s) left out",)


def test_unreadable_files_are_reported_and_the_rest_still_loads(tmp_path: Path) -> None:
    run_dir = standard_run(tmp_path)
    (run_dir / "records" / "RTD_OCR" / "sign.meta.json").write_text("{not json", encoding="utf-8")
    (run_dir / "records" / "PR_event_reminder" / "lights.json").write_text(
        '{"sentence": "not a list"}', encoding="utf-8"
    )
    (run_dir / "scores").mkdir()
    (run_dir / "scores" / "summary.json").write_text("[", encoding="utf-8")

    data = load_run(run_dir)

    assert [s.id for s in data.samples] == ["lights", "squares"]
    assert data.samples[0].sentences is None
    assert data.scores is None
    assert data.problems == (
        "records/PR_event_reminder/lights.json: not a JSON list of sentences",
        "records/RTD_OCR/sign.meta.json: unreadable (JSONDecodeError)",
        "scores/summary.json: unreadable (JSONDecodeError)",
    )


def test_identity_comes_from_the_layout_not_the_file(tmp_path: Path) -> None:
    write_run_json(tmp_path)
    write_sample(tmp_path, meta(), [])
    path = tmp_path / "records" / "PR_event_reminder" / "lights.meta.json"
    path.write_text(json.dumps(meta(split="../../etc", id="passwd")), encoding="utf-8")

    sample = load_run(tmp_path).samples[0]

    assert sample.key == ("PR_event_reminder", "lights")
    assert sample.sentences == ()


def test_a_long_id_selection_is_shortened(tmp_path: Path) -> None:
    ids = [f"id{i}" for i in range(20)]
    selection = {"splits": ["RTD_OCR"], "family": "rtd", "ids": ids, "exclude_ids": [], "limit": 5}
    write_run_json(tmp_path, dataset={"source": "x", "selection": selection})
    write_sample(tmp_path, meta(), [])

    text = load_run(tmp_path).run.selection

    shown = ", ".join(ids[:8])
    assert text == f"splits: RTD_OCR · family: rtd · ids: {shown}, ... (20 in all) · limit: 5"


def test_a_folder_without_run_json_still_loads_with_a_problem(tmp_path: Path) -> None:
    write_sample(tmp_path, meta(), [])

    data = load_run(tmp_path)

    assert data.run.model is None and data.coverage.recorded is None
    assert data.problems == ("run.json is missing: run details are unknown",)


def test_not_a_run_folder(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    with pytest.raises(ReportError, match="not a run folder"):
        load_run(tmp_path)
    with pytest.raises(ReportError, match="not a directory"):
        load_run(tmp_path / "missing")
