"""The cascade's settings: process-wide ones from `--model-arg`, per-session ones also from `extra_body`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args

from duplexkit.models.base import ModelParameter, check_model_args
from duplexkit.models.cascade.asr import SearchSpec
from duplexkit.models.cascade.tts import TtsKind
from duplexkit.vad import VadParams, semantic_params

ResponderKind = Literal["auto", "local", "echo", "openai"]
AsrKind = Literal["auto", "whisper", "pocketsphinx"]
TurnKind = Literal["auto", "semantic", "silence"]
VadKind = Literal["auto", "onnx", "pysilero"]
VisionKind = Literal["auto", "rapidocr", "off"]
Eagerness = Literal["auto", "low", "medium", "high"]


@dataclass(frozen=True, slots=True)
class SessionParams:
    """Turn-taking and recognition settings a session may change through `extra_body`."""

    vad_threshold: float = 0.5
    vad_min_speech_ms: float = 96.0
    vad_silence_duration_ms: float = 500.0
    vad_prefix_padding_ms: float = 300.0
    min_barge_in_ms: float = 600.0
    turn_eagerness: Eagerness = "auto"
    eyes: bool = False
    """Read the text in the session's video frames and tell the responder (needs the model's eyes)."""
    """With semantic end of turn: how readily a pause ends the turn (`vad.SEMANTIC_EAGERNESS`)."""
    asr_grammar: str | None = None
    """A JSGF grammar replacing the open-vocabulary language model (deterministic recognition)."""
    asr_keywords: tuple[str, ...] | None = None
    """Key phrases to spot instead (a phrase may end with its own `/threshold/`)."""

    @property
    def vad(self) -> VadParams:
        """Silence-only turn ends: `vad_silence_duration_ms` of silence."""
        return VadParams(
            threshold=self.vad_threshold,
            min_speech_ms=self.vad_min_speech_ms,
            silence_duration_ms=self.vad_silence_duration_ms,
            prefix_padding_ms=self.vad_prefix_padding_ms,
        )

    def vad_for(self, semantic: bool) -> VadParams:
        """The detector's settings; `semantic`: the turn model decides at pauses, per `turn_eagerness`."""
        return semantic_params(self.vad, self.turn_eagerness) if semantic else self.vad

    @property
    def search(self) -> SearchSpec | None:
        if self.asr_grammar is not None:
            return SearchSpec.grammar(self.asr_grammar)
        if self.asr_keywords is not None:
            return SearchSpec.keywords(list(self.asr_keywords))
        return None

    def updated(self, values: Mapping[str, Any], *, from_operator: bool = False) -> SessionParams:
        """These settings with `values` applied; unknown keys are ignored (`extra_body` is shared with
        other consumers). A bad value raises `ValueError` naming its key. Only the operator
        (`from_operator`, i.e. `--model-arg`) may name a grammar file instead of inline JSGF."""
        changes: dict[str, Any] = {}
        for f in fields(self):
            if f.name in values:
                try:
                    changes[f.name] = _coerce_session(f.name, values[f.name], from_operator)
                except (TypeError, ValueError, OSError) as exc:
                    raise ValueError(f"{f.name}: {exc}") from None
        grammar, keywords = changes.get("asr_grammar"), changes.get("asr_keywords")
        if grammar is not None and keywords is not None:
            raise ValueError("asr_grammar, asr_keywords: give one or the other")
        if grammar is not None:
            changes["asr_keywords"] = None
        elif keywords is not None:
            changes["asr_grammar"] = None
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class CascadeConfig:
    """Process-wide settings (`--model-arg key=value`)."""

    chunk_period_ms: int = 50
    lead_ms: float = 400.0
    """Reply audio sent ahead of playback (> 0: with no lead nothing would ever be due). Kept short: the
    response ends when its last audio is released, so a barge-in in the last `lead_ms` of a reply can no
    longer cancel it and the client plays that much on (docs/performance.md, the demo's RTF)."""
    responder: ResponderKind = "auto"
    """`auto`: `local` when its extra is installed, else `echo`."""
    asr: AsrKind = "auto"
    """`auto`: Whisper when its extra is installed, else pocketsphinx (which grammar and key-phrase
    sessions always use)."""
    vision: VisionKind = "auto"
    """The eyes: text reading in video frames (`rapidocr`), for sessions that ask for it (their `eyes`);
    `auto`: if installed."""
    vad: VadKind = "auto"
    """Silero through `onnx`runtime (~10x cheaper per frame) or `pysilero`-vad; `auto`: onnx if installed."""
    turn: TurnKind = "auto"
    """End of turn: `semantic` (Smart Turn at pauses, silence as the fallback) or `silence` (the silence
    window only); `auto`: semantic when its extra is installed."""
    llm_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    llm_threads: int = 2
    """llama.cpp threads of the `local` responder."""
    tts: TtsKind = "auto"
    voice: str | None = None
    """A piper `.onnx` voice path, or an espeak-ng voice name."""
    no_speech_reply: str = "Sorry, I did not catch that."
    preempt_ms: float | None = None
    """Start recognising and preparing the reply once the user has paused this long (before the turn's
    end is confirmed); 0 turns it off. Default: the recogniser's tail (200 ms for pocketsphinx, 32 for
    Whisper), off for `openai`, where each pause that does not end the turn costs a discarded request."""

    @property
    def effective_preempt_ms(self) -> float | None:
        """`None`: once the recogniser has heard all of the pause it will (its `tail_ms`)."""
        if self.preempt_ms is not None:
            return self.preempt_ms
        return 0.0 if self.responder == "openai" else None

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> tuple[CascadeConfig, SessionParams]:
        """Split `--model-arg` pairs into process settings and per-session defaults; unknown keys and bad
        values raise `ValueError` naming the key."""
        check_model_args("cascade", PARAMETERS, args)
        own = {f.name for f in fields(cls)}
        session_keys = {f.name for f in fields(SessionParams)}
        changes: dict[str, Any] = {}
        for name in own & set(args):
            try:
                changes[name] = _CONFIG_COERCERS[name](args[name])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name}: {exc}") from None
        config = replace(cls(), **changes)
        if config.responder == "openai" and not (config.llm_url and config.llm_model):
            raise ValueError("responder=openai needs llm_url=... and llm_model=...")
        session = SessionParams().updated({k: args[k] for k in session_keys & set(args)}, from_operator=True)
        return config, session


def _coerce_session(name: str, raw: Any, from_operator: bool) -> Any:
    if name == "asr_grammar":
        if raw is None:
            return None
        if not isinstance(raw, str):
            raise TypeError("must be a JSGF grammar string")
        if from_operator and "#JSGF" not in raw:
            raw = Path(raw).read_text(encoding="utf-8")
        return SearchSpec.grammar(raw).source
    if name == "asr_keywords":
        if raw is None:
            return None
        if isinstance(raw, str):
            raw = [p.strip() for p in raw.split(",") if p.strip()] if from_operator else [raw]
        SearchSpec.keywords(raw)
        return tuple(raw)
    if name == "eyes":
        if isinstance(raw, str) and from_operator and raw in ("true", "false"):
            return raw == "true"
        if not isinstance(raw, bool):
            raise TypeError("must be true or false")
        return raw
    if name == "turn_eagerness":
        if raw not in get_args(Eagerness):
            raise ValueError(f"must be one of {', '.join(get_args(Eagerness))}")
        return raw
    value = _non_negative(raw)
    if name == "vad_threshold" and not 0.0 < value < 1.0:
        raise ValueError("must be between 0 and 1 (exclusive)")
    return value


def _non_negative(raw: Any) -> float:
    if isinstance(raw, bool):
        raise TypeError("must be a number")
    value = float(raw)
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a finite number >= 0")
    return value


def _positive(raw: str) -> float:
    value = _non_negative(raw)
    if value == 0:
        raise ValueError("must be > 0")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def coerce(raw: str) -> str:
        if raw not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return raw

    return coerce


def _threads(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 64:
        raise ValueError("must be an integer between 1 and 64")
    return value


def _period(raw: str) -> int:
    value = int(raw)
    if not 20 <= value <= 1000:
        raise ValueError("must be an integer between 20 and 1000")
    return value


_CONFIG_COERCERS: dict[str, Callable[[str], Any]] = {
    "chunk_period_ms": _period,
    "lead_ms": _positive,
    "responder": _choice(get_args(ResponderKind)),
    "asr": _choice(get_args(AsrKind)),
    "turn": _choice(get_args(TurnKind)),
    "vad": _choice(get_args(VadKind)),
    "vision": _choice(get_args(VisionKind)),
    "llm_url": str,
    "llm_model": str,
    "llm_api_key": str,
    "llm_threads": _threads,
    "tts": _choice(get_args(TtsKind)),
    "voice": str,
    "no_speech_reply": str,
    "preempt_ms": _non_negative,
}


PARAMETERS = (
    ModelParameter("chunk_period_ms", "unit length advertised to clients, 20-1000 (50)"),
    ModelParameter("lead_ms", "reply audio sent ahead of playback, > 0 (400)"),
    ModelParameter("responder", "local, echo or openai (auto: local if its extra is installed)"),
    ModelParameter("asr", "whisper or pocketsphinx (auto: whisper if installed)"),
    ModelParameter("turn", "semantic (Smart Turn at pauses) or silence (auto: semantic if installed)"),
    ModelParameter("vad", "onnx or pysilero (auto: onnx if installed)"),
    ModelParameter("vision", "rapidocr or off: read text in video frames (auto: if installed)"),
    ModelParameter("llm_url", "the openai responder's OpenAI-compatible /v1 base URL"),
    ModelParameter("llm_model", "the openai responder's model"),
    ModelParameter("llm_api_key", "the openai responder's key (default: $OPENAI_API_KEY)"),
    ModelParameter("llm_threads", "llama.cpp threads of the local responder, 1-64 (2)"),
    ModelParameter("tts", "piper or espeak (auto: piper if installed)"),
    ModelParameter("voice", "a piper .onnx voice path, or an espeak-ng voice name"),
    ModelParameter("no_speech_reply", "said when speech had no recognisable words"),
    ModelParameter("preempt_ms", "prepare the reply after this much pause; 0: off"),
    ModelParameter("vad_threshold", "speech probability threshold, in (0, 1) (0.5)"),
    ModelParameter("vad_min_speech_ms", "speech needed before a start (96)"),
    ModelParameter("vad_silence_duration_ms", "silence that ends a turn without Smart Turn (500)"),
    ModelParameter("vad_prefix_padding_ms", "audio kept before a start (300)"),
    ModelParameter("min_barge_in_ms", "voiced overlap that interrupts the reply (600)"),
    ModelParameter("turn_eagerness", "low, medium or high: how readily a pause ends the turn (auto)"),
    ModelParameter("eyes", "true: read the text in each session's video frames"),
    ModelParameter("asr_grammar", "a JSGF grammar (inline or a file) that restricts recognition"),
    ModelParameter("asr_keywords", "comma-separated key phrases to spot instead"),
)
"""Every `--model-arg` key: the process settings (`CascadeConfig`), then the per-session defaults
(`SessionParams`, which `extra_body` may override)."""
