"""Sharded runs and merging: shard membership is stable and exact, merges refuse runs not measured alike,
never lose or duplicate a sample, and the merged folder scores and reports like any run.

The end-to-end test runs the real `duplexkit bench --shard` twice (built-in dataset, embedded scripted
server), merges the two folders with `duplexkit merge`, then scores and reports the merged folder.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from duplexkit.bench.artifacts import RunDir, write_json_atomic
from duplexkit.bench.merge import MergeCode, MergeError, merge_runs
from duplexkit.bench.shard import Shard, ShardError, shard_of
from duplexkit.cli import main

IDS = [("RTD_counting" if i % 2 else "PR_correction", f"clip_{i:03d}") for i in range(400)]


# --- shards ----------------------------------------------------------------------------------------


def test_every_sample_lands_in_exactly_one_shard_and_the_shards_are_balanced() -> None:
    shards = [Shard(i, 4) for i in range(1, 5)]
    owners = Counter(sum(s.holds(split, sid) for s in shards) for split, sid in IDS)
    assert owners == {1: len(IDS)}
    sizes = [sum(s.holds(split, sid) for split, sid in IDS) for s in shards]
    assert sum(sizes) == len(IDS) and min(sizes) > 0.15 * len(IDS)


def test_membership_depends_on_the_sample_not_on_its_position_in_the_selection() -> None:
    class S:
        def __init__(self, split: str, sample_id: str) -> None:
            self.split, self.id = split, sample_id

    shard = Shard(2, 3)
    before = {(s.split, s.id) for s in shard.select(S(*key) for key in IDS)}
    changed = [*IDS[50:], ("RTD_counting", "a_new_one")]  # samples removed, one added, order shuffled
    random.Random(0).shuffle(changed)
    after = {(s.split, s.id) for s in shard.select(S(*key) for key in changed)}
    assert after - {("RTD_counting", "a_new_one")} == before & set(changed)
    # the split is part of the key: the same id in two splits is two samples
    assert len({shard_of(split, "clip_000", 97) for split in ("A", "B", "C", "D", "E", "F")}) > 1


def test_the_hash_is_pinned_so_shards_of_old_runs_keep_their_samples() -> None:
    assert [shard_of("RTD_counting", f"clip_{i:03d}", 4) for i in range(8)] == [2, 1, 2, 3, 2, 2, 1, 1]


@pytest.mark.parametrize("text", ["0/4", "5/4", "1", "a/b", "1/0", "-1/2", "1/2/3"])
def test_a_malformed_shard_is_refused_with_its_rule(text: str) -> None:
    with pytest.raises(ShardError, match="i/n"):
        Shard.parse(text)


def test_a_bad_shard_on_the_command_line_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--dataset", "builtin", "--out", str(tmp_path / "r"), "--shard", "3/2"]) == 2
    assert "1 <= i <= n" in capsys.readouterr().err


# --- merge refusals (hand-built run folders) -------------------------------------------------------


def make_run(
    root: Path,
    samples: dict[tuple[str, str], str],
    *,
    fingerprint: str = "fp-1",
    pace: str = "realtime",
    protocol: str | None = None,
    placement: str | None = None,
    shard: tuple[int, int] | None = None,
    url: str = "ws://a:8000/v1/realtime",
    model: str | None = "m",
    embedded: bool = False,
    selected: int | None = None,
    model_args: dict[str, str] | None = None,
    server_model: str | None = None,
    health_model: str | None = None,
    identity: str | None = None,
) -> Path:
    """A run folder whose samples have the given status (`published` gets a sentences file); `selected`:
    how many samples its selection (shard) held, default all of `samples`; `server_model`: what each
    sample's `session.created` named; `health_model`: what the server's `/healthz` named."""
    config: dict[str, Any] = {"url": url, "pace": pace, "fps": 1.0, "chunk_ms": 200}
    if protocol is not None:
        config["protocol"] = protocol
    if placement is not None:
        config["placement"] = placement
    write_json_atomic(
        root / "run.json",
        {
            "started_at": "2026-12-01T08:00:00+00:00",
            "finished_at": "2026-12-01T09:00:00+00:00",
            "config": config,
            "dataset": {
                "source": "builtin",
                "fingerprint": fingerprint,
                "selection": {},
                "shard": None if shard is None else {"index": shard[0], "count": shard[1]},
                "samples": len(samples) if selected is None else selected,
            },
            "server": {
                "url": url,
                "urls": [url],
                "model": model,
                "embedded": embedded,
                "model_args": model_args,
                "pool": [{"url": url, "max_sessions": 4, "model": health_model, "model_identity": identity}],
            },
        },
    )
    run = RunDir(root)
    for (split, sample_id), status in samples.items():
        meta = {
            "split": split,
            "id": sample_id,
            "status": status,
            "error": None if status == "published" else "drain_timeout",
            "server_url": url,
            "server_model": server_model,
            "server_model_identity": identity,
            "finished_at": f"2026-12-01T08:{len(str(root)) % 60:02d}:00+00:00",
        }
        if status == "published":
            run.publish(split, sample_id, meta, [{"sentence": f"{sample_id} @ {url}", "start": 1, "end": 2}])
            (run.sample_dir(split, sample_id)).mkdir(parents=True, exist_ok=True)
            (run.sample_dir(split, sample_id) / "output.wav").write_bytes(b"RIFF" + url.encode())
        else:
            run.record_failure(split, sample_id, meta)
    return root


@pytest.mark.parametrize(
    ("other", "code"),
    [
        ({"fingerprint": "fp-2"}, MergeCode.DATASET_MISMATCH),
        ({"pace": "as-fast-as-possible"}, MergeCode.PACE_MISMATCH),
        ({"protocol": "openai-realtime"}, MergeCode.PROTOCOL_MISMATCH),
        ({"placement": "arrival"}, MergeCode.PLACEMENT_MISMATCH),
        ({"model": "other-model"}, MergeCode.MODEL_MISMATCH),
        ({"model": None}, MergeCode.MODEL_MISMATCH),
        ({"embedded": True}, MergeCode.SERVER_MISMATCH),
        ({"model_args": {"hf_repo": "other/checkpoint"}}, MergeCode.MODEL_ARGS_MISMATCH),
        ({"server_model": "other-model"}, MergeCode.REPORTED_MODEL_MISMATCH),
        ({"health_model": "other-model"}, MergeCode.REPORTED_MODEL_MISMATCH),
    ],
)
def test_runs_not_measured_alike_are_refused_with_a_code_and_nothing_is_written(
    tmp_path: Path, other: dict[str, Any], code: MergeCode
) -> None:
    a = make_run(tmp_path / "a", {("S", "1"): "published"}, server_model="m", health_model="m")
    b = make_run(tmp_path / "b", {("S", "2"): "published"}, **{"server_model": "m", **other})
    with pytest.raises(MergeError) as refused:
        merge_runs([a, b], tmp_path / "merged")
    assert refused.value.code is code and str(refused.value).startswith(code.value)
    assert not (tmp_path / "merged").exists() and not list(tmp_path.glob(".merged*"))


def test_runs_of_two_checkpoints_one_plugin_serves_are_refused_and_named(tmp_path: Path) -> None:
    """Both servers say `moshi` (`session.model`, `/healthz` `model`) whatever checkpoint they load: the
    old merge took a Moshi run and a PersonaPlex run for one model (`complete: true`). Their identities
    (a content fingerprint of the checkpoint) differ, and the refusal names them."""
    moshi, personaplex = "moshi@sha256:1111111111111111", "moshi@sha256:2222222222222222"
    same = {"server_model": "moshi", "health_model": "moshi"}
    a = make_run(tmp_path / "a", {("S", "1"): "published"}, identity=moshi, **same)
    b = make_run(tmp_path / "b", {("S", "2"): "published"}, identity=personaplex, **same)
    with pytest.raises(MergeError) as refused:
        merge_runs([a, b], tmp_path / "merged")
    assert refused.value.code is MergeCode.REPORTED_MODEL_MISMATCH
    assert moshi in str(refused.value) and personaplex in str(refused.value)
    c = make_run(
        tmp_path / "c", {("S", "3"): "published"}, identity=moshi, url="ws://c:8000/v1/realtime", **same
    )
    merged = merge_runs([a, c], tmp_path / "merged")  # one checkpoint on two machines merges
    run = json.loads((tmp_path / "merged" / "run.json").read_text())
    assert merged.completeness["complete"] is True and run["server"]["model_identities"] == [moshi]


def test_a_sample_published_twice_is_refused_and_named(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", {("S", "1"): "published", ("S", "2"): "published"})
    b = make_run(tmp_path / "b", {("S", "2"): "published"}, url="ws://b:8000/v1/realtime")
    with pytest.raises(MergeError, match="S/2") as refused:
        merge_runs([a, b], tmp_path / "merged")
    assert refused.value.code is MergeCode.DUPLICATE_SAMPLE


def test_merging_into_a_folder_that_holds_something_is_refused(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", {("S", "1"): "published"})
    with pytest.raises(MergeError) as refused:
        merge_runs([a], a)
    assert refused.value.code is MergeCode.OUT_EXISTS


def test_a_publication_replaces_a_failure_and_every_sample_lands_once(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", {("S", "1"): "published", ("S", "2"): "failed", ("T", "3"): "failed"})
    b = make_run(
        tmp_path / "b", {("S", "2"): "published", ("T", "4"): "published"}, url="ws://b:8000/v1/realtime"
    )
    result = merge_runs([a, b], tmp_path / "merged")

    merged = RunDir.open(result.out)
    metas = {(m["split"], m["id"]): m for m in merged.metas()}
    assert set(metas) == {("S", "1"), ("S", "2"), ("T", "3"), ("T", "4")}
    assert (
        metas[("S", "2")]["status"] == "published"
        and metas[("S", "2")]["server_url"] == "ws://b:8000/v1/realtime"
    )
    assert (
        json.loads(merged.sentences_path("S", "2").read_text())[0]["sentence"]
        == "2 @ ws://b:8000/v1/realtime"
    )
    assert (merged.sample_dir("S", "2") / "output.wav").read_bytes() == b"RIFFws://b:8000/v1/realtime"
    assert not merged.is_published("T", "3") and metas[("T", "3")]["status"] == "failed"
    run = json.loads((result.out / "run.json").read_text())
    assert run["counts"] == {"attempted": 4, "published": 3, "failed": 1, "retried": 0}
    assert run["server"]["urls"] == ["ws://a:8000/v1/realtime", "ws://b:8000/v1/realtime"]
    assert [p["samples_taken"] for p in run["merged_from"]] == [2, 2]


def test_shards_record_which_parts_the_merge_holds(tmp_path: Path) -> None:
    one = make_run(tmp_path / "1", {("S", "a"): "published"}, shard=(1, 3))
    three = make_run(tmp_path / "3", {("S", "b"): "published"}, shard=(3, 3))
    assert merge_runs([one, three], tmp_path / "m").shards == {
        "parts": ["1/3", "3/3"],
        "complete": False,
        "unattempted": 0,
        "selected": 2,
    }
    two = make_run(tmp_path / "2", {("S", "c"): "published"}, shard=(2, 3))
    full = merge_runs([one, two, three], tmp_path / "full")
    assert full.shards == {"parts": ["1/3", "2/3", "3/3"], "complete": True, "unattempted": 0, "selected": 3}
    assert full.completeness == {"selected": 3, "attempted": 3, "complete": True}
    assert json.loads((full.out / "run.json").read_text())["dataset"]["samples"] == 3


def test_a_shard_stopped_before_every_sample_was_attempted_is_not_complete(tmp_path: Path) -> None:
    # Shard 2/2 selected three samples; the run was stopped after attempting two (one failed).
    one = make_run(tmp_path / "1", {("S", "a"): "published"}, shard=(1, 2))
    two = make_run(tmp_path / "2", {("S", "b"): "published", ("S", "c"): "failed"}, shard=(2, 2), selected=3)
    merged = merge_runs([one, two], tmp_path / "m")
    assert merged.shards == {"parts": ["1/2", "2/2"], "complete": False, "unattempted": 1, "selected": 4}
    assert merged.completeness == {"selected": 4, "attempted": 3, "complete": False}
    assert json.loads((merged.out / "run.json").read_text())["dataset"]["shards"]["complete"] is False
    # The missing sample attempted by a rerun of the same shard completes it.
    rerun = make_run(tmp_path / "2b", {("S", "d"): "failed"}, shard=(2, 2), selected=3)
    assert merge_runs([one, two, rerun], tmp_path / "m2").shards == {
        "parts": ["1/2", "2/2"],
        "complete": True,
        "unattempted": 0,
        "selected": 4,
    }


def test_whole_runs_keep_their_selected_count_and_say_whether_every_sample_was_attempted(
    tmp_path: Path,
) -> None:
    # Two pool runs of one five-sample selection, stopped early: three samples attempted in all.
    a = make_run(tmp_path / "a", {("S", "1"): "published", ("S", "2"): "failed"}, selected=5)
    b = make_run(tmp_path / "b", {("S", "3"): "published"}, selected=5)
    merged = merge_runs([a, b], tmp_path / "m")
    assert merged.shards is None
    assert merged.completeness == {"selected": 5, "attempted": 3, "complete": False}
    run = json.loads((merged.out / "run.json").read_text())
    assert run["dataset"]["samples"] == 5 and run["completeness"]["complete"] is False
    c = make_run(tmp_path / "c", {("S", "4"): "failed", ("S", "5"): "published"}, selected=5)
    assert merge_runs([a, b, c], tmp_path / "m2").completeness == {
        "selected": 5,
        "attempted": 5,
        "complete": True,
    }


def test_servers_that_named_no_model_are_compared_by_the_rest(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", {("S", "1"): "published"}, server_model="m")
    b = make_run(tmp_path / "b", {("S", "2"): "published"})  # a peer's server: no model named anywhere
    assert merge_runs([a, b], tmp_path / "m").samples == 2


# --- end to end: shards → merge → score → report ---------------------------------------------------

FAST = ["--model", "scripted", "--pace", "as-fast-as-possible", "--settle", "0.3", "--limit", "6"]


def test_two_shards_merge_into_the_whole_run_which_scores_and_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shards = [tmp_path / "shard1", tmp_path / "shard2"]
    for i, out in enumerate(shards, start=1):
        assert main(["bench", "--dataset", "builtin", "--out", str(out), *FAST, "--shard", f"{i}/2"]) == 0
    whole = tmp_path / "whole"
    assert main(["bench", "--dataset", "builtin", "--out", str(whole), *FAST]) == 0
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, shards), "--out", str(merged)]) == 0
    assert "shards 1/2, 2/2" in capsys.readouterr().out

    def keys(root: Path) -> list[tuple[str, str]]:
        return sorted((m["split"], m["id"]) for m in RunDir(root).metas())

    per_shard = [keys(s) for s in shards]
    assert per_shard[0] and per_shard[1] and not set(per_shard[0]) & set(per_shard[1])
    assert keys(merged) == keys(whole) == sorted(per_shard[0] + per_shard[1])
    assert main(["score", str(merged), "--judge", "builtin", "--allow-invalid-clock"]) == 0
    summary = json.loads((merged / "scores" / "summary.json").read_text())
    assert summary["coverage"]["total"] == 6 and summary["coverage"]["errors"] == 0
    assert main(["report", str(merged)]) == 0
    assert (merged / "report.html").stat().st_size > 0
    # resuming a shard's folder as another shard is refused
    assert main(["bench", "--dataset", "builtin", "--out", str(shards[0]), *FAST, "--shard", "2/2"]) == 2
    assert "another shard" in capsys.readouterr().err


def test_a_merged_omniinteract_run_gets_its_official_run_files(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a", {("1q1a", "0001"): "published"}, shard=(1, 2))
    b = make_run(tmp_path / "b", {("1q1a", "0002"): "published"}, shard=(2, 2))
    for run in (a, b):
        data = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**data, "benchmark": "omniinteract"}))
    (RunDir(b).sample_dir("1q1a", "0002") / ".done").write_bytes(b"")
    (RunDir(b).sample_dir("1q1a", "0002") / "wav_transcript.json").write_text('{"chunks": []}')
    merged = merge_runs([a, b], tmp_path / "m").out
    batch = json.loads((merged / "batch_summary.json").read_text())
    assert (batch["total"], batch["success"], batch["incomplete"]) == (2, 1, 1)
    assert [r["status"] for r in batch["results"]] == ["incomplete", "ok"]
    # every path the official files name exists after the merge (they were once inside the staging folder)
    assert all(
        Path(r["output_dir"]).is_dir() and Path(r["output_dir"]).is_relative_to(merged.resolve())
        for r in batch["results"]
    )
    (row,) = [json.loads(line) for line in (merged / "manifest.jsonl").read_text().splitlines()]
    assert row["sample_id"] == "1q1a__0002" and Path(row["model_json"]).is_file()
    assert Path(row["model_json"]).is_relative_to(merged.resolve())
