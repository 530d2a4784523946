"""The run folder: atomic writes, the order of publication, withdrawal, and resuming a run.

Resume is tested twice: in process with `BenchmarkRunner` against the real embedded server, and as a real
`duplexkit bench` subprocess killed with SIGKILL after its first publication, then rerun with the same
command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import duplexkit.bench.artifacts as artifacts
from duplexkit.bench.artifacts import RunDir, write_json_atomic
from duplexkit.bench.attempt import RunConfig
from duplexkit.bench.omni_duplex_eval.dataset import Sample, Selection, load_dataset
from duplexkit.bench.runner import BenchmarkRunner, SampleResult
from duplexkit.client import SessionBounds
from duplexkit.models import load_model
from duplexkit.server import EmbeddedServer, ServerConfig
from tests.bench.conftest import clip_sample, write_jsonl_dataset

SCRIPTED_ARGS = {"first_output_ms": "30", "token_ms": "2", "ms_per_char": "10"}
SENTENCES = [{"sentence": "A square appears.", "start": 1.2, "end": 1.6}]


def meta_for(split: str, sample_id: str, status: str = "published") -> dict[str, Any]:
    return {"split": split, "id": sample_id, "status": status, "error": None}


def temporaries(root: Path) -> list[Path]:
    return sorted(root.glob("**/.*.tmp"))


# --- atomic writes --------------------------------------------------------------------------------

KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from duplexkit.bench import artifacts

    def stalled_fsync(fd):
        # The new content is in the temp file but not yet renamed over the target: die here.
        Path(sys.argv[2]).write_text("mid-write")
        time.sleep(60)

    artifacts.os.fsync = stalled_fsync
    artifacts.write_json_atomic(Path(sys.argv[1]), {"head": "x" * 100_000, "tail": 1})
    """
)


def test_a_writer_killed_mid_write_leaves_the_old_file_whole_and_only_a_temp_file_behind(
    tmp_path: Path,
) -> None:
    run_dir = RunDir(tmp_path / "run")
    target = run_dir.sentences_path("RTD_counting", "clip")
    write_json_atomic(target, SENTENCES)
    signal_file = tmp_path / "mid-write"
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target), str(signal_file)])
    try:
        deadline = time.monotonic() + 20
        while not signal_file.exists():
            assert writer.poll() is None, "the writer exited before it was killed"
            assert time.monotonic() < deadline, "the writer never reached the middle of its write"
            time.sleep(0.01)
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.wait(10)

    assert (
        json.loads(target.read_text(encoding="utf-8")) == SENTENCES
    )  # a reader still sees the whole old file
    [leftover] = temporaries(run_dir.root)
    assert leftover.parent == target.parent and leftover.name.startswith(f".{target.name}.")
    assert '"tail"' in leftover.read_text(encoding="utf-8")  # the new content never replaced the old
    assert run_dir.clean_temporaries() == 1
    assert temporaries(run_dir.root) == []
    assert json.loads(target.read_text(encoding="utf-8")) == SENTENCES


def test_a_failed_write_removes_its_temp_file_and_keeps_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "RTD_counting" / "clip.json"
    write_json_atomic(target, SENTENCES)
    with pytest.raises(ValueError):
        write_json_atomic(target, [{"start": float("nan")}])  # allow_nan=False refuses it before any write
    assert json.loads(target.read_text(encoding="utf-8")) == SENTENCES
    assert temporaries(tmp_path) == []


def test_clean_temporaries_removes_only_temp_files_at_any_depth(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    write_json_atomic(run_dir.meta_path("PR_correction", "a"), meta_for("PR_correction", "a"))
    stale = [
        tmp_path / ".run.json.abc.tmp",
        tmp_path / "PR_correction" / ".a.json.x1.tmp",
        tmp_path / "PR_correction" / "a" / ".events.json.x2.tmp",
    ]
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{", encoding="utf-8")
    assert run_dir.clean_temporaries() == 3
    assert temporaries(tmp_path) == []
    assert run_dir.meta_path("PR_correction", "a").is_file()


# --- publication ----------------------------------------------------------------------------------


def test_publish_writes_the_metadata_before_the_sentences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[Path] = []
    real_write = artifacts.write_json_atomic

    def recording_write(path: Path, payload: Any) -> None:
        real_write(path, payload)
        written.append(path)

    monkeypatch.setattr(artifacts, "write_json_atomic", recording_write)
    run_dir = RunDir(tmp_path)
    run_dir.publish("RTD_counting", "clip", meta_for("RTD_counting", "clip"), SENTENCES)

    assert written == [
        run_dir.meta_path("RTD_counting", "clip"),
        run_dir.sentences_path("RTD_counting", "clip"),
    ]
    assert run_dir.is_published("RTD_counting", "clip")
    assert json.loads(run_dir.sentences_path("RTD_counting", "clip").read_text(encoding="utf-8")) == SENTENCES


def test_a_crash_between_metadata_and_sentences_leaves_the_sample_unpublished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sentences file is the mark of publication: metadata alone does not make a sample published."""
    run_dir = RunDir(tmp_path)
    real_write = artifacts.write_json_atomic

    def crash_on_sentences(path: Path, payload: Any) -> None:
        if path == run_dir.sentences_path("RTD_counting", "clip"):
            raise KeyboardInterrupt  # the process dies here
        real_write(path, payload)

    monkeypatch.setattr(artifacts, "write_json_atomic", crash_on_sentences)
    with pytest.raises(KeyboardInterrupt):
        run_dir.publish("RTD_counting", "clip", meta_for("RTD_counting", "clip"), SENTENCES)

    assert run_dir.meta_path("RTD_counting", "clip").is_file()
    assert not run_dir.is_published("RTD_counting", "clip")


def test_record_failure_withdraws_an_earlier_publication(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.publish("PR_correction", "a", meta_for("PR_correction", "a"), SENTENCES)
    assert run_dir.is_published("PR_correction", "a")

    failed = {**meta_for("PR_correction", "a", "failed"), "error": "drain_timeout"}
    run_dir.record_failure("PR_correction", "a", failed)

    assert not run_dir.is_published("PR_correction", "a")
    assert not run_dir.sentences_path("PR_correction", "a").exists()
    assert json.loads(run_dir.meta_path("PR_correction", "a").read_text(encoding="utf-8")) == failed
    assert [m["status"] for m in run_dir.metas()] == ["failed"]


def test_metas_lists_every_attempted_sample_in_a_stable_order(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.publish("RTD_counting", "b", meta_for("RTD_counting", "b"), SENTENCES)
    run_dir.record_failure("PR_correction", "z", meta_for("PR_correction", "z", "failed"))
    run_dir.publish("RTD_counting", "a", meta_for("RTD_counting", "a"), [])
    assert [(m["split"], m["id"]) for m in run_dir.metas()] == [
        ("PR_correction", "z"),
        ("RTD_counting", "a"),
        ("RTD_counting", "b"),
    ]


# --- resume, in process against the real server --------------------------------------------------


def resume_config(url: str) -> RunConfig:
    return RunConfig(
        url=url,
        pace="as-fast-as-possible",
        concurrency=3,
        bounds=SessionBounds(settle_s=0.3, drain_timeout_s=10.0, close_timeout_s=2.0),
        keep_audio=False,
    )


async def run_all(
    url: str, run_dir: RunDir, samples: list[Sample], *, overwrite: bool = False
) -> dict[str, SampleResult]:
    results = await BenchmarkRunner(resume_config(url), run_dir).run(samples, overwrite=overwrite)
    return {r.id: r for r in results}


def inode(path: Path) -> int:
    return path.stat().st_ino


async def test_resume_skips_published_samples_redoes_the_rest_and_overwrite_redoes_everything(
    tmp_path: Path,
) -> None:
    a, b, c = (clip_sample(name, 1.0) for name in ("a", "b", "c"))
    run_dir = RunDir(tmp_path / "run")
    plugin = load_model("scripted", SCRIPTED_ARGS)
    async with EmbeddedServer(plugin, ServerConfig(max_sessions=8)) as server:
        first = await run_all(server.url, run_dir, [a, b])
        assert {r.status for r in first.values()} == {"published"}
        published = {s.id: run_dir.sentences_path(s.split, s.id) for s in (a, b)}
        before = {i: (inode(p), p.read_bytes()) for i, p in published.items()}
        meta_a = run_dir.meta_path(a.split, a.id).read_bytes()
        # A failed sample (metadata only) and a killed run's temp file are in the folder too.
        run_dir.record_failure(c.split, c.id, {**meta_for(c.split, c.id, "failed"), "error": "drain_timeout"})
        stale = run_dir.records / c.split / ".c.json.killed.tmp"
        stale.write_text("[", encoding="utf-8")

        resumed = await run_all(server.url, run_dir, [a, b, c])

        assert {i: r.status for i, r in resumed.items()} == {"a": "skipped", "b": "skipped", "c": "published"}
        assert {i: (inode(p), p.read_bytes()) for i, p in published.items()} == before
        assert run_dir.meta_path(a.split, a.id).read_bytes() == meta_a
        assert run_dir.is_published(c.split, c.id) and not stale.exists()

        overwritten = await run_all(server.url, run_dir, [a, b, c], overwrite=True)

    assert {r.status for r in overwritten.values()} == {"published"}
    assert all(inode(p) != before[i][0] for i, p in published.items())  # rewritten by rename, not skipped
    metas = list(run_dir.metas())
    assert len(metas) == 3 and {m["status"] for m in metas} == {"published"}
    assert all(m["retry_count"] == 0 and m["response_done"] for m in metas)
    assert temporaries(run_dir.root) == []


# --- resume after SIGKILL, a real `duplexkit bench` subprocess ------------------------------------


def published_sentences(out: Path) -> dict[str, Path]:
    """An Omni-DuplexEval run's sentences files: `<split>/<id>.json`, where its official scorer reads them."""
    return {
        f"{p.parent.name}/{p.stem}": p
        for p in out.glob("*/*.json")
        if p.parent.name not in artifacts.RESERVED_SPLITS
    }


def test_a_run_killed_mid_way_resumes_to_every_sample_published_exactly_once(tmp_path: Path) -> None:
    manifest = write_jsonl_dataset(tmp_path / "data", 6, seconds=1.5)
    keys = {s.key for s in load_dataset(str(manifest), Selection()).samples}
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "duplexkit", "bench",
        "--dataset", str(manifest), "--out", str(out),
        "--pace", "as-fast-as-possible", "--concurrency", "2", "--settle", "0.3", "--model", "scripted",
        *(arg for key, value in SCRIPTED_ARGS.items() for arg in ("--model-arg", f"{key}={value}")),
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200"}

    with (tmp_path / "first.log").open("wb") as log:
        first = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 60
            while not published_sentences(out):
                assert first.poll() is None, "the first run ended before publishing anything"
                assert time.monotonic() < deadline, "the first run published nothing in 60 s"
                time.sleep(0.02)
            first.send_signal(signal.SIGKILL)
        finally:
            first.wait(10)
    assert first.returncode == -signal.SIGKILL
    killed_with = published_sentences(out)
    assert 0 < len(killed_with) < len(keys), "the kill did not land mid-way"
    before = {key: (inode(p), p.read_bytes()) for key, p in killed_with.items()}
    metas_before = {key: out.joinpath("records", f"{key}.meta.json").read_bytes() for key in killed_with}

    rerun = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"skipped (already published) {len(killed_with)}" in rerun.stdout
    assert set(published_sentences(out)) == keys
    for key in keys:  # exactly once: one sentences file and one published meta per sample, nothing else
        split, sample_id = key.split("/")
        assert [p.name for p in (out / split).glob(f"{sample_id}.*")] == [f"{sample_id}.json"]
        assert [p.name for p in (out / "records" / split).glob(f"{sample_id}.*")] == [
            f"{sample_id}.meta.json"
        ]
        meta = json.loads((out / "records" / f"{key}.meta.json").read_text(encoding="utf-8"))
        assert (meta["split"], meta["id"], meta["status"]) == (split, sample_id, "published")
    # The rerun skipped what the first run had published: same files (same inodes), same bytes.
    assert {
        key: (inode(p), p.read_bytes()) for key, p in published_sentences(out).items() if key in before
    } == before
    assert {
        key: out.joinpath("records", f"{key}.meta.json").read_bytes() for key in killed_with
    } == metas_before
    assert temporaries(out) == []
    run_info = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert run_info["finished_at"] is not None
    assert run_info["counts"] == {"attempted": len(keys), "published": len(keys), "failed": 0, "retried": 0}
    assert run_info["dataset"]["samples"] == len(keys)
    assert (out / "metrics.json").is_file()
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["ttfp_ms"]
