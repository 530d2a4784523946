"""The numbers FDB-v3's authors published, and which way each is better: the one home of both, for the
terminal summary (`scoring.format_summary`) and the report (`report`).

Rows from the FDB-v3 demo site's table and the paper's abstract (arXiv 2604.04847), as
`../shared/reference/tools.md` §4.4 records them; NVIDIA's Nemotron VoiceChat reports only its tool-selection
F1. Nothing here is ours.
"""

from __future__ import annotations

from dataclasses import dataclass

LOWER, HIGHER = "↓", "↑"

METRICS: dict[str, tuple[str, str, str]] = {
    "tool_selection": ("tool selection F1", HIGHER, "tool sel"),
    "argument": ("argument accuracy", HIGHER, "args"),
    "response_quality": ("response quality", HIGHER, "resp qual"),
    "pass_at_1": ("Pass@1", HIGHER, "Pass@1"),
    "turn_take": ("turn-take rate", HIGHER, "turn-take"),
    "latency_s": ("latency s", LOWER, "latency s"),
    "interruption": ("interruption rate", LOWER, "interrupt"),
}
"""Metric key → (label, the direction that is better, a short label for the terminal)."""


@dataclass(frozen=True)
class Published:
    """One system's published row (`None`: not published)."""

    system: str
    tool_selection: float | None
    argument: float | None
    response_quality: float | None
    pass_at_1: float | None
    turn_take: float | None
    latency_s: float | None
    interruption: float | None
    source: str


_DEMO = "FDB-v3 demo table"
PUBLISHED: tuple[Published, ...] = (
    Published("GPT-Realtime", 0.876, 0.680, 0.792, 0.600, 0.960, 6.89, 0.135, _DEMO),
    Published("Gemini 2.5 Live", 0.786, 0.593, 0.554, 0.490, 0.920, 7.26, 0.141, _DEMO),
    Published("Gemini 3.1 Live", 0.817, 0.588, 0.718, 0.540, 0.780, 4.25, 0.192, _DEMO),
    Published("Grok", 0.797, 0.542, 0.617, 0.430, 0.940, 6.65, 0.255, _DEMO),
    Published("Ultravox (v0.7)", 0.794, 0.513, 0.510, 0.410, 0.960, 8.40, 0.479, _DEMO),
    Published("Cascaded (Whisper→GPT-4o→TTS)", 0.803, 0.562, 0.655, 0.450, 1.000, 10.12, 0.330, _DEMO),
    Published(
        "Nemotron VoiceChat", 0.825, None, None, None, None, None, None, "NVIDIA (tool-selection F1 only)"
    ),
)
