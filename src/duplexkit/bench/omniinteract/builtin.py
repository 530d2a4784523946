"""The built-in OmniInteract-layout dataset: short synthetic streams with spoken questions and known answer
times, generated locally in the HF archive layout (`data/{1q1a,1q1a_math,1qna}`).

Six cases, 10-12 s each (320x240 at 10 fps, H.264 with a 16 kHz AAC soundtrack): a 1Q1A multi-turn case
(a realtime and a proactive question), a nested pair, a case whose first answer is interrupted by the next
question, a maths question, and two 1QnA cases (one per annotation form: `conversations` and `answers`).
The picture changes exactly at each answer time. Next to each annotation, `<name>.truth.json` holds the
keywords a correct answer names, for the offline judge. Deterministic, no downloads, a few seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from duplexkit.bench import sources
from duplexkit.bench.synth import (
    AUDIO_RATE_HZ,
    Audio,
    Frame,
    available_voice,
    speak_first_fitting,
    voice_loaders,
    write_mp4,
)

__all__ = ["BUILTIN_VERSION", "builtin_dir", "ensure_builtin", "generate_builtin"]

BUILTIN_VERSION = "1"
_WIDTH, _HEIGHT, _FPS = 320, 240, 10

Rgb = tuple[int, int, int]
GREY: Rgb = (90, 90, 90)
RED: Rgb = (220, 30, 30)
GREEN: Rgb = (30, 190, 60)
BLUE: Rgb = (40, 70, 230)
YELLOW: Rgb = (230, 210, 40)
WHITE: Rgb = (240, 240, 240)


@dataclass(frozen=True)
class _Question:
    at: float
    text: str
    answer_at: float
    answer: str
    keywords: tuple[str, ...]
    kind: str = "realtime"
    interrupted: bool = False


@dataclass(frozen=True)
class _Stream:
    subset: str
    path: str
    """The video's path below `videos*/`, without the suffix."""
    duration_s: float
    scene_type: str
    questions: tuple[_Question, ...]
    draw: Callable[[float], Frame]
    form: str = "1q1a"
    """`1q1a`, or the 1QnA annotation form: `conversations` or `answers`."""


def builtin_dir(cache_dir: Path | None = None) -> Path:
    """`<cache_dir>/omniinteract-builtin-<version>-<voice>` (default cache `~/.cache/duplexkit`)."""
    return (cache_dir or sources.cache_dir()) / f"omniinteract-builtin-{BUILTIN_VERSION}-{available_voice()}"


def ensure_builtin(cache_dir: Path | None = None) -> Path:
    """The built-in dataset's root, generated on first use (into a temporary sibling renamed into place)."""
    root = builtin_dir(cache_dir)
    sources.materialise(root, "data", generate_builtin)
    return root


def generate_builtin(dest: Path) -> Path:
    """Write the dataset under the existing directory `dest` (as `dest/data/...`); return `dest`."""
    streams = _streams()
    slots = [(s, q) for s in streams for q in s.questions if q.text]
    texts = [q.text for _, q in slots]

    def fits(speeches: list[Audio]) -> bool:
        # each question is spoken before its answer is due and before the stream's next question
        for (stream, question), speech in zip(slots, speeches, strict=True):
            later = [q.at for q in stream.questions if q.at > question.at]
            limit = min([question.answer_at, *later])
            if question.at + speech.size / AUDIO_RATE_HZ > limit - 0.2:
                return False
        return True

    voice, speeches = speak_first_fitting(texts, fits, voice_loaders())
    spoken = dict(zip((id(q) for _, q in slots), speeches, strict=True))
    maps: dict[str, list[dict[str, Any]]] = {}
    for stream in streams:
        folder = dest / "data" / stream.subset
        videos = folder / ("videos_bench" if stream.subset == "1qna" else "videos")
        video = videos / f"{stream.path}.mp4"
        annotation = folder / "annotations" / f"{stream.path}.json"
        video.parent.mkdir(parents=True, exist_ok=True)
        annotation.parent.mkdir(parents=True, exist_ok=True)
        soundtrack = np.zeros(round(stream.duration_s * AUDIO_RATE_HZ), dtype=np.float32)
        for question in (q for q in stream.questions if q.text):
            speech = spoken[id(question)]
            at = round(question.at * AUDIO_RATE_HZ)
            soundtrack[at : at + speech.size] = speech[: max(0, soundtrack.size - at)]
        write_mp4(
            video,
            stream.draw,
            round(stream.duration_s * _FPS),
            fps=_FPS,
            width=_WIDTH,
            height=_HEIGHT,
            audio=soundtrack,
        )
        annotation.write_text(json.dumps(_annotation(stream), indent=2) + "\n", encoding="utf-8")
        truth = {"voice": voice, "keywords": {q.answer: list(q.keywords) for q in stream.questions}}
        annotation.with_suffix(".truth.json").write_text(json.dumps(truth, indent=2) + "\n", encoding="utf-8")
        if stream.subset != "1qna":
            maps.setdefault(stream.subset, []).append(
                {
                    "video": f"videos/{stream.path}.mp4",
                    "annotation": f"annotations/{stream.path}.json",
                    "scene_type": stream.scene_type,
                }
            )
    for subset, entries in maps.items():
        text = json.dumps({"total": len(entries), "entries": entries}, indent=2) + "\n"
        (dest / "data" / subset / "video_json_map.json").write_text(text, encoding="utf-8")
    return dest


def _clock(seconds: float) -> str:
    """`MM:SS`, with a tenth when the time has one (the loader reads both)."""
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes):02d}:{rest:02.0f}" if rest == int(rest) else f"{int(minutes):02d}:{rest:04.1f}"


def _annotation(stream: _Stream) -> Any:
    if stream.form == "1q1a":
        return [
            {
                "question_time": _clock(q.at),
                "question_text": q.text,
                "answer_time": _clock(q.answer_at),
                "answer_text": q.answer,
                "question_type": q.kind,
                "is_interrupted": q.interrupted,
            }
            for q in stream.questions
        ]
    first = stream.questions[0]
    if stream.form == "conversations":
        turns: list[dict[str, Any]] = [{"from": "user", "value": first.text, "timestamp": _clock(first.at)}]
        turns += [
            {"from": "assistant", "value": q.answer, "timestamp": _clock(q.answer_at), "label": "step"}
            for q in stream.questions
        ]
        return {
            "question_time": _clock(first.at),
            "question_text": first.text,
            "inferred_knowledge": "",
            "conversations": turns,
        }
    return {
        "question_time": _clock(first.at),
        "question_text": first.text,
        "inferred_knowledge": "",
        "answers": [
            {"answer_time": _clock(q.answer_at), "answer_text": q.answer, "is_interrupted": q.interrupted}
            for q in stream.questions
        ],
    }


def _canvas(colour: Rgb) -> Frame:
    frame = np.empty((_HEIGHT, _WIDTH, 3), dtype=np.uint8)
    frame[:] = colour
    return frame


def _square(frame: Frame, x: int, colour: Rgb) -> None:
    frame[90:150, x : x + 60] = colour


def _streams() -> list[_Stream]:
    def colours(t: float) -> Frame:  # a red square from 3 s, turning blue at 8 s
        frame = _canvas(GREY)
        if t >= 3.0:
            _square(frame, 130, BLUE if t >= 8.0 else RED)
        return frame

    def light_and_dots(t: float) -> Frame:  # three dots from 6.5 s; the light turns green at 10 s
        frame = _canvas(GREY)
        frame[20:60, 20:60] = GREEN if t >= 10.0 else RED
        if t >= 6.5:
            for x in (100, 160, 220):
                frame[110:130, x : x + 20] = WHITE
        return frame

    def moving_dot(t: float) -> Frame:  # a dot sliding right, turning yellow at 8 s
        frame = _canvas(GREY)
        x = int(20 + 25 * t) % (_WIDTH - 20)
        frame[110:130, x : x + 20] = YELLOW if t >= 8.0 else WHITE
        return frame

    def sums(t: float) -> Frame:  # two squares, then three more at 4 s
        frame = _canvas(GREY)
        for n, x in enumerate((10, 70, 130, 190, 250)):
            if n < 2 or t >= 4.0:
                _square(frame, x, GREEN)
        return frame

    def kitchen(t: float) -> Frame:  # a bowl; an egg at 3.5 s, stirred at 6 s, poured at 9 s
        frame = _canvas(GREY)
        frame[150:200, 100:220] = WHITE
        if 3.5 <= t < 9.0:
            frame[120:150, 145:175] = YELLOW
        if t >= 6.0:
            frame[160:190, 110:210] = YELLOW
        if t >= 9.0:
            frame[200:230, 100:220] = YELLOW
        return frame

    def plant(t: float) -> Frame:  # a pot; a green sprout at 4 s, a red flower at 8 s
        frame = _canvas(GREY)
        frame[170:220, 130:190] = (120, 70, 30)
        if t >= 4.0:
            frame[120:170, 155:165] = GREEN
        if t >= 8.0:
            frame[100:120, 145:175] = RED
        return frame

    return [
        _Stream(
            "1q1a",
            "0001",
            12.0,
            "multi_turn",
            (
                _Question(0.5, "What colour is the square?", 3.0, "The square is red.", ("red",)),
                _Question(
                    5.0, "Tell me when it turns blue.", 8.0, "It just turned blue.", ("blue",), "proactive"
                ),
            ),
            colours,
        ),
        _Stream(
            "1q1a",
            "0002",
            12.0,
            "nested",
            (
                _Question(
                    0.5,
                    "Tell me when the light turns green.",
                    10.0,
                    "The light is green now.",
                    ("green",),
                    "proactive",
                ),
                _Question(4.0, "How many dots are there?", 6.5, "There are three dots.", ("three", "3")),
            ),
            light_and_dots,
        ),
        _Stream(
            "1q1a",
            "0003",
            12.0,
            "multi_turn",
            (
                _Question(
                    0.5,
                    "Describe the moving dot.",
                    3.0,
                    "A white dot slides to the right.",
                    ("right",),
                    interrupted=True,
                ),
                _Question(5.0, "What colour is the dot now?", 8.0, "The dot is yellow.", ("yellow",)),
            ),
            moving_dot,
        ),
        _Stream(
            "1q1a_math",
            "0001",
            10.0,
            "multi_turn",
            (_Question(1.0, "Add up the squares you see.", 4.0, "There are five squares.", ("five", "5")),),
            sums,
        ),
        _Stream(
            "1qna",
            "captaincook4d/omelette",
            12.0,
            "1qna",
            (
                _Question(
                    0.5, "Guide me through making an omelette.", 3.5, "Crack the egg into the bowl.", ("egg",)
                ),
                _Question(0.5, "", 6.0, "Now stir it.", ("stir",)),
                _Question(0.5, "", 9.0, "Pour it into the pan.", ("pour",)),
            ),
            kitchen,
            form="conversations",
        ),
        _Stream(
            "1qna",
            "egoper/plant",
            11.0,
            "1qna",
            (
                _Question(
                    1.0, "Tell me how the plant grows.", 4.0, "A green sprout has come up.", ("sprout",)
                ),
                _Question(1.0, "", 8.0, "Now it has a red flower.", ("flower",)),
            ),
            plant,
            form="answers",
        ),
    ]
