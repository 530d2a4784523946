"""Dataset loading and selection on tiny parquet (HF layout) and JSONL datasets built by the tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from duplexkit.bench.omni_duplex_eval.dataset import (
    PR_SPLITS,
    RTD_SPLITS,
    DatasetError,
    Media,
    Sample,
    Selection,
    load_dataset,
)

MEDIA = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
ALL = Selection()


def row(sample_id: str, split: str | None = None, **fields: Any) -> dict[str, Any]:
    """A dataset row whose media bytes name the row, so tests can tell which bytes came back."""
    base: dict[str, Any] = {
        "id": sample_id,
        "question_text": f"question {sample_id}",
        "answer1": f"answer {sample_id}",
        "answer2": None,
        "reminder1": None,
        "reminder2": None,
        "video_type": "test",
        "video_duration": 8.0,
        "video": {"bytes": f"video {sample_id}".encode(), "path": f"{sample_id}.mp4"},
        "question_audio": {"bytes": f"audio {sample_id}".encode(), "path": f"{sample_id}.wav"},
    }
    if split is not None:
        base["split"] = split
    base.update(fields)
    return base


def write_parquet(path: Path, rows: list[dict[str, Any]], row_group_size: int | None = None) -> Path:
    """A parquet file in the Hugging Face layout: media columns are {bytes, path} structs."""
    schema = [
        ("id", pa.string()),
        ("question_text", pa.string()),
        ("answer1", pa.string()),
        ("answer2", pa.string()),
        ("reminder1", pa.float64()),
        ("reminder2", pa.float64()),
        ("video_type", pa.string()),
        ("video_duration", pa.float64()),
        ("video", MEDIA),
        ("question_audio", MEDIA),
    ]
    if any("split" in r for r in rows):
        schema.append(("split", pa.string()))
    table = pa.Table.from_pylist(rows, schema=pa.schema(schema))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def write_manifest(root: Path, rows: list[dict[str, Any]]) -> Path:
    """A JSONL manifest whose media are small files next to it."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for index, r in enumerate(rows):
        r = dict(r)
        for name in ("video", "question_audio"):
            value = r.get(name)
            if isinstance(value, dict):
                rel = f"media/{index}-{name}.bin"
                (root / rel).parent.mkdir(exist_ok=True)
                (root / rel).write_bytes(value["bytes"])
                r[name] = rel
        lines.append(json.dumps(r))
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return manifest


@pytest.fixture
def per_split_dir(tmp_path: Path) -> Path:
    """An HF-layout directory with one file per split, as `huggingface-cli download --local-dir` leaves it."""
    root = tmp_path / "Omni-DuplexEval"
    write_parquet(root / "data" / "PR_event_reminder-00000-of-00001.parquet", [row("e1", reminder1=4.0)])
    write_parquet(
        root / "data" / "RTD_counting-00000-of-00001.parquet", [row("c1"), row("c2")], row_group_size=1
    )
    write_parquet(root / "data" / "PR_correction-00000-of-00001.parquet", [row("k1")])
    (root / "README.md").write_text("---\nconfigs: []\n---\n")
    return root


def test_hf_layout_directory_keeps_each_file_split_and_reads_media_bytes(per_split_dir: Path) -> None:
    ds = load_dataset(str(per_split_dir), ALL)
    assert [s.key for s in ds.samples] == [
        "RTD_counting/c1",
        "RTD_counting/c2",
        "PR_correction/k1",
        "PR_event_reminder/e1",
    ]
    c2, k1, e1 = ds.samples[1], ds.samples[2], ds.samples[3]
    assert (c2.family, c2.task) == ("rtd", "RTD_counting")
    assert (k1.family, k1.task) == ("pr", "correction")
    assert (e1.task, e1.reminder1, e1.reminder2, e1.video_duration) == ("event_reminder", 4.0, None, 8.0)
    assert c2.video_bytes() == b"video c2"  # second row group of its file
    assert c2.question_audio_bytes() == b"audio c2"
    assert c2.ground_truth is None


def test_a_single_parquet_file_and_a_glob_load(per_split_dir: Path) -> None:
    one = load_dataset(str(per_split_dir / "data" / "RTD_counting-00000-of-00001.parquet"), ALL)
    assert [s.key for s in one.samples] == ["RTD_counting/c1", "RTD_counting/c2"]
    several = load_dataset(str(per_split_dir / "data" / "PR_*.parquet"), ALL)
    assert [s.split for s in several.samples] == ["PR_correction", "PR_event_reminder"]


def test_a_collapsed_train_split_keeps_each_rows_own_split(tmp_path: Path) -> None:
    path = write_parquet(
        tmp_path / "train-00000-of-00001.parquet",
        [row("p1", "PR_post_event_reminder"), row("w1", "RTD_world_knowledge"), row("o1", "RTD_OCR")],
    )
    ds = load_dataset(str(path), ALL)
    assert [s.key for s in ds.samples] == [
        "RTD_world_knowledge/w1",
        "RTD_OCR/o1",
        "PR_post_event_reminder/p1",
    ]
    assert ds.samples[2].task == "post_event_reminder"
    only = load_dataset(str(path), Selection(splits=("RTD_OCR",)))
    assert [s.key for s in only.samples] == ["RTD_OCR/o1"]


def test_a_generic_split_column_defers_to_the_file_name(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "RTD_Omni-00000-of-00001.parquet", [row("a", "train")])
    assert [s.key for s in load_dataset(str(path), ALL).samples] == ["RTD_Omni/a"]


def test_rows_without_any_split_identity_are_an_error(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "train-00000-of-00001.parquet", [row("a")])
    with pytest.raises(DatasetError, match="'split' column"):
        load_dataset(str(path), ALL)


def test_a_struct_cell_without_bytes_reads_the_file_its_path_names(tmp_path: Path) -> None:
    (tmp_path / "clip.mp4").write_bytes(b"from disk")
    path = write_parquet(
        tmp_path / "RTD_Omni-00000-of-00001.parquet",
        [row("a", video={"bytes": None, "path": "clip.mp4"}), row("b", video=None)],
    )
    a, b = load_dataset(str(path), ALL).samples
    assert a.video_bytes() == b"from disk"
    assert b.video is None and b.video_bytes() is None


def test_a_mistyped_split_is_an_error_listing_the_valid_ones(per_split_dir: Path) -> None:
    with pytest.raises(DatasetError) as excinfo:
        load_dataset(str(per_split_dir), Selection(splits=("RTD_countng",)))
    message = str(excinfo.value)
    assert "unknown split 'RTD_countng'" in message
    assert "RTD_counting, PR_correction, PR_event_reminder" in message
    assert "did you mean 'RTD_counting'" in message
    with pytest.raises(DatasetError, match="does not contain"):
        load_dataset(str(per_split_dir), Selection(splits=("RTD_Omni",)))


def test_split_names_match_case_insensitively(per_split_dir: Path) -> None:
    ds = load_dataset(str(per_split_dir), Selection(splits=("rtd_counting",)))
    assert {s.split for s in ds.samples} == {"RTD_counting"}


def test_family_filter(per_split_dir: Path) -> None:
    assert {s.family for s in load_dataset(str(per_split_dir), Selection(family="pr")).samples} == {"pr"}
    rtd = load_dataset(str(per_split_dir), Selection(family="rtd"))
    assert [s.id for s in rtd.samples] == ["c1", "c2"]
    with pytest.raises(DatasetError, match="matches no samples"):
        load_dataset(str(per_split_dir), Selection(splits=("RTD_counting",), family="pr"))


def test_ids_accept_bare_and_split_qualified_forms(tmp_path: Path) -> None:
    manifest = write_manifest(
        tmp_path, [row("a", "RTD_counting"), row("b", "RTD_counting"), row("a", "PR_correction")]
    )
    bare = load_dataset(str(manifest), Selection(ids=("a",)))
    assert [s.key for s in bare.samples] == ["RTD_counting/a", "PR_correction/a"]
    qualified = load_dataset(str(manifest), Selection(ids=("PR_correction/a", "b")))
    assert [s.key for s in qualified.samples] == ["RTD_counting/b", "PR_correction/a"]
    excluded = load_dataset(str(manifest), Selection(exclude_ids=("RTD_counting/a",)))
    assert [s.key for s in excluded.samples] == ["RTD_counting/b", "PR_correction/a"]
    with pytest.raises(DatasetError, match=r"ids not in the dataset: 'zz', 'RTD_counting/zz'"):
        load_dataset(str(manifest), Selection(ids=("zz", "RTD_counting/zz")))
    with pytest.raises(DatasetError, match="exclude_ids not in the dataset"):
        load_dataset(str(manifest), Selection(exclude_ids=("RTD_OCR/a",)))


def test_ids_and_exclude_ids_cannot_be_combined(per_split_dir: Path) -> None:
    with pytest.raises(DatasetError, match="cannot be combined"):
        load_dataset(str(per_split_dir), Selection(ids=("c1",), exclude_ids=("c2",)))


def test_selection_fields_must_be_tuples_of_strings(per_split_dir: Path) -> None:
    with pytest.raises(DatasetError, match=r"Selection.splits must be a tuple of strings, got 'RTD_OCR'"):
        load_dataset(str(per_split_dir), Selection(splits="RTD_OCR"))  # type: ignore[arg-type]


def test_exclusion_applies_before_the_limit(per_split_dir: Path) -> None:
    ds = load_dataset(str(per_split_dir), Selection(exclude_ids=("c1",), limit=2))
    assert [s.key for s in ds.samples] == ["RTD_counting/c2", "PR_correction/k1"]
    with pytest.raises(DatasetError, match="limit must be a positive integer"):
        load_dataset(str(per_split_dir), Selection(limit=0))


@pytest.mark.parametrize("bad_id", ["", ".", "..", "a/b", "a\\b", "a\x00b", "x" * 201])
def test_unsafe_ids_are_rejected(tmp_path: Path, bad_id: str) -> None:
    manifest = write_manifest(tmp_path, [row("fine", "RTD_OCR"), row(bad_id, "RTD_OCR")])
    with pytest.raises(DatasetError, match="sample id"):
        load_dataset(str(manifest), ALL)


@pytest.mark.parametrize(("first", "second"), [("x", "x.meta"), ("x", "x.json"), ("Clip", "clip")])
def test_ids_whose_artifacts_would_clash_are_rejected(tmp_path: Path, first: str, second: str) -> None:
    manifest = write_manifest(tmp_path, [row(first, "RTD_OCR"), row(second, "RTD_OCR")])
    with pytest.raises(DatasetError, match="would both write the artifact"):
        load_dataset(str(manifest), ALL)
    # the same ids in different splits never share a folder
    other = write_manifest(tmp_path / "other", [row(first, "RTD_OCR"), row(second, "RTD_Omni")])
    assert len(load_dataset(str(other), ALL).samples) == 2


def test_a_duplicated_split_and_id_is_an_error(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, [row("a", "RTD_OCR"), row("a", "RTD_OCR")])
    with pytest.raises(DatasetError, match="duplicated sample RTD_OCR/a"):
        load_dataset(str(manifest), ALL)


def test_jsonl_manifest_media_are_relative_to_the_manifest(tmp_path: Path) -> None:
    manifest = write_manifest(
        tmp_path / "set",
        [
            row(
                "a",
                "PR_event_reminder",
                reminder1="3.5",
                reminder2=6,
                ground_truth={"events": [{"time": 3.5}]},
            )
        ],
    )
    (sample,) = load_dataset(str(manifest), ALL).samples
    assert sample.video_bytes() == b"video a"
    assert sample.question_audio_bytes() == b"audio a"
    assert (sample.reminder1, sample.reminder2) == (3.5, 6.0)
    assert sample.ground_truth == {"events": [{"time": 3.5}]}


def test_manifest_problems_are_reported_with_their_location(tmp_path: Path) -> None:
    no_audio = write_manifest(tmp_path / "a", [row("a", "RTD_OCR", question_audio=None)])
    with pytest.raises(DatasetError, match=r"manifest.jsonl:1: row RTD_OCR/a has no question_audio"):
        load_dataset(str(no_audio), ALL)
    missing = tmp_path / "b" / "manifest.jsonl"
    missing.parent.mkdir()
    missing.write_text(json.dumps({**row("a", "RTD_OCR"), "video": "nope.mp4", "question_audio": "nope.wav"}))
    with pytest.raises(DatasetError, match=r"nope\.mp4 does not exist"):
        load_dataset(str(missing), ALL)
    bad_number = write_manifest(tmp_path / "c", [row("a", "PR_event_reminder", reminder1="soon")])
    with pytest.raises(DatasetError, match="'reminder1' must be a number"):
        load_dataset(str(bad_number), ALL)


def test_the_fingerprint_is_stable_and_tracks_content_not_location(tmp_path: Path) -> None:
    rows = [row("a", "RTD_OCR"), row("b", "PR_correction")]
    first = load_dataset(str(write_manifest(tmp_path / "one", rows)), ALL)
    moved = load_dataset(str(write_manifest(tmp_path / "two", rows)), ALL)
    assert first.fingerprint == moved.fingerprint
    assert first.source != moved.source
    edited = load_dataset(
        str(write_manifest(tmp_path / "three", [row("a", "RTD_OCR", answer1="changed"), rows[1]])), ALL
    )
    assert edited.fingerprint != first.fingerprint
    other_media = load_dataset(
        str(write_manifest(tmp_path / "four", [row("a", "RTD_OCR", video={"bytes": b"new"}), rows[1]])), ALL
    )
    assert other_media.fingerprint != first.fingerprint
    subset = load_dataset(str(write_manifest(tmp_path / "one", rows)), Selection(limit=1))
    assert subset.fingerprint != first.fingerprint


def fake_hf_cache(home: Path, per_split_dir: Path, revision: str = "0123abcd") -> Path:
    repo = home / "hub" / "datasets--Hothan--Omni-DuplexEval"
    shutil.copytree(per_split_dir, repo / "snapshots" / revision)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    return repo


@pytest.fixture
def hf_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def test_a_hub_id_loads_from_the_local_hf_cache(hf_env: Path, per_split_dir: Path) -> None:
    fake_hf_cache(hf_env, per_split_dir)
    ds = load_dataset("Hothan/Omni-DuplexEval", Selection(splits=("PR_event_reminder",)))
    assert ds.source == "Hothan/Omni-DuplexEval@0123abcd"
    assert [s.key for s in ds.samples] == ["PR_event_reminder/e1"]
    assert ds.samples[0].video_bytes() == b"video e1"
    assert (
        ds.fingerprint
        == load_dataset(str(per_split_dir), Selection(splits=("PR_event_reminder",))).fingerprint
    )


def test_a_hub_revision_can_be_named(hf_env: Path, per_split_dir: Path) -> None:
    fake_hf_cache(hf_env, per_split_dir)
    pinned = load_dataset("Hothan/Omni-DuplexEval@0123abcd", ALL)
    assert load_dataset("Hothan/Omni-DuplexEval@main", ALL).fingerprint == pinned.fingerprint
    with pytest.raises(DatasetError, match=r"Hothan/Omni-DuplexEval@feedbeef is not in the local"):
        load_dataset("Hothan/Omni-DuplexEval@feedbeef", ALL)


def test_the_source_loads_the_same_samples_again(
    per_split_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(per_split_dir)
    for spec in ("data", "data/PR_*.parquet", "data/RTD_counting-00000-of-00001.parquet"):
        first = load_dataset(spec, ALL)
        assert Path(first.source).is_absolute()
        assert load_dataset(first.source, ALL) == first


def test_a_hub_id_missing_from_the_cache_says_how_to_provide_it(hf_env: Path) -> None:
    with pytest.raises(DatasetError) as excinfo:
        load_dataset("Hothan/Omni-DuplexEval", ALL)
    message = str(excinfo.value)
    assert "not in the local Hugging Face cache" in message
    assert str(hf_env / "hub" / "datasets--Hothan--Omni-DuplexEval") in message
    assert "never downloads" in message
    assert "huggingface-cli download --repo-type dataset Hothan/Omni-DuplexEval" in message


def test_an_unknown_spec_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(str(tmp_path / "nowhere.parquet"), ALL)
    with pytest.raises(DatasetError, match=r"no \.parquet files under"):
        load_dataset(str(tmp_path), ALL)


def test_samples_built_directly_behave_like_loaded_ones() -> None:
    sample = Sample(split="PR_post_event_reminder", id="x", question_text="q", reminder1=2.0)
    assert (sample.family, sample.task, sample.key) == (
        "pr",
        "post_event_reminder",
        "PR_post_event_reminder/x",
    )
    assert sample.video_bytes() is None
    with pytest.raises(DatasetError, match="no question audio"):
        sample.question_audio_bytes()
    with_audio = Sample(split="RTD_OCR", id="y", question_text="q", question_audio=Media.from_bytes(b"wav"))
    assert with_audio.question_audio_bytes() == b"wav"
    assert with_audio.question_audio == Media.from_bytes(b"wav", label="another label")


def test_the_split_constants_name_the_nine_tasks() -> None:
    assert len(RTD_SPLITS) == 6 and len(PR_SPLITS) == 3
    assert all(s.startswith("RTD_") for s in RTD_SPLITS) and all(s.startswith("PR_") for s in PR_SPLITS)
