"""The OmniInteract loader: the HF archive layout on disk, the HF cache (never a download), selection, and
clear errors naming the file and the field."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from duplexkit.bench.omniinteract.dataset import Selection, load_dataset, parse_time
from duplexkit.bench.sources import DatasetError

QA_ROW = {
    "question_time": "00:01",
    "question_text": "What colour is it?",
    "answer_time": "00:03",
    "answer_text": "Red.",
    "question_type": "realtime",
    "is_interrupted": False,
}


def write_layout(root: Path, rows: list[dict[str, Any]] | None = None, scene: str = "multi_turn") -> Path:
    """data/1q1a with one case, data/1qna with one case (no map: paired by path)."""
    subset = root / "data" / "1q1a"
    (subset / "videos").mkdir(parents=True)
    (subset / "annotations").mkdir()
    (subset / "videos" / "0001.mp4").write_bytes(b"not decoded while loading")
    (subset / "annotations" / "0001.json").write_text(json.dumps(rows if rows is not None else [QA_ROW]))
    entry = {"video": "videos/0001.mp4", "annotation": "annotations/0001.json", "scene_type": scene}
    (subset / "video_json_map.json").write_text(json.dumps({"total": 1, "entries": [entry]}))
    qna = root / "data" / "1qna"
    (qna / "videos_bench" / "egoper").mkdir(parents=True)
    (qna / "annotations" / "egoper").mkdir(parents=True)
    (qna / "videos_bench" / "egoper" / "tea.mp4").write_bytes(b"x")
    qna_annotation = {
        "question_time": "00:02",
        "question_text": "Guide me.",
        "inferred_knowledge": "tea",
        "answers": [
            {"answer_time": "00:09", "answer_text": "Pour.", "interrupted": True, "label": "step"},
            {"answer_time": "00:05", "answer_text": "Boil.", "label": "step"},
        ],
    }
    (qna / "annotations" / "egoper" / "tea.json").write_text(json.dumps(qna_annotation))
    return root


def test_the_archive_layout_loads_both_annotation_forms(tmp_path: Path) -> None:
    dataset = load_dataset(str(write_layout(tmp_path)), Selection())
    assert [c.key for c in dataset.samples] == ["1q1a/0001", "1qna/egoper__tea"]
    first, qna = dataset.samples
    assert (first.qas[0].question_time, first.qas[0].answer_time, first.scene_type) == (
        1.0,
        3.0,
        "multi_turn",
    )
    assert qna.scene_type == "1qna"
    assert [(q.answer_time, q.answer_text, q.interrupted) for q in qna.qas] == [
        (5.0, "Boil.", False),
        (9.0, "Pour.", True),
    ]
    assert dataset.source == str(tmp_path.resolve())


def test_a_conversations_annotation_asks_at_its_first_user_turn(tmp_path: Path) -> None:
    """build_slots.py (de304ce) `_parse_1qna_answers`: with `conversations`, the first user turn's timestamp
    and value are the question (over `question_time`), and `inferred_knowledge` goes before the text."""
    write_layout(tmp_path)
    annotation = {
        "question_time": "00:01",
        "question_text": "ignored",
        "inferred_knowledge": "It is green tea.",
        "conversations": [
            {"from": "user", "value": "Guide me.", "timestamp": "00:03"},
            {"from": "assistant", "value": "Boil.", "timestamp": "00:06", "label": "step"},
        ],
    }
    (tmp_path / "data" / "1qna" / "annotations" / "egoper" / "tea.json").write_text(json.dumps(annotation))
    (qa,) = load_dataset(str(tmp_path), Selection(subsets=("1qna",))).samples[0].qas
    assert (qa.question_time, qa.question_text) == (3.0, "It is green tea.\n\nGuide me.")


@pytest.mark.parametrize(
    ("rows", "scene", "message"),
    [
        (
            [{**QA_ROW, "question_time": "1:75"}],
            "multi_turn",
            "0001.json: [0]: field 'question_time' is '1:75'",
        ),
        ([{**QA_ROW, "answer_time": "soon"}], "multi_turn", "field 'answer_time' is 'soon', not a time"),
        (
            [{k: v for k, v in QA_ROW.items() if k != "answer_text"}],
            "multi_turn",
            "field 'answer_text' is missing",
        ),
        ([{**QA_ROW, "question_type": "reactive"}], "multi_turn", "field 'question_type' is 'reactive'"),
        ([QA_ROW], "branching", "video_json_map.json: entries[0]: field 'scene_type' is 'branching'"),
        ([{**QA_ROW, "answer_time": "00:00"}], "multi_turn", "'answer_time' (0.0 s) is before question_time"),
    ],
)
def test_a_malformed_annotation_names_the_file_and_the_field(
    tmp_path: Path, rows: list[dict[str, Any]], scene: str, message: str
) -> None:
    write_layout(tmp_path, rows, scene)
    with pytest.raises(
        DatasetError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        load_dataset(str(tmp_path), Selection())


@pytest.mark.parametrize(
    ("text", "seconds"), [("00:07", 7.0), ("02:05", 125.0), ("1:02:03", 3723.0), ("00:03.5", 3.5), (12, 12.0)]
)
def test_times(text: Any, seconds: float) -> None:
    assert parse_time(text, "a.json", "question_time") == seconds


def test_selection_by_subset_scenario_id_and_limit(tmp_path: Path) -> None:
    root = str(write_layout(tmp_path))
    assert [c.key for c in load_dataset(root, Selection(subsets=("1qna",))).samples] == ["1qna/egoper__tea"]
    assert [c.key for c in load_dataset(root, Selection(scenarios=("interrupted",))).samples] == [
        "1qna/egoper__tea"
    ]
    assert [c.key for c in load_dataset(root, Selection(scenarios=("realtime",))).samples] == ["1q1a/0001"]
    assert [c.key for c in load_dataset(root, Selection(ids=("0001",))).samples] == ["1q1a/0001"]
    assert len(load_dataset(root, Selection(limit=1)).samples) == 1
    with pytest.raises(DatasetError, match="unknown subset '1q2a'"):
        load_dataset(root, Selection(subsets=("1q2a",)))
    with pytest.raises(DatasetError, match="ids not in the dataset: '9999'"):
        load_dataset(root, Selection(ids=("9999",)))


@pytest.fixture
def hf_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hub" / "datasets--lucky-lance--OmniInteract"


def test_a_cached_hub_snapshot_with_the_archive_is_extracted_once_and_never_downloaded(
    hf_home: Path, tmp_path: Path
) -> None:
    layout = write_layout(tmp_path / "src")
    snapshot = hf_home / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (hf_home / "refs").mkdir()
    (hf_home / "refs" / "main").write_text("abc123")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(layout / "data", arcname="data")
    (snapshot / "data.tar.gz").write_bytes(buffer.getvalue())
    cache = tmp_path / "cache"
    dataset = load_dataset("lucky-lance/OmniInteract", Selection(), cache_dir=cache)
    assert dataset.source == "lucky-lance/OmniInteract@abc123"
    assert len(dataset.samples) == 2 and (cache / "omniinteract-abc123" / ".complete").is_file()


def test_a_hub_id_not_in_the_cache_is_a_clear_error(hf_home: Path) -> None:
    with pytest.raises(DatasetError, match=r"not in the local Hugging Face cache .* never downloads"):
        load_dataset("lucky-lance/OmniInteract", Selection())
