"""The settings of `--model moshi` (plain Python: the command line reads them without importing torch)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

FRAME_MS = 80
"""Moshi's frame: 1920 samples at 24 kHz."""


@dataclass(frozen=True, slots=True)
class MoshiArgs:
    """`--model-arg` keys of `--model moshi` (each field's metadata says what it does)."""

    checkpoint: str = ""
    device: str = "cpu"
    dtype: str = ""
    slots: int = 4
    batch_wait_ms: float | None = None
    temp: float | None = None
    temp_text: float | None = None
    top_k: int | None = None
    top_k_text: int | None = None
    speech_rms: float = 0.01
    end_silence_ms: float = 480.0
    max_response_ms: float = 60_000.0
    text_prompt: str = ""
    voice_prompt: str = ""
    voices: str = ""

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> MoshiArgs:
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(args) - set(known))
        if unknown:
            raise ValueError(f"unknown moshi model argument(s) {unknown}; known: {', '.join(sorted(known))}")
        values: dict[str, Any] = {}
        for name, raw in args.items():
            default = known[name].default
            try:
                if name in {"slots", "top_k", "top_k_text"}:
                    values[name] = int(raw)
                elif isinstance(default, float) or name in {"temp", "temp_text", "batch_wait_ms"}:
                    values[name] = float(raw)
                else:
                    values[name] = raw
            except ValueError:
                raise ValueError(f"{name}: not a number: {raw!r}") from None
        parsed = cls(**values)
        parsed.check()
        return parsed

    def check(self) -> None:
        if not self.checkpoint:
            raise ValueError("moshi needs --model-arg checkpoint=DIR|REPO_ID")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device: cpu or cuda[:N], got {self.device!r}")
        if self.dtype not in ("", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: float32, bfloat16 or float16, got {self.dtype!r}")
        if not 1 <= self.slots <= 1024:
            raise ValueError(f"slots: 1 to 1024, got {self.slots}")
        for name in ("batch_wait_ms", "speech_rms"):
            value = getattr(self, name)
            if value is None:
                continue
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: a finite number >= 0, got {value}")
        for name in ("end_silence_ms", "max_response_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= FRAME_MS):
                raise ValueError(f"{name}: at least one frame ({FRAME_MS} ms), got {value}")
