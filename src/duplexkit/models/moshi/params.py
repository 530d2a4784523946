"""The settings of `--model moshi` (plain Python: the command line reads them without importing torch)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from duplexkit.models.base import ModelParameter, check_model_args

FRAME_MS = 80
"""Moshi's frame: 1920 samples at 24 kHz."""


@dataclass(frozen=True, slots=True)
class MoshiArgs:
    """`--model-arg` keys of `--model moshi` (each field's metadata says what it does)."""

    checkpoint: str = field(
        default="",
        metadata={
            "help": "a folder in Kyutai's HF layout, or a repo id in the local HF cache (never downloaded)"
        },
    )
    config: str = field(
        default="",
        metadata={
            "help": "a configuration file used instead of the checkpoint's config.json (as moshi.server "
            "--config-path); without either, moshi's built-in 7B configuration"
        },
    )
    device: str = field(default="cpu", metadata={"help": "cpu, cuda or cuda:N"})
    dtype: str = field(
        default="",
        metadata={"help": "float32, bfloat16 or float16 (default: float32 on CPU, bfloat16 on CUDA)"},
    )
    slots: int = field(default=4, metadata={"help": "sessions one model instance holds (batched slots)"})
    batch_wait_ms: float | None = field(
        default=None,
        metadata={
            "help": "how long a due frame waits for others to share its tick (default 60 on CUDA, 20 on CPU)"
        },
    )
    temp: float | None = field(
        default=None,
        metadata={"help": "audio sampling temperature (default: the checkpoint's lm_gen_config, else 0.8)"},
    )
    temp_text: float | None = field(
        default=None, metadata={"help": "text sampling temperature (default: lm_gen_config, else 0.7)"}
    )
    top_k: int | None = field(
        default=None, metadata={"help": "audio top-k (default: lm_gen_config, else 250)"}
    )
    top_k_text: int | None = field(
        default=None, metadata={"help": "text top-k (default: lm_gen_config, else 25)"}
    )
    speech_rms: float = field(
        default=0.01,
        metadata={"help": "RMS of the model's audio from which a padding frame still counts as speech"},
    )
    end_silence_ms: float = field(default=480.0, metadata={"help": "quiet ms that end a reply"})
    max_response_ms: float = field(
        default=60_000.0, metadata={"help": "longest reply; clients may lower it, never raise it"}
    )
    text_prompt: str = field(
        default="", metadata={"help": "default persona text (PersonaPlex system prompt)"}
    )
    voice_prompt: str = field(
        default="", metadata={"help": "default voice prompt: a name in the voices folder"}
    )
    voices: str = field(default="", metadata={"help": "folder of voice prompts clients may name (NAME.wav)"})
    persona_cache: int = field(
        default=2,
        metadata={
            "help": "personas whose prefilled state is kept, so the next session with the same persona "
            "starts at once (each holds one slot's KV cache: ~1.5 GiB for a 7B model in bf16); 0: off"
        },
    )

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> MoshiArgs:
        check_model_args("moshi", PARAMETERS, args)
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for name, raw in args.items():
            default = known[name].default
            try:
                if name in {"slots", "top_k", "top_k_text", "persona_cache"}:
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
        if not 0 <= self.persona_cache <= 64:
            raise ValueError(f"persona_cache: 0 to 64, got {self.persona_cache}")
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


PARAMETERS = tuple(ModelParameter(f.name, f.metadata["help"]) for f in fields(MoshiArgs))
"""`--model-arg` keys of `--model moshi`, from `MoshiArgs` (the one source)."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """`LMGen`'s sampling knobs; slots with different values are stepped in separate masked passes."""

    temp: float
    temp_text: float
    top_k: int
    top_k_text: int
