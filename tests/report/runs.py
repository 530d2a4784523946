"""Small run folders written by hand, following docs/run-format.md, for the report's tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

SERVER = "server_request_start_and_client_receive"
CLIENT = "client_commit_to_receive"
CREATED = "client_created_to_receive"
STREAM = "client_stream_start_to_receive"


def response(
    rid: str, ttft: float | None, *, source: str = SERVER, rtf: float | None = 0.5
) -> dict[str, Any]:
    return {
        "response_id": rid,
        "status": "completed",
        "source": source,
        "ttft_ms": ttft,
        "ttfp_ms": None if ttft is None else ttft + 10,
        "tpot_ms": 20.0 if source == SERVER else None,
        "rtf": rtf,
        "audio_ms": 1500.0,
        "audio_chunks": 2,
        "inter_chunk_gap_ms": None,
        "text": "Hello.",
    }


PUBLISHED: dict[str, Any] = {
    "split": "PR_event_reminder",
    "id": "lights",
    "task": "event_reminder",
    "family": "pr",
    "sample": {
        "question_text": "Tell me when the light changes.",
        "answer1": "It turned red.",
        "answer2": None,
        "reminder1": 4.0,
        "reminder2": 7.5,
        "video_type": "synthetic",
        "video_duration": 10.0,
    },
    "clock": "media",
    "audio_placement": "arrival",
    "pace": "realtime",
    "fps": 1.0,
    "chunk_ms": 200,
    "unit_ms": 1000,
    "model": "scripted",
    "server_url": "ws://127.0.0.1:9/v1/realtime",
    "status": "published",
    "error": None,
    "response_done": True,
    "input_committed": True,
    "timeouts": {"input_timeout": None, "commit_timeout": None, "drain_timeout": None, "close_timeout": None},
    "bounds": {"input_timeout": 20.0, "commit_timeout": 5.0, "drain_timeout": 60.0, "close_timeout": 5.0},
    "retry_count": 0,
    "capacity_wait_s": 0.0,
    "attempts": [
        {"error": None, "response_done": True, "server_errors": [], "timeouts": {}, "transport_error": None}
    ],
    "server_errors": [],
    "responses": [response("resp_1", 250.0), response("resp_2", 270.0)],
    "session": {
        "stream_ttft_ms": 4300.0,
        "stream_ttfp_ms": 4310.0,
        "stream_rtf": 0.6,
        "turns": 2,
        "source": STREAM,
    },
    "pacing": None,
    "timeline": {
        "decisions": [
            {"t": 1.0, "decision": "listen"},
            {"t": 2.0, "decision": "listen"},
            {"t": 4.2, "decision": "speak"},
            {"t": 5.0, "decision": "speak"},
            {"t": 6.0, "decision": "listen"},
        ],
        "input_speech": [[0.34, 2.96]],
    },
    "started_at": "2026-01-01T00:00:00+00:00",
    "finished_at": "2026-01-01T00:00:12+00:00",
}
SENTENCES = [
    {"sentence": "The light turned red.", "start": 4.2, "end": 5.0},
    {"sentence": "Now it is blue.", "start": 7.8, "end": 8.4},
]


def meta(**changes: Any) -> dict[str, Any]:
    """A published sample's metadata with top-level `changes` applied (a deep copy)."""
    out = copy.deepcopy(PUBLISHED)
    out.update(copy.deepcopy(changes))
    return out


def failed_meta(**changes: Any) -> dict[str, Any]:
    """A sample whose drain stalled twice: retried once, then failed; the first attempt kept 1 sentence."""
    stalled = {"input_timeout": None, "commit_timeout": None, "drain_timeout": 60.0, "close_timeout": None}
    attempt = {"error": "drain_timeout", "response_done": False, "server_errors": [], "timeouts": stalled}
    fields: dict[str, Any] = {
        "split": "RTD_counting",
        "id": "squares",
        "task": "RTD_counting",
        "family": "rtd",
        "status": "failed",
        "error": "drain_timeout",
        "response_done": False,
        "timeouts": stalled,
        "retry_count": 1,
        "attempts": [{**attempt, "transport_error": None, "sentences": [SENTENCES[0]]}, attempt],
        "responses": [{**response("resp_9", 999.0), "status": None}],
    }
    return meta(**(fields | changes))


def write_sample(
    run_dir: Path, sample_meta: dict[str, Any], sentences: Any = None, *, audio: bool = False
) -> None:
    """`records/<split>/<id>.meta.json`, then `records/<split>/<id>.json` when `sentences` is given (raw
    JSON-able value), and `<split>/<id>/output.wav` when `audio`."""
    records = run_dir / "records" / sample_meta["split"]
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{sample_meta['id']}.meta.json").write_text(json.dumps(sample_meta), encoding="utf-8")
    if sentences is not None:
        (records / f"{sample_meta['id']}.json").write_text(json.dumps(sentences), encoding="utf-8")
    if audio:
        folder = run_dir / sample_meta["split"] / sample_meta["id"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "output.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVE")


def write_run_json(run_dir: Path, **changes: Any) -> dict[str, Any]:
    run = {
        "duplexkit_version": "0.1.0",
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:01:00+00:00",
        "command": ["duplexkit", "bench", "--dataset", "builtin", "--out", str(run_dir)],
        "config": {
            "url": "ws://127.0.0.1:9/v1/realtime",
            "model": "scripted",
            "pace": "realtime",
            "fps": 1.0,
            "chunk_ms": 200,
            "concurrency": 4,
            "keep_audio": True,
        },
        "dataset": {
            "source": "builtin",
            "fingerprint": "ab" * 32,
            "selection": {"splits": [], "family": "all", "ids": [], "exclude_ids": [], "limit": None},
            "samples": 3,
        },
        "server": {"url": "ws://127.0.0.1:9/v1/realtime", "model": "scripted", "embedded": True},
        "counts": {"attempted": 3, "published": 2, "failed": 1, "retried": 1},
    }
    run.update(changes)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps(run), encoding="utf-8")
    return run


def write_scores(
    run_dir: Path, *, content: float = 1.5, success: float = 0.5, model: str = "judge-7b"
) -> None:
    """`scores/summary.json` and one sample score, in the shape `duplexkit score` writes."""
    judge = {
        "kind": "llm",
        "model": model,
        "url": "http://judge:8000/v1",
        "prompt_version": "odeval-1",
        "prompt_source": "duplexkit",
    }
    group = {"samples": 1, "scored": 1, "skipped": 0, "errors": 0}
    summary = {
        "judge": judge,
        "complete": True,
        "coverage": {"total": 3, "scored": 2, "skipped": 1, "errors": 0, "cached": 0},
        "rtd": {
            "mean_content_score": content,
            "mean_avg_temporal_score": None,
            "samples": 1,
            "scored": 0,
            "skipped": 1,
            "errors": 0,
            "by_task": {
                "RTD_counting": {
                    "mean_content_score": content,
                    "mean_avg_temporal_score": None,
                    **group,
                }
            },
        },
        "pr": {
            "mean_all_success": success,
            **group,
            "by_task": {"event_reminder": {"mean_all_success": success, **group}},
        },
    }
    folder = run_dir / "scores"
    (folder / "PR_event_reminder").mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    record = {
        "split": "PR_event_reminder",
        "id": "lights",
        "judge": judge,
        "status": "scored",
        "error": None,
        "scores": {"all_success": success},
        "details": {},
    }
    (folder / "PR_event_reminder" / "lights.json").write_text(json.dumps(record), encoding="utf-8")


def standard_run(run_dir: Path) -> Path:
    """run.json, a published sample (with audio), a failed one, and one published with no responses."""
    write_run_json(run_dir)
    write_sample(run_dir, meta(), SENTENCES, audio=True)
    write_sample(run_dir, failed_meta())
    silent = meta(
        split="RTD_OCR",
        id="sign",
        task="RTD_OCR",
        family="rtd",
        responses=[],
        session={
            "stream_ttft_ms": None,
            "stream_ttfp_ms": None,
            "stream_rtf": None,
            "turns": 0,
            "source": STREAM,
        },
        timeline={"decisions": [{"t": 1.0, "decision": "listen"}], "input_speech": []},
    )
    silent["sample"] = {**silent["sample"], "reminder1": None, "reminder2": -1, "video_duration": None}
    write_sample(run_dir, silent, [])
    return run_dir
