"""The built-in dataset: deterministic, both families, and its clips really show what ground_truth says."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import pytest

from duplexkit.bench.omni_duplex_eval import builtin
from duplexkit.bench.omni_duplex_eval.dataset import Dataset, DatasetError, Selection, load_dataset
from duplexkit.client.wavfile import read_wav

Frames = list[tuple[float, npt.NDArray[np.uint8]]]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def dataset(cache: Path) -> Dataset:
    return load_dataset("builtin", Selection(), cache_dir=cache)


@pytest.fixture(scope="module")
def videos(dataset: Dataset) -> dict[str, Frames]:
    """Every clip's decoded frames, by sample key."""
    return {s.key: decode(s.video_bytes() or b"") for s in dataset.samples}


def decode(data: bytes) -> Frames:
    with av.open(io.BytesIO(data), mode="r") as container:
        return [
            (float(f.time or 0.0), np.asarray(f.to_ndarray(format="rgb24"), dtype=np.uint8))
            for f in container.decode(video=0)
        ]


def picture_at(frames: Frames, t: float) -> npt.NDArray[np.uint8]:
    """The frame on screen at time t."""
    return [image for start, image in frames if start <= t + 1e-6][-1]


def test_generation_is_deterministic_and_location_independent(dataset: Dataset, tmp_path: Path) -> None:
    again = load_dataset("builtin", Selection(), cache_dir=tmp_path)
    assert again.fingerprint == dataset.fingerprint
    assert again.source == dataset.source == "builtin"
    for a, b in zip(dataset.samples, again.samples, strict=True):
        assert a.video_bytes() == b.video_bytes()
        assert a.question_audio_bytes() == b.question_audio_bytes()


def test_the_cache_is_reused_and_lives_under_a_versioned_name(dataset: Dataset, cache: Path) -> None:
    marker = builtin.builtin_dir(cache) / "README.md"
    version, voice = builtin.builtin_dir(cache).name.removeprefix("builtin-").split("-")
    assert version == builtin.BUILTIN_VERSION and voice in {"piper", "espeak", "buzz"}
    written = marker.stat().st_mtime_ns
    assert builtin.ensure_builtin(cache) == builtin.builtin_dir(cache)
    assert marker.stat().st_mtime_ns == written
    assert [p.name for p in cache.iterdir()] == [builtin.builtin_dir(cache).name]  # no staging left over


def test_the_generated_folder_is_an_ordinary_hf_layout_dataset(dataset: Dataset, cache: Path) -> None:
    by_folder = load_dataset(str(builtin.builtin_dir(cache)), Selection())
    assert by_folder.fingerprint == dataset.fingerprint
    assert by_folder.source == str(builtin.builtin_dir(cache).resolve())


def test_datasets_load_dataset_reads_the_folder_as_the_official_batch_scorers_do(
    dataset: Dataset, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`batch_*.py` call `datasets.load_dataset(PATH, split=SPLIT)` and read `id`, `question_text`,
    `answer1/2`, `reminder1/2`, `video` (a path, `{bytes, path}` or bytes) per row."""
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    for sample in dataset.samples:
        rows = datasets.load_dataset(str(builtin.builtin_dir(cache)), split=sample.split)
        (row,) = [dict(r) for r in rows if r["id"] == sample.id]
        assert row["question_text"] == sample.question_text
        assert (row["answer1"], row["answer2"]) == (sample.answer1, sample.answer2)
        assert (row["reminder1"], row["reminder2"]) == (sample.reminder1, sample.reminder2)
        assert row["video_duration"] == sample.video_duration
        assert row["video"]["bytes"] == sample.video_bytes() and row["video"]["path"].endswith(".mp4")
        assert row["question_audio"]["bytes"] == sample.question_audio_bytes()


def test_a_damaged_cache_entry_is_reported(tmp_path: Path) -> None:
    builtin.builtin_dir(tmp_path).mkdir(parents=True)
    with pytest.raises(DatasetError, match="delete it to regenerate"):
        builtin.ensure_builtin(tmp_path)


def test_both_families_with_plausible_clips(dataset: Dataset, videos: dict[str, Frames]) -> None:
    families = [s.family for s in dataset.samples]
    assert families.count("rtd") >= 2 and families.count("pr") >= 2
    assert {s.task for s in dataset.samples if s.family == "pr"} == {
        "correction",
        "event_reminder",
        "post_event_reminder",
    }
    voice = (dataset.samples[0].ground_truth or {}).get("voice")
    assert voice in {"cascade:piper", "cascade:espeak-ng", "espeak-ng", "synthetic-buzz"}
    for sample in dataset.samples:
        assert sample.video_duration is not None and 5.0 <= sample.video_duration <= 15.0
        frames = videos[sample.key]
        assert len(frames) == round(sample.video_duration * 10)
        assert frames[0][1].shape == (240, 320, 3)
        for reminder in (sample.reminder1, sample.reminder2):
            assert reminder is None or 0.0 < reminder < sample.video_duration
        assert sample.answer1 and sample.question_text
        assert sample.ground_truth is not None
        assert sample.ground_truth["voice"] == voice


def test_question_audio_spans_the_clip_and_the_question_ends_before_it(
    dataset: Dataset, tmp_path: Path
) -> None:
    for sample in dataset.samples:
        path = tmp_path / f"{sample.id}.wav"
        path.write_bytes(sample.question_audio_bytes())
        audio, rate = read_wav(path)
        assert rate == 16_000
        assert audio.size == round((sample.video_duration or 0) * rate)
        assert sample.ground_truth is not None
        start, end = sample.ground_truth["question_start_s"], sample.ground_truth["question_end_s"]
        assert start < end < (sample.video_duration or 0)
        voiced = np.abs(audio[round(start * rate) : round(end * rate)])
        assert voiced.max() > 0.1
        assert np.all(audio[round(end * rate) + 16 :] == 0)  # end_s is rounded to the millisecond


def test_pr_reminders_match_the_ground_truth_events(dataset: Dataset) -> None:
    for sample in dataset.samples:
        if sample.task in ("event_reminder", "post_event_reminder"):
            assert sample.ground_truth is not None
            times = [e["time"] for e in sample.ground_truth["events"]]
            assert [r for r in (sample.reminder1, sample.reminder2) if r is not None] == times


def test_the_picture_changes_at_the_ground_truth_times(dataset: Dataset, videos: dict[str, Frames]) -> None:
    probed = 0
    for sample in dataset.samples:
        frames = videos[sample.key]
        assert sample.ground_truth is not None
        for event in sample.ground_truth["events"]:
            probe = event.get("probe")
            if probe is None:
                continue
            probed += 1
            before = picture_at(frames, event["time"] - 0.1)[probe["y"], probe["x"]].astype(int)
            after = picture_at(frames, event["time"])[probe["y"], probe["x"]].astype(int)
            assert np.abs(before - probe["before"]).max() < 40, (sample.key, event)
            assert np.abs(after - probe["after"]).max() < 40, (sample.key, event)
    assert probed >= 5


def test_the_dot_moves_left_then_right(dataset: Dataset, videos: dict[str, Frames]) -> None:
    (sample,) = [s for s in dataset.samples if s.split == "RTD_fine_grained_movement"]
    assert sample.ground_truth is not None
    turn = sample.ground_truth["events"][0]["time"]
    xs = []
    for t, image in videos[sample.key]:
        bright = np.argwhere(image.min(axis=2) > 200)
        xs.append((t, bright[:, 1].mean()))
    left = [x for t, x in xs if t <= turn]
    right = [x for t, x in xs if t >= turn]
    assert all(np.diff(left) < 0) and all(np.diff(right) > 0)
    track = {k["time"]: k["x"] for k in sample.ground_truth["track"]}
    assert abs(left[-1] - track[turn]) < 2


def test_the_squares_count_up(dataset: Dataset) -> None:
    (sample,) = [s for s in dataset.samples if s.split == "RTD_counting"]
    assert sample.ground_truth is not None
    assert [e["count"] for e in sample.ground_truth["events"]] == [1, 2, 3]
    assert sample.ground_truth["final_count"] == 3


def test_a_voice_that_does_not_fit_the_clips_gives_way_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    def rambling(text: str) -> npt.NDArray[np.float32]:
        return np.zeros(16_000 * 60, dtype=np.float32)

    def broken(text: str) -> npt.NDArray[np.float32]:
        raise OSError("no audio device")

    def unloadable() -> Callable[[str], npt.NDArray[np.float32]]:
        raise ValueError("not installed")

    voices = [
        ("unloadable", unloadable),
        ("broken", lambda: broken),
        ("rambling", lambda: rambling),
        ("buzz", lambda: builtin._buzz),
    ]
    monkeypatch.setattr(builtin, "_voices", lambda: iter(voices))
    voice, speeches = builtin._speak_all(["one two three"], [6.0])
    assert voice == "buzz"
    assert 0.3 < speeches[0].size / 16_000 < 2.0
