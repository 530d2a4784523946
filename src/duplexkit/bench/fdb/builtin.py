"""The built-in FDB dataset: synthetic samples in FDB's layout, generated offline, labelled synthetic.

Eight samples, two per task, spoken by the project's own voice (piper with the packaged voice,
deterministic; else espeak-ng), laid out as FDB lays out its data (`<task>/<id>/input.wav` + task file,
numeric sample ids as FDB's own folders have; version 1 named them `pause_1`, ..., which FDB's backchannel
script skips):

- `pause`: a sentence, a 2 s pause in mid-thought, the rest; the input ends right after it. Any reply is a
  take-over (the model should wait).
- `turn_taking`: a question then 4 s of silence; `turn_taking.json` spans the silence.
- `interruption`: a question, 4 s in which the model may answer, a second question cutting in, 4 s more;
  `interrupt.json` holds both turns' text and the interrupting turn's span.
- `backchannel`: a monologue of short sentences with 0.6 s gaps; the model should only backchannel.

Every task file carries `"synthetic": true`, so scores and reports say these numbers are not comparable
with published ones. The dataset is generated once into `<cache>/fdb-builtin-<version>-<voice>`
(a staging folder renamed into place).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from duplexkit.bench import sources
from duplexkit.bench.fdb.dataset import FdbDatasetError
from duplexkit.bench.sources import DatasetError
from duplexkit.client.wavfile import write_wav
from duplexkit.protocol.audio import resample

BUILTIN_VERSION = "2"
RATE_HZ = 16_000
LEAD_IN_S = 0.5
Audio = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Script:
    """One sample: what is said, in order, and the silence after each piece."""

    task: str
    id: str
    pieces: tuple[tuple[str, float], ...]
    """`(text, silence_after_s)`."""


SCRIPTS: tuple[Script, ...] = (
    Script("pause", "1", (("I was thinking we could go to the", 2.0), ("market on Saturday morning.", 0.3))),
    Script("pause", "2", (("The thing about my old car is", 2.0), ("that it never starts in winter.", 0.3))),
    Script("turn_taking", "1", (("What is the capital of France?", 4.0),)),
    Script("turn_taking", "2", (("Can you suggest a name for my new puppy?", 4.0),)),
    Script(
        "interruption",
        "1",
        (("Tell me about the history of the bicycle.", 4.0), ("Wait, who invented the pedals?", 4.0)),
    ),
    Script(
        "interruption",
        "2",
        (("How do I bake a loaf of bread?", 4.0), ("Sorry, can I do it without yeast?", 4.0)),
    ),
    Script(
        "backchannel",
        "1",
        (
            ("So yesterday I went hiking with my sister.", 0.6),
            ("We took the long trail by the lake.", 0.6),
            ("It started raining halfway up the hill.", 0.6),
            ("But we kept going anyway.", 0.5),
        ),
    ),
    Script(
        "backchannel",
        "2",
        (
            ("My neighbour has started learning the drums.", 0.6),
            ("He practices every evening after dinner.", 0.6),
            ("The walls in our building are very thin.", 0.6),
            ("So I hear every single beat.", 0.5),
        ),
    ),
)
TASK_FILE = {
    "pause": "pause.json",
    "turn_taking": "turn_taking.json",
    "interruption": "interrupt.json",
    "backchannel": "backchannel.json",
}


def _available_voice() -> str:
    """The voice this environment offers, without loading it: `piper`, `espeak`, or `none`."""
    if importlib.util.find_spec("piper") is not None:
        return "piper"
    return "espeak" if shutil.which("espeak-ng") else "none"


def _voice() -> Callable[[str], Audio]:
    """The project's synthesizer, resampled to 16 kHz; `FdbDatasetError` when there is none."""
    try:
        from duplexkit.models.cascade import tts
    except ImportError as exc:  # pragma: no cover - the cascade package ships with duplexkit
        raise FdbDatasetError("no_voice", f"speech synthesis unavailable ({exc})") from None
    try:
        synth: tts.Synthesizer = (
            tts.PiperSynthesizer(deterministic=True)
            if _available_voice() == "piper"
            else tts.EspeakSynthesizer()
        )
    except tts.TtsUnavailable as exc:
        raise FdbDatasetError(
            "no_voice", f"the built-in FDB dataset is spoken by a synthesizer: {tts.TTS_EXTRA_HINT} ({exc})"
        ) from None
    return lambda text: resample(synth.synthesize(text), synth.sample_rate_hz, RATE_HZ)


def builtin_root(cache_dir: Path | None = None) -> Path:
    """The built-in dataset's folder, generated on first use."""
    root = (cache_dir or sources.cache_dir()) / f"fdb-builtin-{BUILTIN_VERSION}-{_available_voice()}"
    try:
        sources.materialise(root, "manifest.json", generate)
    except FdbDatasetError:
        raise
    except DatasetError as exc:
        raise FdbDatasetError("bad_cache", str(exc)) from None
    return root


def generate(dest: Path, speak: Callable[[str], Audio] | None = None) -> None:
    """Write every sample under `dest` (an existing folder) and `manifest.json` last."""
    speak = speak or _voice()
    manifest = []
    for script in SCRIPTS:
        pieces: list[Audio] = [np.zeros(round(LEAD_IN_S * RATE_HZ), dtype=np.float32)]
        spans: list[tuple[float, float]] = []
        cursor = LEAD_IN_S
        for text, silence in script.pieces:
            speech = speak(text)
            spans.append((round(cursor, 3), round(cursor + len(speech) / RATE_HZ, 3)))
            pieces += [speech, np.zeros(round(silence * RATE_HZ), dtype=np.float32)]
            cursor += len(speech) / RATE_HZ + silence
        audio = np.concatenate(pieces)
        end_s = round(len(audio) / RATE_HZ, 3)
        folder = dest / script.task / script.id
        folder.mkdir(parents=True)
        write_wav(folder / "input.wav", audio, RATE_HZ)
        texts = [text for text, _ in script.pieces]
        task_file: object
        if script.task == "turn_taking":
            task_file = [{"text": texts[0], "timestamp": [spans[0][1], end_s], "synthetic": True}]
        elif script.task == "interruption":
            task_file = [
                {"context": texts[0], "interrupt": texts[1], "timestamp": list(spans[1]), "synthetic": True}
            ]
        elif script.task == "pause":
            task_file = [{"text": " ".join(texts), "pause": [spans[0][1], spans[1][0]], "synthetic": True}]
        else:
            task_file = {"text": " ".join(texts), "user_speech": [list(s) for s in spans], "synthetic": True}
        (folder / TASK_FILE[script.task]).write_text(json.dumps(task_file, indent=2), encoding="utf-8")
        manifest.append({"task": script.task, "id": script.id, "duration_s": end_s, "speech": spans})
    (dest / "manifest.json").write_text(
        json.dumps(
            {"version": BUILTIN_VERSION, "voice": _available_voice(), "synthetic": True, "samples": manifest},
            indent=2,
        ),
        encoding="utf-8",
    )
