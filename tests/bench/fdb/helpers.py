"""Builders for FDB sample folders written in the tests: input.wav, a task file, output.wav, output.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from duplexkit.client.wavfile import write_wav


def sample_folder(
    folder: Path,
    *,
    task_file: str | None,
    task: Any = None,
    seconds: float = 4.0,
    words: list[tuple[str, float, float | None]] | None = None,
    output: bool = True,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_wav(folder / "input.wav", np.zeros(round(seconds * 16_000), dtype=np.float32), 16_000)
    if task_file is not None:
        (folder / task_file).write_text(json.dumps(task if task is not None else []), encoding="utf-8")
    if output:
        write_wav(folder / "output.wav", np.zeros(round(seconds * 24_000), dtype=np.float32), 24_000)
    if words is not None:
        chunks = [{"text": t, "timestamp": [s, e]} for t, s, e in words]
        (folder / "output.json").write_text(
            json.dumps({"text": " ".join(w[0] for w in words), "chunks": chunks}), encoding="utf-8"
        )
    return folder
