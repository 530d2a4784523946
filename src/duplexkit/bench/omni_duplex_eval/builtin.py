"""The built-in Omni-DuplexEval-layout dataset: synthetic clips with known events, generated locally.

Six samples, one per task shape (three RTD, three PR), each a 6-10 s H.264 clip (320x240 at 10 fps) whose
content changes at known times, a spoken question padded with silence to the clip's length, reference answers
and reminder times that match the picture, and a ``ground_truth`` record (event times, counts, colours, pixel
probes, the voice used) for offline judging and tests. Generation is deterministic, needs no downloads and
takes a few seconds. The result is a folder in the Hugging Face layout of Omni-DuplexEval itself, so that
``datasets.load_dataset(FOLDER, split=SPLIT)`` (what the official batch scorers call) loads it as it loads
``Hothan/Omni-DuplexEval``: ``data/<split>-00000-of-00001.parquet`` per split with the dataset's fields
(``video`` and ``question_audio`` as ``{bytes, path}`` media cells holding the mp4 and wav files, ``path``
their names), a ``README.md`` whose YAML ``configs`` names each split's file, and ``ground_truth`` as a JSON
string column; our own loader reads it as any local HF-layout dataset.

The question voice is the best available of: the cascade model's TTS (piper in its deterministic mode, else
espeak-ng), espeak-ng directly, else a synthetic voiced signal (a harmonic buzz with one syllable per word).
``ground_truth["voice"]`` records which one spoke; the cached dataset keeps the voice it was generated with.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from duplexkit.bench import sources
from duplexkit.bench.synth import available_voice, buzz, speak_first_fitting, voice_loaders, write_mp4
from duplexkit.client.wavfile import write_wav

__all__ = ["BUILTIN_VERSION", "builtin_dir", "ensure_builtin", "generate_builtin"]

BUILTIN_VERSION = "2"

_WIDTH, _HEIGHT, _FPS = 320, 240, 10
_AUDIO_RATE = 16_000
_LEAD_IN_S = 0.3  # silence before the question starts
_TAIL_ROOM_S = 0.5  # the question must end at least this long before the clip does

Rgb = tuple[int, int, int]
Frame = npt.NDArray[np.uint8]
Audio = npt.NDArray[np.float32]

GREY: Rgb = (90, 90, 90)
DARK: Rgb = (25, 25, 35)
WHITE: Rgb = (240, 240, 240)
RED: Rgb = (220, 30, 30)
GREEN: Rgb = (30, 190, 60)
BLUE: Rgb = (40, 70, 230)
UNLIT: Rgb = (60, 60, 60)

_COLOUR_NAMES: dict[Rgb, str] = {
    GREY: "grey",
    DARK: "dark",
    WHITE: "white",
    RED: "red",
    GREEN: "green",
    BLUE: "blue",
    UNLIT: "dark grey",
}


def builtin_dir(cache_dir: Path | None = None) -> Path:
    """Where this version of the built-in dataset lives: ``<cache_dir>/builtin-<version>-<voice>``.

    The voice that can speak the questions here (``piper``, ``espeak``, else ``buzz``) is part of the name,
    so installing the ``tts`` extra later gives a new dataset spoken by it instead of reusing a buzzed one.
    ``cache_dir`` defaults to ``$XDG_CACHE_HOME/duplexkit`` (``~/.cache/duplexkit``).
    """
    return (cache_dir or sources.cache_dir()) / f"builtin-{BUILTIN_VERSION}-{available_voice()}"


_MARKER = "README.md"
"""Written last: its presence proves a whole dataset."""


def ensure_builtin(cache_dir: Path | None = None) -> Path:
    """Return the built-in dataset's folder, generating it on first use.

    Generation writes into a temporary sibling directory renamed into place, so concurrent or interrupted
    generations never leave a half-written dataset behind the final name.
    """
    root = builtin_dir(cache_dir)
    sources.materialise(root, _MARKER, generate_builtin)
    return root


def generate_builtin(dest: Path) -> Path:
    """Write the built-in dataset into the existing directory ``dest`` (see the module docstring)."""
    clips = _clips()
    voice, speeches = _speak_all([clip.question for clip in clips], [clip.duration_s for clip in clips])
    rows = []
    media = dest / ".media"
    media.mkdir()
    for clip, speech in zip(clips, speeches, strict=True):
        video, audio = media / f"{clip.id}.mp4", media / f"{clip.id}.wav"
        _write_video(video, clip)
        padded = np.zeros(round(clip.duration_s * _AUDIO_RATE), dtype=np.float32)
        start = round(_LEAD_IN_S * _AUDIO_RATE)
        padded[start : start + speech.size] = speech
        write_wav(audio, padded, _AUDIO_RATE)
        ground_truth = {
            **clip.ground_truth,
            "voice": voice,
            "question_start_s": _LEAD_IN_S,
            "question_end_s": round(_LEAD_IN_S + speech.size / _AUDIO_RATE, 3),
        }
        rows.append(
            {
                "split": clip.split,
                "id": clip.id,
                "question_text": clip.question,
                "answer1": clip.answer1,
                "answer2": clip.answer2,
                "reminder1": clip.reminder1,
                "reminder2": clip.reminder2,
                "video_type": "synthetic",
                "video_duration": clip.duration_s,
                "video": {"bytes": video.read_bytes(), "path": f"{clip.split}/{clip.id}.mp4"},
                "question_audio": {"bytes": audio.read_bytes(), "path": f"{clip.split}/{clip.id}.wav"},
                "ground_truth": json.dumps(ground_truth, sort_keys=True),
            }
        )
    shutil.rmtree(media)
    _write_hf_layout(dest, rows)
    return dest


def _write_hf_layout(dest: Path, rows: list[dict[str, Any]]) -> None:
    """One parquet file per split under ``data/`` and the README whose ``configs`` name them."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]

    cell = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema(
        [("id", pa.string())]
        + [(name, pa.string()) for name in ("question_text", "answer1", "answer2")]
        + [(name, pa.float64()) for name in ("reminder1", "reminder2")]
        + [("video_type", pa.string()), ("video_duration", pa.float64())]
        + [("video", cell), ("question_audio", cell), ("ground_truth", pa.string())]
    )
    splits = list(dict.fromkeys(row["split"] for row in rows))
    (dest / "data").mkdir()
    for split in splits:
        table = pa.Table.from_pylist([r for r in rows if r["split"] == split], schema=schema)
        pq.write_table(table, dest / "data" / f"{split}-00000-of-00001.parquet")
    files = "".join(f"  - split: {s}\n    path: data/{s}-*.parquet\n" for s in splits)
    readme = f"---\nconfigs:\n- config_name: default\n  data_files:\n{files}---\n\n# duplexkit built-in\n"
    (dest / _MARKER).write_text(readme, encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# Clips
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Clip:
    split: str
    id: str
    duration_s: float
    question: str
    answer1: str | None
    answer2: str | None
    reminder1: float | None
    reminder2: float | None
    draw: Callable[[float], Frame]
    ground_truth: dict[str, Any]


def _canvas(colour: Rgb) -> Frame:
    frame = np.empty((_HEIGHT, _WIDTH, 3), dtype=np.uint8)
    frame[:] = colour
    return frame


def _fill_rect(frame: Frame, x: int, y: int, w: int, h: int, colour: Rgb) -> None:
    frame[y : y + h, x : x + w] = colour


def _fill_disc(frame: Frame, cx: float, cy: float, radius: float, colour: Rgb) -> None:
    ys, xs = np.ogrid[:_HEIGHT, :_WIDTH]
    frame[(xs - cx) ** 2 + (ys - cy) ** 2 <= radius**2] = colour


def _probe(x: int, y: int, before: Rgb, after: Rgb) -> dict[str, Any]:
    """A pixel whose colour changes from ``before`` to ``after`` at the event's time."""
    return {"x": x, "y": y, "before": list(before), "after": list(after)}


def _counting_clip() -> _Clip:
    size, top = 60, 90
    squares = [(1.0, 30, RED), (3.0, 130, GREEN), (5.0, 230, BLUE)]

    def draw(t: float) -> Frame:
        frame = _canvas(GREY)
        for appears, x, colour in squares:
            if t >= appears:
                _fill_rect(frame, x, top, size, size, colour)
        return frame

    events = [
        {
            "time": appears,
            "description": f"a {_COLOUR_NAMES[colour]} square appears",
            "count": n,
            "colour": _COLOUR_NAMES[colour],
            "probe": _probe(x + size // 2, top + size // 2, GREY, colour),
        }
        for n, (appears, x, colour) in enumerate(squares, start=1)
    ]
    return _Clip(
        split="RTD_counting",
        id="squares_appear",
        duration_s=8.0,
        question="Count the coloured squares out loud, each time a new one appears.",
        answer1="A red square appears, so there is one square.",
        answer2="A green square and then a blue square join it, so there are three squares in total.",
        reminder1=None,
        reminder2=None,
        draw=draw,
        ground_truth={"events": events, "final_count": len(squares)},
    )


def _movement_clip() -> _Clip:
    track = [(0.0, 160.0), (4.0, 40.0), (8.0, 280.0)]  # (time, x) keyframes, linear in between
    y, radius = 120.0, 12.0

    def draw(t: float) -> Frame:
        frame = _canvas(GREY)
        x = float(np.interp(t, [k[0] for k in track], [k[1] for k in track]))
        _fill_disc(frame, x, y, radius, WHITE)
        return frame

    return _Clip(
        split="RTD_fine_grained_movement",
        id="dot_left_then_right",
        duration_s=8.0,
        question="Describe how the white dot moves while it is moving.",
        answer1="The white dot is moving to the left.",
        answer2="The dot has turned around and is now moving to the right.",
        reminder1=None,
        reminder2=None,
        draw=draw,
        ground_truth={
            "events": [{"time": 4.0, "description": "the dot stops moving left and starts moving right"}],
            "track": [{"time": t, "x": x, "y": y} for t, x in track],
            "segments": [
                {"start": 0.0, "end": 4.0, "direction": "left"},
                {"start": 4.0, "end": 8.0, "direction": "right"},
            ],
            "colour": "white",
        },
    )


# A 5x7 bitmap font, only the letters the OCR clip shows.
_FONT: dict[str, tuple[str, ...]] = {
    "C": (".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."),
    "D": ("####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."),
    "E": ("#####", "#....", "#....", "####.", "#....", "#....", "#####"),
    "L": ("#....", "#....", "#....", "#....", "#....", "#....", "#####"),
    "N": ("#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#", "#...#"),
    "O": (".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "P": ("####.", "#...#", "#...#", "####.", "#....", "#....", "#...."),
    "S": (".####", "#....", "#....", ".###.", "....#", "....#", "####."),
}
_FONT_SCALE = 6


def _text_mask(text: str) -> npt.NDArray[np.bool_]:
    """A frame-sized mask of ``text`` in the bitmap font, centred; lit cells are _FONT_SCALE pixels square."""
    cells = np.zeros((7, 6 * len(text) - 1), dtype=bool)
    for i, letter in enumerate(text):
        cells[:, 6 * i : 6 * i + 5] = np.array([[c == "#" for c in row] for row in _FONT[letter]])
    glyphs = np.kron(cells, np.ones((_FONT_SCALE, _FONT_SCALE), dtype=bool))
    mask = np.zeros((_HEIGHT, _WIDTH), dtype=bool)
    top, left = (_HEIGHT - glyphs.shape[0]) // 2, (_WIDTH - glyphs.shape[1]) // 2
    mask[top : top + glyphs.shape[0], left : left + glyphs.shape[1]] = glyphs
    return mask


def _changed_cell_centre(before: npt.NDArray[np.bool_], after: npt.NDArray[np.bool_]) -> tuple[int, int]:
    """Centre (x, y) of the first font-cell-sized block lit in ``after`` and unlit in ``before``."""
    s = _FONT_SCALE
    for y, x in np.argwhere(after & ~before):
        if after[y : y + s, x : x + s].all() and not before[y : y + s, x : x + s].any():
            return int(x) + s // 2, int(y) + s // 2
    raise AssertionError("the two texts light the same pixels")


def _ocr_clip() -> _Clip:
    change_s = 5.0
    panel: Rgb = WHITE
    signs = [("OPEN", GREEN), ("CLOSED", RED)]
    masks = [_text_mask(text) for text, _ in signs]

    def draw(t: float) -> Frame:
        frame = _canvas(DARK)
        _fill_rect(frame, 20, 60, _WIDTH - 40, _HEIGHT - 120, panel)
        index = int(t >= change_s)
        frame[masks[index]] = signs[index][1]
        return frame

    x, y = _changed_cell_centre(masks[0], masks[1])
    return _Clip(
        split="RTD_OCR",
        id="sign_open_closed",
        duration_s=9.0,
        question="Read out the text on the sign, and tell me whenever it changes.",
        answer1="The sign says OPEN in green letters.",
        answer2="The sign has changed and now says CLOSED in red letters.",
        reminder1=None,
        reminder2=None,
        draw=draw,
        ground_truth={
            "events": [
                {"time": 0.0, "description": "the sign reads OPEN", "text": "OPEN", "colour": "green"},
                {
                    "time": change_s,
                    "description": "the sign changes to CLOSED",
                    "text": "CLOSED",
                    "colour": "red",
                    "probe": _probe(x, y, panel, RED),
                },
            ]
        },
    )


def _correction_clip() -> _Clip:
    def draw(t: float) -> Frame:
        frame = _canvas(GREY)
        _fill_rect(frame, 110, 70, 100, 100, BLUE)
        return frame

    return _Clip(
        split="PR_correction",
        id="square_colour_claim",
        duration_s=7.0,
        question="The square is red, right? Correct me if I am wrong.",
        answer1="You are wrong: the square is blue, not red.",
        answer2=None,
        reminder1=None,
        reminder2=None,
        draw=draw,
        ground_truth={"events": [], "colour": "blue", "claimed_colour": "red", "count": 1},
    )


def _event_reminder_clip() -> _Clip:
    changes = [(4.0, RED), (7.0, BLUE)]

    def draw(t: float) -> Frame:
        colour = GREY
        for when, after in changes:
            if t >= when:
                colour = after
        return _canvas(colour)

    events = []
    before = GREY
    for when, after in changes:
        events.append(
            {
                "time": when,
                "description": f"the background turns {_COLOUR_NAMES[after]}",
                "colour": _COLOUR_NAMES[after],
                "probe": _probe(_WIDTH // 2, _HEIGHT // 2, before, after),
            }
        )
        before = after
    return _Clip(
        split="PR_event_reminder",
        id="background_changes_colour",
        duration_s=10.0,
        question="Tell me each time the background changes colour.",
        answer1="The background just turned red.",
        answer2="The background just turned blue.",
        reminder1=changes[0][0],
        reminder2=changes[1][0],
        draw=draw,
        ground_truth={"events": events},
    )


def _post_event_clip() -> _Clip:
    off_s = 5.0
    cx, cy, radius = 160, 120, 40

    def draw(t: float) -> Frame:
        frame = _canvas(DARK)
        _fill_disc(frame, cx, cy, radius, GREEN if t < off_s else UNLIT)
        return frame

    return _Clip(
        split="PR_post_event_reminder",
        id="light_turns_off",
        duration_s=9.0,
        question="When the green light goes off, remind me to take the cake out of the oven.",
        answer1="The green light is off: time to take the cake out of the oven.",
        answer2=None,
        reminder1=off_s,
        reminder2=None,
        draw=draw,
        ground_truth={
            "events": [
                {
                    "time": off_s,
                    "description": "the green light goes off",
                    "colour": "green",
                    "probe": _probe(cx, cy, GREEN, UNLIT),
                }
            ]
        },
    )


def _clips() -> list[_Clip]:
    return [
        _counting_clip(),
        _movement_clip(),
        _ocr_clip(),
        _correction_clip(),
        _event_reminder_clip(),
        _post_event_clip(),
    ]


def _write_video(path: Path, clip: _Clip) -> None:
    """Encode the clip as H.264 mp4 with frame k at k / _FPS seconds (see `synth.write_mp4`)."""
    write_mp4(path, clip.draw, round(clip.duration_s * _FPS), fps=_FPS, width=_WIDTH, height=_HEIGHT)


# --------------------------------------------------------------------------------------------------
# Voices
# --------------------------------------------------------------------------------------------------

_voices = voice_loaders
_buzz = buzz


def _speak_all(questions: list[str], durations: list[float]) -> tuple[str, list[Audio]]:
    """Speak the questions with the first voice that loads and fits each in its clip: (voice name, audio)."""

    def fits(speeches: list[Audio]) -> bool:
        return all(
            _LEAD_IN_S + s.size / _AUDIO_RATE <= d - _TAIL_ROOM_S
            for s, d in zip(speeches, durations, strict=True)
        )

    return speak_first_fitting(questions, fits, _voices())
